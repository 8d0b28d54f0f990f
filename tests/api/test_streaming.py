"""Snapshot + cursor streaming over real sockets, under concurrent writes."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.reduce import FOLDS, concerns
from tests.api.support import TIMEOUT, Api, Client, running_api, ws_client
from tests.api.writes import new_thread, streamed_turn, write_op

OPS = st.sampled_from(["send", "turn", "long", "request", "other", "thread"])


async def stored(api: Api, after: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with ws_client(api) as c:
        while True:
            page = await c.call("events.read", {"afterSequence": after, "limit": 1000})
            if not page["events"]:
                return out
            out += page["events"]
            after = page["events"][-1]["sequence"]


async def events_until(
    client: Client, sub: str, wanted: set[int], *, allow_resync: bool = False
) -> list[dict[str, Any]]:
    """Stream event frames' params of ``sub`` until every wanted sequence arrived."""
    got: list[dict[str, Any]] = []
    with trio.fail_after(TIMEOUT):
        while not wanted <= {e["sequence"] for e in got}:
            note = await client.note()
            params = note["params"]
            assert params["subscription"] == sub
            assert note["method"] == "event", note
            assert params["sequence"] == params["event"]["sequence"]
            got.append(params)
    return got


async def quiet(client: Client, sub: str) -> None:
    """No further frames for ``sub`` after a round trip (the stream has nothing left)."""
    await trio.sleep(0.05)
    await client.call("daemon.status")
    stray = [n for n in client.notes if n["params"].get("subscription") == sub]
    assert stray == [], stray


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(OPS, max_size=4),
    during=st.lists(OPS, min_size=1, max_size=8),
    topic=st.sampled_from(sorted(FOLDS)),
    lag=st.integers(0, 30),
)
async def test_snapshot_plus_later_events_equals_the_final_snapshot(
    before: list[str], during: list[str], topic: str, lag: int
) -> None:
    async with running_api() as api:
        core = api.core
        tid = await new_thread(core.service)
        other = await new_thread(core.service)
        for op in before:
            await write_op(core, op, tid, other)
        thread_id = tid if topic == "threadDetail" else None
        params: dict[str, Any] = {"topic": topic}
        if thread_id:
            params["threadId"] = thread_id
        async with ws_client(api) as client:
            async with trio.open_nursery() as nursery:

                async def writer() -> None:
                    for op in during:
                        await write_op(core, op, tid, other)
                        await trio.lowlevel.checkpoint()

                # The writes race the subscribe (its read runs on a worker thread).
                nursery.start_soon(writer)
                for _ in range(lag):
                    await trio.lowlevel.checkpoint()
                sub = await client.call("subscribe", params)
            n = sub["snapshotSequence"]
            snap = await client.note()
            assert snap["method"] == "snapshot"
            assert snap["params"]["snapshotSequence"] == n
            log = await stored(api)
            wanted = {
                e["sequence"] for e in log if e["sequence"] > n and concerns(topic, thread_id, e)
            }
            got = await events_until(client, sub["subscription"], wanted)
            seqs = [e["sequence"] for e in got]
            assert seqs == sorted(wanted), "exactly the stored events after N, in order, once"
            await quiet(client, sub["subscription"])

            fold = FOLDS[topic](snap["params"]["data"])
            for frame in got:
                fold.apply(frame["event"], frame.get("unchanged", ()))
            final = await client.call("view.read", params)
            assert fold.state() == FOLDS[topic].of(final["data"])


