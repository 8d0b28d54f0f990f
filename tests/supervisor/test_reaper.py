"""The idle reaper: release idle runtimes, keep their resume refs, resume on the next message.

The stand-in runs over real pipes. Trio time is a ``MockClock`` running at real
speed (``rate = 1``) so a test can also *jump* it: half an hour of idleness takes
no time, and nothing else moves. Jumps happen only while no request to the
provider is in flight (a jump past a request's deadline would time it out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from supervisor.manager import ReaperPolicy
from supervisor.providers import standin_settings
from t3orch.service import CoreService
from tests.supervisor.standin_plan import (
    APPROVAL_PENDING,
    ECHO_RESUME,
    launch_count,
    plan_settings,
)
from tests.supervisor.support import Rig, rig

IDLE_S = 1800.0
CAP_S = 4 * 3600.0
POLICY = ReaperPolicy(idle_timeout_s=IDLE_S, background_cap_s=CAP_S, sweep_interval_s=300.0)
ENDED = ("completed", "failed", "interrupted", "cancelled")
ECHO_THREAD_REF = "01a22d23-29ff-7810-a22a-20759d90506a"


def echo(*extra: str, segment: int = 0) -> list[str]:
    return [str(ECHO_RESUME), "--loop-turns", "--segment", str(segment), *extra]


async def wait_released(r: Rig, thread_id: str) -> None:
    await r.wait_for(lambda: thread_id not in r.manager.runners, within=15)


async def wait_dispatched(r: Rig, thread_id: str) -> None:
    """Until the thread's dispatcher, its run ended, has found nothing more to start:
    till then the reaper counts the thread as working."""
    await r.wait_for(lambda: not r.manager.dispatching(thread_id), within=15)


def sessions(r: Rig) -> list[Any]:
    return r.rows("provider_session")


async def test_an_idle_runtime_is_released_with_its_refs_and_the_next_message_resumes(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.rate = 1.0
    settings = plan_settings(tmp_path / "plan.json", echo(), echo(segment=1))
    async with rig(tmp_path / "e.db", providers={"standin": settings}, reaper=POLICY) as r:
        tid = await r.thread()
        first = await r.manager.send_message(tid, "remember pineapple")
        await r.wait_run(first.result["runId"])
        (pt,) = r.rows("provider_thread")
        assert pt.native_thread_ref == ECHO_THREAD_REF and pt.resume_ref_confirmed

        await wait_dispatched(r, tid)
        mock_clock.jump(IDLE_S - 1)
        assert r.manager.reap_idle() == []
        mock_clock.jump(1)
        assert r.manager.reap_idle() == [tid]
        await wait_released(r, tid)
        (reaped,) = sessions(r)
        assert reaped.status == "stopped"
        assert reaped.pid is None
        assert reaped.last_error is None
        (kept,) = r.rows("provider_thread")
        assert kept.id == pt.id
        assert kept.native_thread_ref == ECHO_THREAD_REF  # the resume ref survives the reap
        assert kept.resume_ref_confirmed
        assert kept.status == "not_loaded"
        assert r.manager.status()["heldThreads"] == []  # a reap is not a crash

        # The next message reopens a runtime, which resumes the native thread: the
        # stand-in's second launch plays the thread/resume segment and nothing else.
        second = await r.manager.send_message(tid, "what did I say?")
        run = await r.wait_run(second.result["runId"], ENDED)
        assert run.status == "completed"
        assert launch_count(tmp_path / "plan.json") == 2
        assert [s.status for s in sessions(r)] == ["stopped", "ready"]
        (resumed,) = r.rows("provider_thread")
        assert resumed.id == pt.id
        assert resumed.native_thread_ref == ECHO_THREAD_REF
        refs = sorted(t.native_turn_ref for t in r.rows("provider_turn"))
        assert refs == ["resumed-turn-1", "standin-turn-1"]
        # The canary fact itself reaching the provider needs the real binaries
        # against the fake model servers (issue 5 §6); the stand-in proves the
        # resume request was made on the kept ref.


async def test_idleness_counts_from_the_end_of_the_last_turn(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.rate = 1.0
    slow = standin_settings(ECHO_RESUME, "--slow-ms", "60")
    # 1000 s without a frame would be a stall past its timeout: that is not this test.
    async with rig(
        tmp_path / "e.db", providers={"standin": slow}, reaper=POLICY, stall_timeout_s=None
    ) as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        # The turn has started (its turn/start reply is in): 1000 s pass mid-turn.
        await r.wait_run(sent.result["runId"], ("running",))
        mock_clock.jump(1000)
        assert r.manager.reap_idle() == []  # a running turn is activity
        await r.wait_run(sent.result["runId"])
        ended_at = trio.current_time()
        runner = r.manager.runners[tid]
        assert runner.last_activity >= ended_at - 1.0
        await wait_dispatched(r, tid)
        # Counted from the turn's start, 2799 s would be past the timeout.
        mock_clock.jump(IDLE_S - 1)
        assert r.manager.reap_idle() == []
        mock_clock.jump(1.5)
        assert r.manager.reap_idle() == [tid]
        await wait_released(r, tid)
        assert [s.status for s in sessions(r)] == ["stopped"]


async def test_a_pending_request_defers_the_reap_until_the_background_cap(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.rate = 1.0
    settings = standin_settings(APPROVAL_PENDING)
    async with rig(tmp_path / "e.db", providers={"standin": settings}, reaper=POLICY) as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "run the escalated command")
        (request,) = await r.wait_for(
            lambda: [q for q in r.rows("runtime_request", tid) if q.status == "pending"]
        )
        runner = r.manager.runners[tid]
        assert runner.busy  # a Codex approval always waits inside a running turn

        mock_clock.jump(IDLE_S + 60)
        assert r.manager.reap_idle() == []
        assert r.row("runtime_request", request.id).status == "pending"
        mock_clock.jump(CAP_S - IDLE_S - 120)
        assert r.manager.reap_idle() == []
        mock_clock.jump(120)
        assert r.manager.reap_idle() == [tid]

        await wait_released(r, tid)
        run = await r.wait_run(sent.result["runId"], ENDED)
        assert run.status == "interrupted"
        # The provider took the interrupt; the run says who asked for it, and why.
        assert run.last_error == "the runtime was stopped during the turn (background_cap)"
        expired = r.row("runtime_request", request.id)
        assert expired.status == "expired"
        assert type(expired.response_capability).__name__ == "NotResumableCapability"
        (session,) = sessions(r)
        assert session.status == "stopped"
        (pt,) = r.rows("provider_thread")
        assert pt.native_thread_ref is not None  # kept for the next message


async def test_the_sweep_runs_by_itself(tmp_path: Path) -> None:
    """Real time: a short timeout, and the manager's own loop does the release."""
    quick = ReaperPolicy(idle_timeout_s=0.3, sweep_interval_s=0.05)
    settings = plan_settings(tmp_path / "plan.json", echo(), echo(segment=1))
    async with rig(tmp_path / "e.db", providers={"standin": settings}, reaper=quick) as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        await r.wait_run(sent.result["runId"])
        await wait_released(r, tid)
        assert r.manager.released == 1
        assert [s.status for s in sessions(r)] == ["stopped"]
        again = await r.manager.send_message(tid, "again")
        await r.wait_run(again.result["runId"])
        assert len(sessions(r)) == 2


