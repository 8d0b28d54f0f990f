"""A wedged provider does not wedge its thread (real stand-in processes).

A provider that is SIGSTOPped mid-turn, or that closes its stdout but keeps
running, used to leave its run ``running`` for good: later sends queued behind
it forever, ``interrupt`` was refused, the process lived until the daemon
stopped. Now the turn ends with the reason and the next send runs on a new
runtime; a failed interrupt escalates to the stop ladder.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import trio

from t3orch.events import ProviderDiagnostic
from tests.supervisor.standin_plan import ECHO_RESUME, launch_count, plan_settings
from tests.supervisor.support import Rig, rig

ENDED = ("completed", "failed", "interrupted", "cancelled")
#: Frame 12 of the echo transcript is in the middle of the first turn.
MID_TURN = "12"


def echo(*extra: str) -> list[str]:
    return [str(ECHO_RESUME), "--loop-turns", *extra]


def codes(r: Rig) -> list[str]:
    with r.core.reader.snapshot():
        return [
            e.payload.code
            for e in r.core.reader.iter_events()
            if isinstance(e.payload, ProviderDiagnostic)
        ]


async def _wedged_first_run(r: Rig, tid: str) -> tuple[str, int]:
    """The first run, running on a provider that has just stopped answering."""
    run_id = (await r.manager.send_message(tid, "hello")).result["runId"]
    await r.wait_run(run_id, ("running",))
    runner = r.manager.runners[tid]
    assert runner.runtime is not None and runner.runtime.pid is not None
    return run_id, runner.runtime.pid


def _stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


async def test_a_sigstopped_provider_run_ends_with_the_reason_and_the_next_send_runs(
    tmp_path: Path,
) -> None:
    plan = tmp_path / "plan.json"
    settings = plan_settings(plan, echo("--stop-after-frames", MID_TURN), echo())
    async with rig(
        tmp_path / "e.db",
        providers={"standin": settings},
        stall_after_s=0.5,
        stall_timeout_s=1.5,
    ) as r:
        tid = await r.thread()
        run_id, pid = await _wedged_first_run(r, tid)
        await r.wait_for(lambda: _stopped(pid), within=10)
        # A send while it is wedged queues behind the wedged run ...
        queued = (await r.manager.send_message(tid, "after the hang")).result["runId"]
        stopped_at = trio.current_time()
        run = await r.wait_run(run_id, ENDED, within=10)
        took = trio.current_time() - stopped_at
        assert run.status == "failed"
        assert "no frame from standin" in run.last_error
        assert "daemon.stall_timeout_s = 1.5" in run.last_error
        assert took < 1.5 + 3.0, took  # the timeout counts from the last frame
        assert {"turn_stalled", "turn_stall_timeout"} <= set(codes(r))
        # ... and runs once the wedged run ended, on a new runtime.
        assert (await r.wait_run(queued, ENDED)).status == "completed"
        assert launch_count(plan) == 2
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        sessions = r.rows("provider_session")
        assert [s.status for s in sessions] == ["error", "ready"]


async def test_a_provider_that_closes_stdout_but_lives_is_a_dead_runtime(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    settings = plan_settings(plan, echo("--close-stdout-after-frames", MID_TURN), echo())
    # The stall timeout is off: end of stdout alone must end the runtime.
    async with rig(tmp_path / "e.db", providers={"standin": settings}, stall_timeout_s=None) as r:
        tid = await r.thread()
        run_id = (await r.manager.send_message(tid, "hello")).result["runId"]
        run = await r.wait_run(run_id, ENDED, within=15)
        assert run.status == "failed"
        assert "killed by signal 9" in run.last_error
        assert "stdout_closed" in codes(r)
        (session,) = r.rows("provider_session")
        assert session.status == "error" and session.pid is None
        again = (await r.manager.send_message(tid, "again")).result["runId"]
        assert (await r.wait_run(again, ENDED)).status == "completed"
        assert launch_count(plan) == 2


async def test_an_interrupt_the_provider_does_not_take_stops_the_runtime(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    settings = plan_settings(plan, echo("--stop-after-frames", MID_TURN), echo())
    async with rig(tmp_path / "e.db", providers={"standin": settings}, stall_timeout_s=None) as r:
        tid = await r.thread()
        run_id, pid = await _wedged_first_run(r, tid)
        await r.wait_for(lambda: _stopped(pid), within=10)
        queued = (await r.manager.send_message(tid, "after the interrupt")).result["runId"]
        with trio.fail_after(15):
            res = await r.manager.interrupt_run(run_id)
        assert res.result["runtimeStopped"] is True
        run = r.row("run", run_id)
        assert run.status == "interrupted"
        # The reason is the turn's error and the session's diagnostic (an interrupted
        # run keeps no error of its own).
        (turn,) = [t for t in r.rows("provider_turn") if t.run_attempt_id == run.active_attempt_id]
        assert turn.status == "interrupted"
        assert "did not take the interrupt" in turn.error
        assert "interrupt_escalated" in codes(r)
        # The stop ladder ends the stopped process (by SIGKILL: SIGTERM waits for a
        # SIGCONT), then the queued run goes to a new runtime.
        assert (await r.wait_run(queued, ENDED, within=30)).status == "completed"
        assert launch_count(plan) == 2
        assert not psutil.pid_exists(pid)
