"""The live lane: streamed text reaches ``threadDetail`` subscribers before it commits.

A real core, the real ingest stream fed through its queue (as an adapter feeds it),
``serve_api`` on real sockets; the client folds ``liveText`` frames provisionally
and the committed events exactly, as docs/api.md ("Live text") tells clients to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from t3orch.core import open_core
from t3orch.domain.turn_items import AssistantMessage
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.live import LiveLane
from t3orch.ingest.queue import EventQueue
from t3orch.ingest.stream import IngestStream
from t3orch.live import LiveHub, LiveSubscription, LiveText
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    TurnCompleted,
    TurnStarted,
)
from tests.api.support import TIMEOUT, Api, Client, running_api, unix_client
from tests.core.test_stream import Owner
from tests.store.support import new_thread, started_turn


@attrs.define
class _Streaming:
    thread_id: str
    binding: SessionBinding
    stream: IngestStream
    queue: EventQueue


@asynccontextmanager
async def _turn(api: Api) -> AsyncIterator[_Streaming]:
    tid = await new_thread(api.core.service)
    binding = await started_turn(api.core.service, tid)
    assert binding.turn is not None
    stream = IngestStream(api.core.service, binding.with_turn(None), Owner(api.core))
    stream.turn_started(binding.turn)
    queue = EventQueue()
    async with trio.open_nursery() as nursery:
        await nursery.start(stream.run, queue)
        yield _Streaming(tid, binding, stream, queue)
        queue.close()


@attrs.define
class _View:
    """A client's view of one item: committed text, and the provisional live text."""

    committed: dict[str, str] = attrs.field(factory=dict)
    provisional: dict[str, str] = attrs.field(factory=dict)
    #: Each time the shown text changed: (frame kind, text shown).
    shown: list[tuple[str, str]] = attrs.field(factory=list)
    live_frames: int = 0
    delta_events: int = 0
    sequences: list[int] = attrs.field(factory=list)

    def text(self, item: str) -> str:
        c, p = self.committed.get(item, ""), self.provisional.get(item, "")
        return p if len(p) > len(c) and p.startswith(c) else c

    def apply(self, note: dict[str, Any]) -> str | None:
        """Fold one notification; returns the item it concerned."""
        params = note["params"]
        if note["method"] == "liveText":
            self.live_frames += 1
            item, base = params["itemId"], self.text(params["itemId"])
            assert params["field"] is None
            assert isinstance(params["afterSequence"], int)
            if params["offset"] <= len(base):
                self.provisional[item] = base[: params["offset"]] + params["text"]
            self.shown.append(("live", self.text(item)))
            return str(item)
        if note["method"] == "snapshot":
            for item in params["data"]["turnItems"]:
                if item["type"] == "assistant_message":
                    self.committed[item["id"]] = item["text"]
            return None
        assert note["method"] == "event", note
        self.sequences.append(params["sequence"])
        event = params["event"]
        payload = event["payload"]
        if event["type"] == "turn_item.delta":
            self.delta_events += 1
            item = payload["itemId"]
            self.committed[item] = self.committed.get(item, "") + payload["text"]
        elif event["type"] == "turn_item.upserted" and payload["item"]["type"] == (
            "assistant_message"
        ):
            item = payload["item"]["id"]
            if "text" in payload["item"]:
                self.committed[item] = payload["item"]["text"]
            if payload["item"]["status"] != "running":
                self.provisional.pop(item, None)
        else:
            return None
        self.shown.append(("event", self.text(item)))
        return str(item)


async def _subscribe(client: Client, thread_id: str) -> str:
    res = await client.call("subscribe", {"topic": "threadDetail", "threadId": thread_id})
    return str(res["subscription"])


async def _until_completed(client: Client, view: _View) -> None:
    with trio.fail_after(TIMEOUT):
        while True:
            note = await client.note()
            assert note["method"] != "resync", note
            view.apply(note)
            params = note["params"]
            if (
                note["method"] == "event"
                and params["event"]["type"] == "run.upserted"
                and params["event"]["payload"]["run"]["status"] == "completed"
            ):
                return


WORDS = [f"word{i} " for i in range(40)]
_START = [
    TurnStarted(native_turn_ref="t1"),
    ItemStarted(native_item_ref="m1", content=AssistantMessage()),
]


