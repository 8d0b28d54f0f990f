"""Fault tests: the stand-in provider over real pipes, failing in every way we know.

Each test drives the real ``SessionManager`` → ``SessionRunner`` → Codex adapter →
``python -m adapters.standin`` stack. Faults come from the stand-in's switches or
from signals sent to its process group; ``standin_plan`` gives each launch of a
thread its own switches, so a crashed runtime's successor behaves (and plays the
``thread/resume`` segment when the provider thread has a confirmed ref).

Timing logic that is deterministic (backoff, the crash window) runs under
``trio.testing.MockClock``; everything with a real process runs on real time with
``trio.fail_after`` bounds. Seeds of the random-crash test name the frame the
stand-in dies after: a failing seed is a fixture (add it to ``CRASH_SEEDS``).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio
import trio.testing

from supervisor.manager import RestartPolicy, SessionManager
from supervisor.providers import ProviderSettings, standin_settings
from supervisor.session import SessionRunner
from t3orch.domain.request import NotResumableCapability
from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import ProviderDiagnostic, ProviderSessionUpserted
from t3orch.store.errors import CommandRejected
from tests.supervisor.standin_plan import (
    APPROVAL_PENDING,
    ECHO_RESUME,
    launch_count,
    plan_settings,
)
from tests.supervisor.support import Rig, rig

#: Stdout frames of the echo transcript: 5 before the first turn (initialize and
#: thread/start replies, notifications), then 15 per turn (turn/start reply …
#: turn/completed). Frames 11-15 of a turn stream the assistant message.
FRAMES_BEFORE_TURN = 5
FRAMES_PER_TURN = 15
#: Crash points drawn from the seeds below: 24, 8, 3, 15, 5, 20, 29, i.e. during
#: start-up (3), just after the thread opened (5), mid-turn 1 (8, 15 streaming),
#: idle right after turn 1 (20), mid-turn 2 on a confirmed ref (24, 29 streaming).
CRASH_SEEDS = (0, 1, 2, 3, 6, 7, 9)
ENDED = ("completed", "failed", "interrupted", "cancelled")


def crash_frame(seed: int) -> int:
    return random.Random(seed).randrange(FRAMES_BEFORE_TURN + 2 * FRAMES_PER_TURN)


def echo(*extra: str, segment: int = 0) -> list[str]:
    return [str(ECHO_RESUME), "--loop-turns", "--segment", str(segment), *extra]


def only_session(r: Rig) -> Any:
    sessions = r.rows("provider_session")
    assert len(sessions) == 1, sessions
    return sessions[0]


async def wait_session(r: Rig, session_id: str, statuses: tuple[str, ...]) -> Any:
    return await r.wait_for(
        lambda: (
            (s := r.row("provider_session", session_id)) is not None and s.status in statuses and s
        ),
        within=10,
    )


def assert_settled(r: Rig, thread_id: str) -> None:
    """Nothing of the thread is left streaming or waiting for an answer."""
    open_items = [i for i in r.rows("turn_item", thread_id) if i.status not in TURN_ITEM_TERMINAL]
    assert open_items == []
    assert [q for q in r.rows("runtime_request", thread_id) if q.status == "pending"] == []


# -- crashes ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", CRASH_SEEDS)
async def test_a_crash_at_a_random_frame_fails_the_run_and_the_next_message_recovers(
    tmp_path: Path, seed: int
) -> None:
    n = crash_frame(seed)
    turn_done_before_crash = n >= FRAMES_BEFORE_TURN + FRAMES_PER_TURN
    # Launch 2 resumes only when a turn completed on the ref (it is confirmed then).
    settings = plan_settings(
        tmp_path / "plan.json",
        echo("--crash-after-frames", str(n)),
        echo(segment=1 if turn_done_before_crash else 0),
    )
    async with rig(tmp_path / "e.db", providers={"standin": settings}) as r:
        tid = await r.thread()
        crashed_run: str | None = (await r.manager.send_message(tid, "one")).result["runId"]
        if turn_done_before_crash:
            assert crashed_run is not None
            await r.wait_run(crashed_run)
            crashed_run = None
        first = await r.wait_for(lambda: r.rows("provider_session") and only_session(r))
        if turn_done_before_crash and n > FRAMES_BEFORE_TURN + FRAMES_PER_TURN:
            crashed_run = (await r.manager.send_message(tid, "two")).result["runId"]
        session = await wait_session(r, first.id, ("error",))
        if crashed_run is not None:
            run = await r.wait_run(crashed_run, ENDED)
            assert run.status == "failed", (seed, n, run)
            assert run.last_error, (seed, n)
        assert "killed by signal 9" in (session.last_error or ""), (seed, n, session)
        assert session.exit_description == "killed by signal 9"
        assert session.pid is None
        await r.wait_for(lambda: tid not in r.manager.runners, within=10)
        assert_settled(r, tid)
        (pt_before,) = r.rows("provider_thread")

        again = (await r.manager.send_message(tid, "again")).result["runId"]
        run = await r.wait_run(again)
        assert run.status == "completed"
        assert launch_count(tmp_path / "plan.json") == 2
        sessions = {s.id: s for s in r.rows("provider_session")}
        assert len(sessions) == 2  # a NEW runtime ...
        assert sessions[first.id].status == "error"
        (pt_after,) = r.rows("provider_thread")  # ... on the same provider thread
        assert pt_after.id == pt_before.id
        assert pt_after.native_thread_ref == "01a22d23-29ff-7810-a22a-20759d90506a"
        assert pt_after.provider_session_id != first.id
        refs = [t.native_turn_ref for t in r.rows("provider_turn")]
        if turn_done_before_crash:
            assert "resumed-turn-1" in refs, refs  # the stand-in only answers thread/resume
        assert_settled(r, tid)


async def test_exit_detection_after_sigkill_of_the_process_group(tmp_path: Path) -> None:
    """SIGKILL mid-turn; the session row leaves ``running`` at once (G3: p99 < 50 ms)."""
    slow = standin_settings(ECHO_RESUME, "--slow-ms", "100")
    async with rig(tmp_path / "e.db", providers={"standin": slow}) as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        await r.wait_for(lambda: r.rows("provider_session"), within=10)
        sid = only_session(r).id
        session = await wait_session(r, sid, ("running",))
        sub = r.core.broadcast.subscribe()
        try:
            killed_at = time.perf_counter()
            os.killpg(session.pid, signal.SIGKILL)
            with trio.fail_after(5):
                async for env in sub:
                    p = env.payload
                    if (
                        isinstance(p, ProviderSessionUpserted)
                        and p.session.id == sid
                        and p.session.status != "running"
                    ):
                        break
            detected_s = time.perf_counter() - killed_at
        finally:
            sub.close()
        print(f"exit detection: {detected_s * 1000:.1f} ms")
        assert detected_s < 2.0
        run = await r.wait_run(sent.result["runId"], ENDED)
        assert run.status == "failed"
        session = r.row("provider_session", sid)
        assert session.status == "error"
        assert "signal 9" in session.last_error
        assert_settled(r, tid)


# -- hangs, garbage, slowness ------------------------------------------------------------


async def test_a_provider_hanging_on_initialize_fails_the_start_within_the_bound(
    tmp_path: Path,
) -> None:
    base = standin_settings(ECHO_RESUME, "--hang-on-initialize")
    hung = ProviderSettings(command=base.command, model="standin", request_timeout_s=0.5)
    async with rig(tmp_path / "e.db", providers={"standin": hung}) as r:
        tid = await r.thread()
        started = trio.current_time()
        sent = await r.manager.send_message(tid, "hello")
        run = await r.wait_run(sent.result["runId"], ENDED, within=10)
        took = trio.current_time() - started
        assert run.status == "failed"
        assert "failed to start" in run.last_error
        assert "initialize" in run.last_error and "no answer within 0.5 s" in run.last_error
        assert took < 5.0  # the request bound plus the kill, not the 30 s default
        session = only_session(r)
        assert session.status == "error"
        assert session.pid is None
        assert "killed by signal 9" in (session.last_error or "")  # by the adapter's teardown
        assert not r.manager.runners
        # The conftest leak check proves the hung process was killed and reaped.


async def test_garbage_on_stdout_is_a_diagnostic_and_the_run_completes(tmp_path: Path) -> None:
    # Frame 12 is mid-turn: the garbage line lands between two message deltas.
    noisy = standin_settings(ECHO_RESUME, "--garbage-after-frames", "12")
    async with rig(tmp_path / "e.db", providers={"standin": noisy}) as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        run = await r.wait_run(sent.result["runId"], ENDED)
        assert run.status == "completed"
        session = only_session(r)
        assert session.status == "ready"  # the session survived
        with r.core.reader.snapshot():
            diagnostics = [
                e.payload
                for e in r.core.reader.iter_events()
                if isinstance(e.payload, ProviderDiagnostic)
                and e.payload.provider_session_id == session.id
            ]
        assert any("unusable stdout line" in d.message for d in diagnostics), diagnostics
        reply = [i for i in r.rows("turn_item", tid) if type(i).__name__ == "AssistantMessage"]
        assert [i.text for i in reply] == ["ack: hello"]
        second = await r.manager.send_message(tid, "again")
        assert (await r.wait_run(second.result["runId"], ENDED)).status == "completed"
        assert len(r.rows("provider_session")) == 1


async def test_slow_output_completes(tmp_path: Path) -> None:
    slow = standin_settings(ECHO_RESUME, "--slow-ms", "40")
    async with rig(tmp_path / "e.db", providers={"standin": slow}) as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        run = await r.wait_run(sent.result["runId"], ENDED)
        assert run.status == "completed"
        reply = [i for i in r.rows("turn_item", tid) if type(i).__name__ == "AssistantMessage"]
        assert [i.text for i in reply] == ["ack: hello"]
        assert only_session(r).status == "ready"


async def test_an_idle_runtime_past_the_stall_window_does_not_spin(tmp_path: Path) -> None:
    """The stall watch only watches turns: idle for longer than its window costs no CPU."""
    async with rig(tmp_path / "e.db") as r:
        r.manager.stall_after_s = 0.1
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        await r.wait_run(sent.result["runId"])
        await trio.sleep(0.3)  # well past the window, no turn running
        cpu_before = time.process_time()
        await trio.sleep(1.0)
        cpu_s = time.process_time() - cpu_before
        assert cpu_s < 0.2, f"{cpu_s:.2f} s of CPU in 1 s of idleness"
        assert r.manager.runners[tid].stalls == 0


# -- a pending approval when the provider dies ------------------------------------------


async def test_exit_during_a_pending_approval_expires_it_and_an_answer_is_refused(
    tmp_path: Path,
) -> None:
    async with rig(
        tmp_path / "e.db", providers={"standin": standin_settings(APPROVAL_PENDING)}
    ) as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "run the escalated command")
        (request,) = await r.wait_for(
            lambda: [q for q in r.rows("runtime_request", tid) if q.status == "pending"]
        )
        session = only_session(r)
        assert session.status == "waiting"
        os.killpg(session.pid, signal.SIGKILL)

        run = await r.wait_run(sent.result["runId"], ENDED)
        assert run.status == "failed"
        expired = r.row("runtime_request", request.id)
        assert expired.status == "expired"
        assert isinstance(expired.response_capability, NotResumableCapability)
        assert_settled(r, tid)
        with trio.fail_after(5), pytest.raises(CommandRejected) as refused:
            await r.manager.respond(request.id, "accept")
        assert refused.value.code in ("request_not_pending", "request_not_resumable")
        assert "expired" in str(refused.value)


# -- restart intensity -------------------------------------------------------------------


async def test_three_crashes_in_the_window_hold_the_thread_until_the_user_sends(
    tmp_path: Path,
) -> None:
    crash = echo("--crash-after-frames", "12")
    settings = plan_settings(tmp_path / "plan.json", crash, crash, crash, echo())
    policy = RestartPolicy(intensity=3, window_s=60, backoff_initial_s=0.05, backoff_max_s=0.2)
    async with rig(tmp_path / "e.db", providers={"standin": settings}, restart=policy) as r:
        tid = await r.thread()
        # Four messages queued at once: three runtimes crash, the fourth run must
        # not get a runtime of its own.
        runs = [(await r.manager.send_message(tid, f"m{i}")).result["runId"] for i in range(4)]
        ended = [await r.wait_run(run_id, ENDED) for run_id in runs]
        assert [run.status for run in ended] == ["failed"] * 4
        assert all("signal 9" in run.last_error for run in ended[:3])
        assert "restart intensity exceeded" in ended[3].last_error
        assert "send again" in ended[3].last_error
        assert launch_count(tmp_path / "plan.json") == 3
        assert r.manager.status()["heldThreads"] == [tid]
        sessions = r.rows("provider_session")
        assert [s.status for s in sessions] == ["error"] * 3
        with r.core.reader.snapshot():
            codes = [
                e.payload.code
                for e in r.core.reader.iter_events()
                if isinstance(e.payload, ProviderDiagnostic)
            ]
        assert "restart_intensity" in codes

        # The user sending again is the user acting: a fresh runtime serves it.
        retry = await r.manager.send_message(tid, "retry")
        assert (await r.wait_run(retry.result["runId"], ENDED)).status == "completed"
        assert r.manager.status()["heldThreads"] == []
        assert launch_count(tmp_path / "plan.json") == 4


def _bare_manager(policy: RestartPolicy) -> SessionManager:
    """The crash bookkeeping needs no core: it is pure trio-time arithmetic."""
    return SessionManager(
        core=cast(Any, None), reader=cast(Any, None), providers={}, restart=policy
    )


def test_backoff_doubles_from_the_initial_delay_up_to_the_cap() -> None:
    policy = RestartPolicy()
    assert [policy.backoff(n) for n in range(9)] == [
        0.0,
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
    ]
    assert RestartPolicy(backoff_initial_s=0.1, backoff_max_s=0.25).backoff(3) == 0.25


async def test_crashes_older_than_the_window_do_not_count(
    mock_clock: trio.testing.MockClock,
) -> None:
    manager = _bare_manager(RestartPolicy(intensity=3, window_s=60))
    manager._record_crash("t")
    mock_clock.jump(30)
    manager._record_crash("t")
    mock_clock.jump(31)  # the first crash is 61 s old now
    manager._record_crash("t")
    assert not manager.crashes["t"].held
    assert manager.restart.backoff(len(manager._recent(manager.crashes["t"]))) == 1.0
    mock_clock.jump(1)
    manager._record_crash("t")  # three within 60 s
    assert manager.crashes["t"].held
    manager._release_hold("t")
    assert not manager.crashes["t"].held
    assert len(manager.crashes["t"].times) == 0


class _Opened(Exception):
    def __init__(self, at: float) -> None:
        super().__init__(at)
        self.at = at


class _NoRuntimes(SessionManager):
    """Reports when a runtime would open, instead of opening it."""

    async def _open_runner(self, thread_id: str, run_id: str) -> SessionRunner:
        raise _Opened(trio.current_time())


async def test_dispatch_sleeps_the_backoff_in_trio_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After two recent crashes the next runtime opens 1 s (trio time) later, not at once."""
    manager = _NoRuntimes(
        core=cast(Any, None), reader=cast(Any, None), providers={}, restart=RestartPolicy()
    )
    manager._record_crash("t")
    manager._record_crash("t")
    start = trio.current_time()
    with pytest.raises(_Opened) as opened:
        await manager._dispatch("t", SimpleNamespace(id="run_1"))
    assert opened.value.at == start + 1.0
