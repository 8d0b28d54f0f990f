"""A held runtime's journal offsets: committed with the events of their frames, never ahead
of a buffered delta (issue 20, step 2)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from t3orch.core import Core, open_core
from t3orch.domain.provider import JournalCommitted
from t3orch.domain.turn_items import AssistantMessage
from t3orch.ingest.binding import SessionBinding
from t3orch.ingest.coalesce import DeltaCoalescer
from t3orch.ingest.queue import EventQueue
from t3orch.ingest.stream import IngestStream
from t3orch.projections.check import compare, rebuild
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    JournalOffset,
    ProviderEvent,
    TurnCompleted,
)
from tests.core.test_stream import Owner
from tests.store.support import new_thread, started_turn


async def until(done: Callable[[], bool]) -> None:
    while not done():  # noqa: ASYNC110 (the store is read, not waited on)
        await trio.sleep(0.01)


async def turn_on_a_new_thread(core: Core) -> SessionBinding:
    """A new thread's started turn (its binding)."""
    binding = await started_turn(core.service, await new_thread(core.service))
    assert binding.turn is not None
    return binding


@asynccontextmanager
async def turn_stream(core: Core, binding: SessionBinding) -> AsyncIterator[EventQueue]:
    """An ingest stream on ``binding``'s started turn, running; its queue. The block ends
    once the turn has (the queue is closed then)."""
    assert binding.turn is not None
    stream = IngestStream(core.service, binding.with_turn(None), Owner(core))
    stream.turn_started(binding.turn)
    queue = EventQueue()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(stream.run, queue)
            queue.put(ItemStarted(native_item_ref="m", content=AssistantMessage()))
            yield queue
            await stream.turn_done.wait()
            queue.close()


def offsets(events: list[ProviderEvent]) -> list[int]:
    return [e.offset for e in events if isinstance(e, JournalOffset)]


def test_an_offset_waits_for_the_deltas_buffered_before_it() -> None:
    c = DeltaCoalescer(window_s=0.25)
    assert c.push(JournalOffset(holder_id="h", offset=1), 0.0) == [
        JournalOffset(holder_id="h", offset=1)
    ]  # nothing buffered: it passes at once
    assert c.push(ItemDelta(native_item_ref="m", text="a"), 0.0) == []
    assert c.push(JournalOffset(holder_id="h", offset=2), 0.1) == []  # "a" is still buffered
    assert c.push(JournalOffset(holder_id="h", offset=3), 0.1) == []
    # A delta of another item opens after offset 3: it does not hold 3 back.
    assert c.push(ItemDelta(native_item_ref="n", text="x"), 0.2) == []
    ready = c.flush_due(0.3)
    assert ready == [
        ItemDelta(native_item_ref="m", text="a"),
        JournalOffset(holder_id="h", offset=3),
    ]
    assert c.push(JournalOffset(holder_id="h", offset=4), 0.3) == []  # "x" still buffered
    ready = c.push(ItemCompleted(native_item_ref="n", content=AssistantMessage(text="x")), 0.3)
    assert offsets(ready) == [4] and ready.index(JournalOffset(holder_id="h", offset=4)) == 1


async def test_the_committed_offset_is_stored_with_the_events_it_covers(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        binding = await turn_on_a_new_thread(core)
        sid = binding.provider_session_id

        def committed() -> JournalCommitted | None:
            with core.reader.snapshot():
                return core.reader.get(JournalCommitted, sid)

        def text() -> str:
            with core.reader.snapshot():
                items = core.reader.select(AssistantMessage, thread_id=binding.thread_id)
            return items[0].text if items else ""

        async with turn_stream(core, binding) as queue:
            queue.put(JournalOffset(holder_id="h", offset=5))
            queue.put(ItemDelta(native_item_ref="m", text="hel"))
            queue.put(JournalOffset(holder_id="h", offset=6))
            await until(lambda: committed() is not None)
            # The delta of frame 6 is buffered (250 ms): 6 is not committed yet.
            assert committed() == JournalCommitted(holder_id="h", offset=5)
            await until(lambda: text() == "hel")
            await until(lambda: committed() == JournalCommitted(holder_id="h", offset=6))
            queue.put(ItemDelta(native_item_ref="m", text="lo"))
            queue.put(JournalOffset(holder_id="h", offset=7))
            queue.put(ItemCompleted(native_item_ref="m", content=AssistantMessage(text="hello")))
            queue.put(TurnCompleted(native_turn_ref="t1", status="completed"))
            queue.put(JournalOffset(holder_id="h", offset=8))
        assert committed() == JournalCommitted(holder_id="h", offset=8)
        assert text() == "hello"
        with core.reader.snapshot():
            types = [e.type for e in core.reader.iter_events()]
            # The rebuilt projection has the same offset: `t3orch check` agrees.
            rebuilt, _, _ = rebuild(core.reader.iter_events())
            assert compare(core.reader.all_rows(), rebuilt) == []
        assert types.count("provider.journal") <= 4


def _committed_batches(core: Core) -> list[list[str]]:
    """Each committed batch's event types from now on, a journal offset with its value."""
    batches: list[list[str]] = []
    core.service.writer.broadcast.listen(
        lambda events: batches.append(
            [
                f"{e.type}:{e.payload.offset}" if e.type == "provider.journal" else e.type
                for e in events
            ]
        )
    )
    return batches


async def test_the_offset_read_after_a_turn_end_commits_with_it(tmp_path: Path) -> None:
    """The offset of the read that had ``turn/completed`` arrives after its events: it
    is stored in the turn end's transaction, not in a later one (a crash between the
    two would replay a turn end the log has)."""
    async with open_core(tmp_path / "e.db") as core:
        binding = await turn_on_a_new_thread(core)
        batches = _committed_batches(core)
        async with turn_stream(core, binding) as queue:
            queue.put(JournalOffset(holder_id="h", offset=3))
            queue.put(ItemCompleted(native_item_ref="m", content=AssistantMessage(text="x")))
            queue.put(TurnCompleted(native_turn_ref="t1", status="completed"))
            queue.put(JournalOffset(holder_id="h", offset=4))
    ends = [b for b in batches if "provider_turn.upserted" in b and "run.upserted" in b]
    assert ends, batches
    assert "provider.journal:4" in ends[-1], batches


async def test_offsets_alone_wait_for_what_follows_them(tmp_path: Path) -> None:
    """Frames of no event (Claude's stream stop events; a Codex answer) each put only an
    offset on the queue. Queued alone, each was a transaction (an fsync the turn's end then
    waited for); now they commit with what follows: here, the turn's end."""
    async with open_core(tmp_path / "e.db") as core:
        binding = await turn_on_a_new_thread(core)
        batches = _committed_batches(core)
        async with turn_stream(core, binding) as queue:
            await trio.sleep(0.02)  # the item started is committed
            queue.put(JournalOffset(holder_id="h", offset=1))
            await trio.sleep(0.005)
            queue.put(JournalOffset(holder_id="h", offset=2))
            await trio.sleep(0.003)
            queue.put(TurnCompleted(native_turn_ref="t1", status="completed"))
            queue.put(JournalOffset(holder_id="h", offset=3))
    alone = [b for b in batches if all(t.startswith("provider.journal") for t in b)]
    assert alone == [], batches
    (end,) = [b for b in batches if "provider_turn.upserted" in b and "run.upserted" in b]
    assert "provider.journal:3" in end, batches