async def test_live_text_arrives_before_its_delta_commits_and_folds_to_the_committed_text() -> None:
    async with running_api() as api, _turn(api) as t, unix_client(api) as client:
        await _subscribe(client, t.thread_id)
        view = _View()
        view.apply(await client.note())  # the snapshot
        t.queue.put_all(_START)
        # 40 words, 10 ms apart: the coalescer stores them in about two deltas.
        first_live_before_delta: bool | None = None
        for word in WORDS:
            t.queue.put(ItemDelta(native_item_ref="m1", text=word))
            await trio.sleep(0.01)
            while client.notes or first_live_before_delta is None:
                with trio.move_on_after(0.005):
                    note = await client.note()
                    view.apply(note)
                    if first_live_before_delta is None and note["method"] == "liveText":
                        first_live_before_delta = view.delta_events == 0
                    continue
                break
        text = "".join(WORDS)
        t.queue.put_all(
            [
                ItemCompleted(native_item_ref="m1", content=AssistantMessage(text=text)),
                TurnCompleted(native_turn_ref="t1", status="completed"),
            ]
        )
        await _until_completed(client, view)
    assert first_live_before_delta is True
    # Many live updates where the committed path gave a handful.
    assert view.delta_events <= 4, view.delta_events
    assert view.live_frames >= 15, view.live_frames
    # Every text shown grew towards the final one, and ended exactly as committed.
    for _, shown in view.shown:
        assert text.startswith(shown), shown
    lengths = [len(s) for _, s in view.shown]
    assert lengths == sorted(lengths)
    assert view.shown[-1] == ("event", text)
    assert len({s for kind, s in view.shown if kind == "live"}) >= 15


async def test_live_pieces_name_the_offset_and_the_last_committed_sequence() -> None:
    async with running_api() as api, _turn(api) as t, unix_client(api) as client:
        await _subscribe(client, t.thread_id)
        await client.note()  # the snapshot
        t.queue.put_all(
            [
                TurnStarted(native_turn_ref="t1"),
                ItemStarted(native_item_ref="m1", content=AssistantMessage(text="pre:")),
                ItemDelta(native_item_ref="m1", text="ab"),
            ]
        )
        lives: list[dict[str, Any]] = []
        started_at: int | None = None
        delta_at: list[int] = []
        with trio.fail_after(TIMEOUT):
            while len(lives) < 2:
                note = await client.note()
                params = note["params"]
                if note["method"] == "liveText":
                    lives.append(params)
                elif params["event"]["type"] == "turn_item.delta":
                    delta_at.append(params["sequence"])
                elif params["event"]["type"] == "turn_item.upserted":
                    started_at = params["sequence"]
                    # The item's start is committed, "ab" still in the coalescer.
                    t.queue.put(ItemDelta(native_item_ref="m1", text="cd"))
        t.queue.put(TurnCompleted(native_turn_ref="t1", status="completed"))
    first, second = lives
    assert (first["offset"], first["text"]) == (4, "ab")  # after the started text
    assert (second["offset"], second["text"]) == (6, "cd")
    assert first["threadId"] == t.thread_id and first["itemId"] == second["itemId"]
    assert "sequence" not in first
    # Read before the item's start committed; the second after it, before any delta.
    assert started_at is not None
    assert first["afterSequence"] < started_at <= second["afterSequence"]
    assert delta_at == [] or delta_at[0] > second["afterSequence"]


async def test_a_slow_subscriber_loses_live_text_never_a_committed_event() -> None:
    async with running_api() as api, _turn(api) as t, unix_client(api) as client:
        sub = await _subscribe(client, t.thread_id)
        view = _View()
        view.apply(await client.note())
        t.queue.put_all(_START)
        # Far more text than the socket buffers hold, while the client reads nothing.
        chunk = "x" * 4000
        for _ in range(400):
            t.queue.put(ItemDelta(native_item_ref="m1", text=chunk))
            await trio.sleep(0.001)
        text = chunk * 400
        t.queue.put_all(
            [
                ItemCompleted(native_item_ref="m1", content=AssistantMessage(text=text)),
                TurnCompleted(native_turn_ref="t1", status="completed"),
            ]
        )
        with trio.fail_after(TIMEOUT):
            await t.stream.turn_done.wait()
        await _until_completed(client, view)
        page = await client.call("events.read", {"afterSequence": 0, "limit": 5000})
        dropped = sum(s.dropped for s in api.core.service.live._subscribers[t.thread_id])
    stored = [e["sequence"] for e in page["events"] if e.get("threadId") == t.thread_id]
    # Every committed event of the thread after the snapshot, in order, none missing.
    assert view.sequences == [s for s in stored if view.sequences[0] <= s <= view.sequences[-1]]
    assert view.sequences[-1] == stored[-1] or stored[-1] > view.sequences[-1]
    assert view.shown[-1] == ("event", text)
    # The live lane gave way: pieces were dropped, fewer frames than deltas went out.
    assert dropped > 0
    assert view.live_frames < 400
    assert sub


def test_a_subscription_waiting_pieces_are_bounded_and_contiguous_ones_joined() -> None:
    hub = LiveHub()
    sub = hub.subscribe("t", capacity=4)
    for i in range(10):
        hub.publish([LiveText("t", "a", None, i, "x", 0)])
    # Contiguous pieces of one item join into one: nothing lost yet.
    assert sub.dropped == 0
    for i in range(10):
        hub.publish([LiveText("t", f"b{i}", None, 0, "y", 0)])
    assert sub.dropped == 7
    pending = sub._pending
    assert [(p.item_id, p.offset, p.text) for p in pending] == [
        ("a", 0, "x" * 10),
        ("b0", 0, "y"),
        ("b1", 0, "y"),
        ("b2", 0, "y"),
    ]
    other = hub.subscribe("u")
    hub.publish([LiveText("t", "c", None, 0, "z", 0)])
    assert other._pending == []
    sub.close()
    other.close()
    assert not hub.wanted("t") and not hub.wanted("u")


