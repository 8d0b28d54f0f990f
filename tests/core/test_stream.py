"""The core's ingest stream, driven through its port (the event queue) into the real store.

The owner here stands for the supervisor: it records what the stream tells it and
what the store held at each barrier, so the order of commits is observable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from t3orch.commands.sessions import note
from t3orch.core import Core, open_core
from t3orch.domain.run import Run
from t3orch.domain.turn_items import AssistantMessage, TurnItemBase
from t3orch.ingest.binding import TurnBinding
from t3orch.ingest.queue import EventQueue
from t3orch.ingest.stream import IngestStream
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RuntimeExited,
    TurnCompleted,
    TurnStarted,
)
from t3orch.store.interface import Decide
from tests.store.support import new_thread, started_turn


class Owner:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.heard: list[str] = []
        #: At the turn barrier: the run's status and the item's text, as committed.
        self.at_barrier: tuple[str, str] | None = None
        self.exited: RuntimeExited | None = None

    def observed(self, event: ProviderEvent) -> None:
        pass

    def working(self) -> None:
        pass

    def turn_closing(self) -> None:
        self.heard.append("closing")

    def interrupted_by_us(self) -> str | None:
        return None

    async def turn_barrier(
        self, run_id: str, committed: Callable[[], Awaitable[None]]
    ) -> Decide | None:
        await committed()
        reads = self.core.reader
        with reads.snapshot():
            run = reads.get(Run, run_id)
            items = reads.select(AssistantMessage, thread_id=run.thread_id if run else "")
        assert run is not None
        self.at_barrier = (run.status, items[0].text if items else "")
        self.heard.append("barrier")
        # The checkpoint's record, as the checkpointer's stands: a diagnostic here.
        return note(None, "info", "checkpoint_here", run_id)

    async def subagent_ended(self, run_id: str, child_native_thread_ref: str | None) -> None:
        self.heard.append("subagent")

    async def exiting(self, event: RuntimeExited) -> None:
        self.heard.append("exiting")

    def turn_ended(self, turn: TurnBinding | None, event: TurnCompleted) -> None:
        self.heard.append(f"ended {event.status}")

    def runtime_exited(self, event: RuntimeExited, turn: TurnBinding | None) -> None:
        self.exited = event
        self.heard.append("exited")


def _reply(text: str) -> list[ProviderEvent]:
    return [
        TurnStarted(native_turn_ref="t1"),
        ItemStarted(native_item_ref="m1", content=AssistantMessage()),
        *[ItemDelta(native_item_ref="m1", text=c) for c in text],
        ItemCompleted(native_item_ref="m1", content=AssistantMessage(text=text)),
        TurnCompleted(native_turn_ref="t1", status="completed"),
    ]


async def test_a_completed_turn_commits_its_items_then_the_barrier_then_its_end(
    tmp_path: Path,
) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        binding = await started_turn(core.service, tid)
        assert binding.turn is not None
        owner = Owner(core)
        stream = IngestStream(core.service, binding.with_turn(None), owner, turn_barrier=True)
        stream.turn_started(binding.turn)
        batches: list[list[str]] = []
        core.writer.broadcast.listen(lambda events: batches.append([e.type for e in events]))
        queue = EventQueue()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(stream.run, queue)
                # One burst: the end arrives with everything before it.
                queue.put_all(_reply("hello"))
                await stream.turn_done.wait()
                # After the end: not bound to the ended turn.
                queue.put(ItemStarted(native_item_ref="late", content=AssistantMessage()))
                queue.close()
        assert owner.heard == ["barrier", "closing", "ended completed"]
        # At the barrier the run was still open (its start not committed either): the
        # turn's events (no subagent in it, nothing the barrier reads) commit with its
        # record and the end, in one transaction, in that order: items, checkpoint, end.
        assert owner.at_barrier == ("starting", "")
        ending = next(b for b in batches if "provider.diagnostic" in b)
        assert "run.upserted" in ending and "turn_item.upserted" in ending, batches
        last_item = max(i for i, t in enumerate(ending) if t == "turn_item.upserted")
        end = max(i for i, t in enumerate(ending) if t == "run.upserted")
        assert last_item < ending.index("provider.diagnostic") < end, ending
        assert stream.active_turn is None
        with core.reader.snapshot():
            run = core.reader.get(Run, binding.turn.run_id)
            items = core.reader.turn_items(tid)
        assert run is not None and run.status == "completed"
        # The event after the end was not bound to the ended turn's run.
        of_run = [i for i in items if isinstance(i, TurnItemBase) and i.run_id == run.id]
        refs = [i.native_item_ref.value if i.native_item_ref else None for i in of_run]
        assert "late" not in refs and "m1" in refs


async def test_an_exit_ends_the_active_turn_and_is_told_after_its_commit(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        binding = await started_turn(core.service, tid)
        assert binding.turn is not None
        owner = Owner(core)
        stream = IngestStream(core.service, binding.with_turn(None), owner)
        stream.turn_started(binding.turn)
        queue = EventQueue()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(stream.run, queue)
                queue.put_all(_reply("hi")[:3])
                queue.put(RuntimeExited(code=None, signal=9))
                await stream.turn_done.wait()
                queue.close()
        assert owner.heard == ["exiting", "exited"]
        assert owner.exited is not None and owner.exited.signal == 9
        with core.reader.snapshot():
            run = core.reader.get(Run, binding.turn.run_id)
        assert run is not None and run.status == "failed"
