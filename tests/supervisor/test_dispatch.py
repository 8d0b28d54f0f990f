from __future__ import annotations

import sys
from pathlib import Path

import trio

from supervisor import checkpointing, manager
from tests.supervisor.support import rig

MANAGER = manager.__file__
CHECKPOINTER = checkpointing.__file__


async def test_a_message_runs_on_the_standin_and_completes(tmp_path: Path) -> None:
    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        run = await r.wait_run(sent.result["runId"])
        assert run.status == "completed"
        visible = [type(i).__name__ for i in r.rows("turn_item", tid) if not i.hidden]
        assert visible == ["UserMessage", "AssistantMessage"]
        second = await r.manager.send_message(tid, "again")
        await r.wait_run(second.result["runId"])
        sessions = r.rows("provider_session")
        assert len(sessions) == 1  # the same runtime served both runs


async def test_a_turn_on_an_idle_runtime_reads_the_log_four_times_in_the_manager(
    tmp_path: Path,
) -> None:
    """Each statement the manager runs on the event loop's read connection costs the loop
    its CPU (issue 17): a send to an idle runtime reads whether the thread is idle (its
    settings and its open runs), how the run ended, and whether another is queued."""
    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread()
        first = await r.manager.send_message(tid, "hello")
        await r.wait_run(first.result["runId"])
        # The first run's dispatcher reads how it ended after the run's end is committed:
        # a send before it is done queues behind it (and its reads would be counted).
        await r.wait_for(lambda: tid not in r.manager._dispatching)
        statements: list[str] = []

        def by_the_manager(sql: str) -> None:
            # The innermost of the two modules on the stack ran it: the checkpointer's
            # reads (called by the manager at a barrier) are its own.
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename not in (MANAGER, CHECKPOINTER):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename == MANAGER:
                statements.append(f"{frame.f_code.co_name}: {sql[:70]}")

        conn = r.core.reader._conn  # type: ignore[attr-defined]
        conn.set_trace_callback(by_the_manager)
        try:
            second = await r.manager.send_message(tid, "again")
            await r.wait_run(second.result["runId"])
            await r.wait_for(lambda: tid not in r.manager._dispatching)
        finally:
            conn.set_trace_callback(None)
        assert len(statements) == 4, statements


class _Spawned(trio.abc.Instrument):
    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def test_waiting_for_a_turn_spawns_no_task(tmp_path: Path) -> None:
    """The manager waits for each turn's end (``SessionRunner.wait_turn``) on one event:
    a nursery of two tasks per turn was ~70 µs of the event loop's CPU (issue 17)."""
    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread()
        first = await r.manager.send_message(tid, "hello")
        await r.wait_run(first.result["runId"])
        spawned = _Spawned()
        trio.lowlevel.add_instrument(spawned)
        try:
            second = await r.manager.send_message(tid, "again")
            await r.wait_run(second.result["runId"])
        finally:
            trio.lowlevel.remove_instrument(spawned)
        assert spawned.names, "the turn's dispatch is a task"
        assert not [name for name in spawned.names if "wait_turn" in name]
