"""Live streams leave out a completed item's text when the client already holds it,
and the client's fold still gives exactly the state a fresh snapshot gives."""

from __future__ import annotations

from typing import Any

import trio
import trio_websocket

from t3orch.domain.turn_items import AssistantMessage
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    TurnCompleted,
    TurnStarted,
)
from tests.api.reduce import DetailFold
from tests.api.support import TIMEOUT, Api, Client, running_api, ws_client
from tests.api.writes import new_thread, streamed_turn
from tests.store.support import started_turn

LONG = "a streamed reply, with é and — in it. " * 20


async def frames_until_reply_completed(client: Client) -> list[dict[str, Any]]:
    """Event frames' params up to the completed assistant message's upsert."""
    got: list[dict[str, Any]] = []
    with trio.fail_after(TIMEOUT):
        while True:
            note = await client.note()
            assert note["method"] == "event", note
            got.append(note["params"])
            event = note["params"]["event"]
            if event["type"] != "turn_item.upserted":
                continue
            item = event["payload"]["item"]
            if item["type"] == "assistant_message" and item["status"] == "completed":
                return got


async def folds_to_the_final_view(
    client: Client, tid: str, snapshot: dict[str, Any], frames: list[dict[str, Any]]
) -> None:
    final = await client.call("view.read", {"topic": "threadDetail", "threadId": tid})
    log = (await client.call("events.read", {"afterSequence": 0, "limit": 5000}))["events"]
    head = max(e["sequence"] for e in log if e["threadId"] == tid)
    with trio.fail_after(TIMEOUT):
        while frames[-1]["sequence"] < head:
            note = await client.note()
            assert note["method"] == "event", note
            frames.append(note["params"])
    fold = DetailFold(snapshot)
    for frame in frames:
        fold.apply(frame["event"], frame.get("unchanged", ()))
    assert fold.state() == DetailFold.of(final["data"])


def completion(frames: list[dict[str, Any]]) -> dict[str, Any]:
    (done,) = [
        f
        for f in frames
        if f["event"]["type"] == "turn_item.upserted"
        and f["event"]["payload"]["item"]["status"] == "completed"
        and f["event"]["payload"]["item"]["type"] == "assistant_message"
    ]
    return done


async def subscribed(api: Api, client: Client, tid: str) -> dict[str, Any]:
    await client.call("subscribe", {"topic": "threadDetail", "threadId": tid})
    snap = await client.note()
    assert snap["method"] == "snapshot"
    data: dict[str, Any] = snap["params"]["data"]
    return data


async def test_a_live_subscriber_gets_the_completion_without_the_streamed_text() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        async with ws_client(api) as client:
            snapshot = await subscribed(api, client, tid)
            await streamed_turn(api.core, tid, LONG, step=100)
            frames = await frames_until_reply_completed(client)
            done = completion(frames)
            assert done["unchanged"] == ["text"]
            assert "text" not in done["event"]["payload"]["item"]
            await folds_to_the_final_view(client, tid, snapshot, frames)
            # The stored event is unchanged: a read of the log has the whole text.
            (stored,) = [
                e
                for e in (await client.call("events.read", {"afterSequence": 0}))["events"]
                if e["sequence"] == done["sequence"]
            ]
            assert stored["payload"]["item"]["text"] == LONG


async def test_a_subscriber_that_joins_mid_item_rebuilds_the_same_text() -> None:
    async with running_api() as api:
        core = api.core
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        await core.service.ingest(
            b,
            [
                TurnStarted(native_turn_ref="t1"),
                ItemStarted(native_item_ref="m1", content=AssistantMessage()),
                ItemDelta(native_item_ref="m1", text=LONG[:150]),
            ],
        )
        async with ws_client(api) as client:
            snapshot = await subscribed(api, client, tid)
            (item,) = [i for i in snapshot["turnItems"] if i["type"] == "assistant_message"]
            assert item["text"] == LONG[:150]
            await core.service.ingest(b, [ItemDelta(native_item_ref="m1", text=LONG[150:])])
            await core.service.ingest(
                b,
                [
                    ItemCompleted(native_item_ref="m1", content=AssistantMessage(text=LONG)),
                    TurnCompleted(native_turn_ref="t1", status="completed"),
                ],
            )
            frames = await frames_until_reply_completed(client)
            assert completion(frames)["unchanged"] == ["text"]
            await folds_to_the_final_view(client, tid, snapshot, frames)


async def test_a_completion_that_differs_from_the_stream_is_sent_whole() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        async with ws_client(api) as client:
            snapshot = await subscribed(api, client, tid)
            final = LONG.replace("reply", "answer")
            await streamed_turn(api.core, tid, LONG, step=100, final=final)
            frames = await frames_until_reply_completed(client)
            done = completion(frames)
            assert "unchanged" not in done
            assert done["event"]["payload"]["item"]["text"] == final
            await folds_to_the_final_view(client, tid, snapshot, frames)


async def test_a_replayed_gap_is_sent_as_stored() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        async with ws_client(api) as live:
            await subscribed(api, live, tid)
            cursor = (await live.call("events.read", {"afterSequence": 0}))["headSequence"]
            await streamed_turn(api.core, tid, LONG, step=100)
            await frames_until_reply_completed(live)  # the live stream has passed it
        async with ws_client(api) as client:
            await client.call(
                "subscribe", {"topic": "threadDetail", "threadId": tid, "afterSequence": cursor}
            )
            frames = []
            with trio.fail_after(TIMEOUT):
                while (note := await client.note())["method"] != "synchronized":
                    frames.append(note["params"])
            stored = (await client.call("events.read", {"afterSequence": cursor}))["events"]
            assert [f["event"] for f in frames] == [e for e in stored if e["threadId"] == tid]
            assert all("unchanged" not in f for f in frames)


async def test_stream_frames_are_websocket_text_frames() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        stream = await trio.open_tcp_stream("127.0.0.1", api.endpoints.port)
        headers = [(b"authorization", f"Bearer {api.token}".encode())]
        async with trio.open_nursery() as nursery:
            ws = await trio_websocket.wrap_client_stream(
                nursery, stream, "127.0.0.1", "/", extra_headers=headers
            )
            await ws.send_message(
                '{"jsonrpc":"2.0","id":1,"method":"subscribe",'
                f'"params":{{"topic":"threadDetail","threadId":"{tid}"}}}}'
            )
            await streamed_turn(api.core, tid, LONG, step=100)
            messages = []
            with trio.fail_after(TIMEOUT):
                while not any('"status":"completed"' in m for m in messages[2:]):
                    message = await ws.get_message()
                    assert isinstance(message, str)  # a text frame, not binary
                    messages.append(message)
            await ws.aclose()
            nursery.cancel_scope.cancel()
        await stream.aclose()
