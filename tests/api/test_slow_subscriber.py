"""A client that stops reading is cut off with ``resync``; everyone else carries on."""

from __future__ import annotations

import pytest
import trio

from t3orch.domain.turn_items import AssistantMessage
from t3orch.provider_events import (
    ItemDelta,
    ItemStarted,
    TurnStarted,
)
from tests.api.support import TIMEOUT, running_api, unix_client, ws_client
from tests.api.writes import new_thread
from tests.store.support import started_turn


# Either transport: frames of a caught-up stream are written from the publishing task,
# and for a client that stops reading those writes fill its socket part-way.
@pytest.mark.parametrize("slow_transport", ["unix", "ws"])
async def test_a_slow_subscriber_gets_resync_and_the_others_do_not(slow_transport: str) -> None:
    async with running_api(subscription_buffer=256) as api:
        core = api.core
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        await core.service.ingest(b, [TurnStarted(native_turn_ref="t")])
        # The final snapshot is over trio-websocket's default 1 MiB message size.
        slow_client = (
            unix_client(api)
            if slow_transport == "unix"
            else ws_client(api, max_message_size=64 * 1024 * 1024)
        )
        async with slow_client as slow, ws_client(api) as fast:
            slow_sub = await slow.call("subscribe", {"topic": "threadDetail", "threadId": tid})
            fast_sub = await fast.call("subscribe", {"topic": "threadDetail", "threadId": tid})
            assert (await fast.note())["method"] == "snapshot"
            chunk = "x" * 500
            received: list[int] = []

            last = 0
            with trio.fail_after(TIMEOUT * 3):
                # ~2,000 events of ~1 KB: far more than the slow client's socket buffers,
                # its connection's queue and its 256-event subscription hold. The fast
                # client reads each commit's events before the next one. (A subscription
                # must hold one commit's events: a commit is published at once.)
                for i in range(40):
                    # A new item per batch keeps each item's text (rewritten per delta) small.
                    ref = f"m{i}"
                    start = ItemStarted(native_item_ref=ref, content=AssistantMessage())
                    deltas = [ItemDelta(native_item_ref=ref, text=chunk) for _ in range(49)]
                    last = await core.service.ingest(b, [start, *deltas])
                    while not received or received[-1] != last:
                        note = await fast.note()
                        assert note["method"] == "event", note
                        received.append(note["params"]["sequence"])
            assert received == sorted(set(received)) and received[-1] == last
            stored = api.core.reader.read_events(fast_sub["snapshotSequence"], 10_000)
            assert received == [e.sequence for e in stored if e.thread_id == tid]
            assert len(received) >= 2000

            # Now the slow client reads: what it had buffered, then one resync, then nothing.
            frames = []
            with trio.fail_after(TIMEOUT):
                while True:
                    note = await slow.note()
                    frames.append(note)
                    if note["method"] == "resync":
                        break
            resync = frames[-1]["params"]
            assert resync["subscription"] == slow_sub["subscription"]
            assert resync["reason"] == "slow_consumer"
            events = [f["params"]["sequence"] for f in frames if f["method"] == "event"]
            assert events == sorted(events) and resync["sequence"] >= (events[-1] if events else 0)
            assert len(events) < 2000  # it was cut off, not buffered without bound
            status = await slow.call("daemon.status")
            assert status["api"]["subscriptions"] == 1  # only the fast client's remains
            assert not [n for n in slow.notes if n["method"] == "event"]

            # A fresh subscription gives a snapshot with everything.
            again = await slow.call("subscribe", {"topic": "threadDetail", "threadId": tid})
            snap = await slow.note()
            assert snap["method"] == "snapshot"
            assert again["snapshotSequence"] == last
            items = [
                i for i in snap["params"]["data"]["turnItems"] if i["type"] == "assistant_message"
            ]
            assert [len(i["text"]) for i in items] == [49 * len(chunk)] * 40