async def _lane(
    tmp_path: Path, interval_s: float
) -> tuple[str, TurnBinding | None, LiveSubscription, LiveLane]:
    """A started turn's thread, its turn, a subscription of it and a lane to its hub."""
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        turn = (await started_turn(core.service, tid)).turn
    hub = LiveHub()
    return tid, turn, hub.subscribe(tid), LiveLane(hub, interval_s=interval_s)


async def test_an_item_started_twice_keeps_its_offsets(tmp_path: Path) -> None:
    tid, turn, sub, lane = await _lane(tmp_path, 0.0)
    for event in [
        ItemStarted(native_item_ref="m", content=AssistantMessage(text="ab")),
        ItemDelta(native_item_ref="m", text="cd"),
        # Started again (a provider repeating itself): the item keeps its text.
        ItemStarted(native_item_ref="m", content=AssistantMessage()),
        ItemDelta(native_item_ref="m", text="ef"),
    ]:
        lane.see(event, tid, turn)
    lane.flush(1.0)
    assert [(p.offset, p.text) for p in sub._pending] == [(2, "cdef")]


async def test_an_items_last_pieces_go_before_its_end_not_an_interval_later(
    tmp_path: Path,
) -> None:
    """A reply's last words, held by the interval, are published in the same pass that
    queues the completed item for commit: never after its final upsert, where the
    next turn's reader found them (the bench saw a round with no text)."""
    tid, turn, sub, lane = await _lane(tmp_path, 10.0)
    lane.see(ItemStarted(native_item_ref="m", content=AssistantMessage()), tid, turn)
    lane.see(ItemDelta(native_item_ref="m", text="first "), tid, turn)
    lane.flush(100.0)  # leading edge: at once
    lane.see(ItemDelta(native_item_ref="m", text="last"), tid, turn)
    lane.flush(100.001)
    assert [p.text for p in sub._pending] == ["first "]  # held by the interval
    lane.see(
        ItemCompleted(native_item_ref="m", content=AssistantMessage(text="first last")), tid, turn
    )
    lane.flush(100.002)
    # (the subscription joins contiguous pieces of one item)
    assert [(p.offset, p.text) for p in sub._pending] == [(0, "first last")]
    # The interval still holds pieces of an item that goes on.
    lane.see(ItemStarted(native_item_ref="n", content=AssistantMessage()), tid, turn)
    lane.see(ItemDelta(native_item_ref="n", text="a"), tid, turn)
    lane.flush(100.003)
    assert len(sub._pending) == 1
    lane.see(TurnCompleted(native_turn_ref="t1", status="completed"), tid, turn)
    lane.flush(100.004)
    assert [p.text for p in sub._pending] == ["first last", "a"]
    sub.close()


async def test_a_reconnect_with_a_cursor_gets_exactly_the_gap_then_live_text() -> None:
    async with running_api() as api, _turn(api) as t:
        t.queue.put_all(_START)
        for word in WORDS[:20]:
            t.queue.put(ItemDelta(native_item_ref="m1", text=word))
            await trio.sleep(0.01)
        async with unix_client(api) as client:
            page = await client.call("events.read", {"afterSequence": 0, "limit": 5000})
            cursor = page["events"][-1]["sequence"] if page["events"] else 0
            # More streams (and commits) before the client is back.
            for word in WORDS[20:30]:
                t.queue.put(ItemDelta(native_item_ref="m1", text=word))
                await trio.sleep(0.01)
            res = await client.call(
                "subscribe",
                {"topic": "threadDetail", "threadId": t.thread_id, "afterSequence": cursor},
            )
            sub = res["subscription"]
            got: list[int] = []
            with trio.fail_after(TIMEOUT):
                while True:
                    note = await client.note()
                    assert note["method"] != "liveText", "live text before the gap's end"
                    if note["method"] == "synchronized":
                        synced = note["params"]["sequence"]
                        break
                    got.append(note["params"]["sequence"])
            stored = await client.call("events.read", {"afterSequence": cursor, "limit": 5000})
            gap = [e["sequence"] for e in stored["events"] if e["sequence"] <= synced]
            mine = [s for s in gap if _thread_of(stored["events"], s) == t.thread_id]
            assert got == mine
            # Then live again, text included.
            for word in WORDS[30:]:
                t.queue.put(ItemDelta(native_item_ref="m1", text=word))
                await trio.sleep(0.01)
            with trio.fail_after(TIMEOUT):
                while (note := await client.note())["method"] != "liveText":
                    assert note["params"]["subscription"] == sub
            t.queue.put(TurnCompleted(native_turn_ref="t1", status="completed"))


def _thread_of(events: list[dict[str, Any]], sequence: int) -> str | None:
    return next(e.get("threadId") for e in events if e["sequence"] == sequence)