async def test_reconnect_with_cursor_gets_exactly_the_gap() -> None:
    async with running_api() as api:
        core = api.core
        tid = await new_thread(core.service)
        async with ws_client(api) as client:
            sub = await client.call("subscribe", {"topic": "threadDetail", "threadId": tid})
            await client.note()  # snapshot
            await streamed_turn(core, tid)
            seen = await events_until(
                client,
                sub["subscription"],
                {e["sequence"] for e in await stored(api) if e["threadId"] == tid}
                - set(range(sub["snapshotSequence"] + 1)),
            )
        cursor = seen[-1]["sequence"]
        # Disconnected: the thread moves on, and another thread too.
        await streamed_turn(core, tid, "while you were away")
        await new_thread(core.service)
        gap = [e for e in await stored(api, cursor) if e["threadId"] == tid]
        assert gap
        async with ws_client(api) as client:
            sub = await client.call(
                "subscribe", {"topic": "threadDetail", "threadId": tid, "afterSequence": cursor}
            )
            assert "snapshotSequence" not in sub
            got = []
            with trio.fail_after(TIMEOUT):
                while True:
                    note = await client.note()
                    if note["method"] == "synchronized":
                        assert note["params"]["sequence"] >= gap[-1]["sequence"]
                        break
                    assert note["method"] == "event"
                    got.append(note["params"]["event"])
            assert got == gap
            # ...then live.
            await core.service.send_message(tid, "live again")
            live = await client.note()
            assert live["method"] == "event"
            assert live["params"]["sequence"] > gap[-1]["sequence"]


async def test_cursor_replay_races_live_writes_without_gaps_or_duplicates() -> None:
    async with running_api() as api:
        core = api.core
        tid = await new_thread(core.service)
        other = await new_thread(core.service)
        for _ in range(5):
            await streamed_turn(core, tid, "x" * 30)
        async with ws_client(api) as client:
            async with trio.open_nursery() as nursery:

                async def writer() -> None:
                    for i in range(10):
                        await write_op(core, ["turn", "other", "send"][i % 3], tid, other)

                nursery.start_soon(writer)
                sub = await client.call(
                    "subscribe", {"topic": "threadDetail", "threadId": tid, "afterSequence": 3}
                )
            wanted = {e["sequence"] for e in await stored(api, 3) if e["threadId"] == tid}
            got: list[int] = []
            synchronized = False
            with trio.fail_after(TIMEOUT):
                # The replay ends with ``synchronized``; it comes after the last wanted
                # event when the writes finished before the replay read the log.
                while not (wanted <= set(got) and synchronized):
                    note = await client.note()
                    if note["method"] == "event":
                        got.append(note["params"]["sequence"])
                    synchronized |= note["method"] == "synchronized"
            assert got == sorted(wanted)
            await quiet(client, sub["subscription"])


async def test_cursor_beyond_the_log_is_refused() -> None:
    async with running_api() as api:
        await new_thread(api.core.service)
        async with ws_client(api) as client:
            doc = await client.request("subscribe", {"topic": "threadShell", "afterSequence": 99})
            assert doc["error"]["data"]["code"] == "cursor_ahead"


async def test_thread_topics_need_a_known_thread() -> None:
    async with running_api() as api, ws_client(api) as client:
        for params, code in [
            ({"topic": "threadDetail"}, "thread_required"),
            ({"topic": "threadDetail", "threadId": "thr_nope"}, "unknown_thread"),
            ({"topic": "threadShell", "threadId": "thr_nope"}, "thread_not_allowed"),
        ]:
            doc = await client.request("subscribe", params)
            assert doc["error"]["data"]["code"] == code
        assert (await client.call("daemon.status"))["api"]["subscriptions"] == 0


async def test_unsubscribe_stops_the_stream() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        async with ws_client(api) as client:
            sub = await client.call("subscribe", {"topic": "threadShell"})
            await client.note()
            await client.call("unsubscribe", {"subscription": sub["subscription"]})
            await api.core.service.send_message(tid, "after")
            await quiet(client, sub["subscription"])
            doc = await client.request("unsubscribe", {"subscription": sub["subscription"]})
            assert doc["error"]["data"]["code"] == "unknown_subscription"


async def test_a_failing_read_ends_that_subscription_with_resync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from t3orch.api import streaming
    from t3orch.store.errors import StoreError

    def broken(after: int, store: object) -> list[object]:
        raise StoreError("events.sqlite3: disk I/O error")

    async with running_api() as api:
        await new_thread(api.core.service)
        monkeypatch.setattr(streaming, "_page", broken)
        async with ws_client(api) as client:
            sub = await client.call("subscribe", {"topic": "threadShell", "afterSequence": 0})
            note = await client.note()
            assert note["method"] == "resync"
            assert note["params"] == {
                "subscription": sub["subscription"],
                "sequence": 0,
                "reason": "server_error: StoreError",
            }
            status = await client.call("daemon.status")  # the connection carries on
            assert status["api"]["subscriptions"] == 0