async def test_a_sweep_while_a_message_is_handed_to_an_idle_runtime_does_not_reap_it(
    tmp_path: Path, mock_clock: trio.testing.MockClock, monkeypatch: Any
) -> None:
    """The runtime idled to the timeout and a message came: between the send's claim of
    the thread and its turn/start the runtime is not busy yet, and a sweep there stopped
    it under the turn (seen in CI as a run that never completed)."""
    mock_clock.rate = 1.0
    settings = plan_settings(tmp_path / "plan.json", echo(), echo(segment=1))
    async with rig(tmp_path / "e.db", providers={"standin": settings}, reaper=POLICY) as r:
        tid = await r.thread()
        first = await r.manager.send_message(tid, "hello")
        await r.wait_run(first.result["runId"])
        swept: list[list[str]] = []
        # The service's own commits, each with a sweep landing just before it.
        real = {
            name: getattr(CoreService, name)
            for name in ("send_and_begin", "begin_attempt_with_handoff")
        }

        def sweep_first(name: str) -> Any:
            async def sweep_then_call(service: CoreService, *args: Any, **kwargs: Any) -> Any:
                # A sweep with the runtime idle to the timeout: a policy of no idleness
                # at all (a clock jump would also pass the deadlines of waits under way).
                r.manager.reaper = ReaperPolicy(idle_timeout_s=0.0, sweep_interval_s=300.0)
                swept.append(r.manager.reap_idle())
                r.manager.reaper = POLICY
                return await real[name](service, *args, **kwargs)

            return sweep_then_call

        for name in real:
            monkeypatch.setattr(CoreService, name, sweep_first(name))
        second = await r.manager.send_message(tid, "again")  # to the idle runtime
        run = await r.wait_run(second.result["runId"], ENDED)
        assert run.status == "completed", run.last_error
        assert swept == [[]]
        assert r.manager.released == 0
        # Released, the next message opens a runtime and begins its attempt there.
        monkeypatch.setattr(CoreService, "send_and_begin", real["send_and_begin"])
        mock_clock.jump(IDLE_S + 1)
        await wait_dispatched(r, tid)
        assert r.manager.reap_idle() == [tid]
        await wait_released(r, tid)
        third = await r.manager.send_message(tid, "and again")  # a new runtime
        run = await r.wait_run(third.result["runId"], ENDED)
        assert run.status == "completed", run.last_error
        assert swept == [[], []]
        assert [s.status for s in sessions(r)] == ["stopped", "ready"]
