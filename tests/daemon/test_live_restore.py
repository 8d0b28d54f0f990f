"""Live restore (issue 20): a provider under a holder outlives a SIGKILLed daemon; the next
daemon reattaches before it serves and the run completes, every delta exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from t3orch.cli.drill import long_reply
from t3orch.state import copy_state_dir
from tests.daemon.support import (
    REPO,
    alive,
    cli,
    cli_ok,
    config_file,
    events,
    rows,
    rpc,
    serve,
    wait_for,
)


def raw_deltas(state: Path, session_id: str) -> list[str]:
    """The text of each delta frame in the session's raw frame log."""
    out = []
    for line in (state / "raw" / f"{session_id}.jsonl").read_text().splitlines():
        frame = json.loads(line)
        if frame["direction"] == "incoming" and frame["method"] == "item/agentMessage/delta":
            out.append(frame["payload"]["params"]["delta"])
    return out


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_daemon_restart_mid_stream_is_reattached_and_every_delta_lands_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """A crash (SIGKILL) or a graceful restart (SIGTERM: any exit of ``serve`` leaves held
    runtimes to their holders) in the middle of a streamed reply."""
    state = tmp_path / "state"
    words = [f"w{i} " for i in range(60)]
    cfg = config_file(tmp_path, transcript=long_reply(tmp_path, words), reattach_grace_s=30)
    with serve(state, cfg, keep_holders=True) as d:
        d.wait_notify("READY=1")
        created = rpc(
            state, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": str(tmp_path)}
        )
        thread_id = created["result"]["threadId"]
        rpc(state, "run.send", {"commandId": "c2", "threadId": thread_id, "text": "hi"})
        wait_for(lambda: len(events(state, "turn_item.delta")) >= 2, 30)
        (session,) = [s for s in rows(state, "provider_session") if s.status != "stopped"]
        assert session.holder is not None and session.pid is not None
        d.proc.send_signal(stop)
        assert d.proc.wait(timeout=30) == (0 if stop == signal.SIGTERM else -signal.SIGKILL)
        # The provider lives on under its holder, mid-reply.
        time.sleep(0.3)
        assert alive(session.pid) and alive(session.holder.pid)
        before = len(events(state, "turn_item.delta"))
        assert before > 0
        (run,) = rows(state, "run")
        assert run.status == "running"
        assert all(s.status != "stopped" for s in rows(state, "provider_session"))
        # Without a daemon, `t3orch held` says what is held and how long it has left.
        (held,) = json.loads(cli_ok(state, "held", "--json"))
        assert (held["holderPid"], held["providerPid"]) == (session.holder.pid, session.pid)
        assert not held["attached"] and 0 < held["graceLeftS"] <= 30
    with serve(state, cfg, keep_holders=True) as d2:
        d2.wait_notify("READY=1")
        # By READY the run was not settled: it goes on.
        (run,) = rows(state, "run")
        assert run.status in ("running", "completed")
        assert [e.payload.counts.get("held_sessions") for e in events(state, "runtime.reconciled")][
            -1
        ] == 1
        # `t3orch status` lists it, attached again.
        (held,) = json.loads(cli_ok(state, "status", "--json"))["held"]
        assert held["attached"] and held["providerPid"] == session.pid
        wait_for(lambda: rows(state, "run")[0].status == "completed", 30)
        deltas = [e.payload.text for e in events(state, "turn_item.delta")]
        assert "".join(deltas) == "".join(words), deltas
        items = [i for i in rows(state, "turn_item") if getattr(i, "text", None) is not None]
        assert any(i.text == "".join(words) for i in items)
        # The same provider process finished the turn.
        assert alive(session.pid)
        if stop == signal.SIGTERM:
            # The raw frame log has each frame once: the replay of what the first daemon
            # recorded is not recorded again (a SIGKILL may lose its unflushed tail).
            assert sorted(raw_deltas(state, session.id)) == sorted(words)
        # The thread takes the next run on the reattached runtime.
        rpc(state, "run.send", {"commandId": "c3", "threadId": thread_id, "text": "again"})
        wait_for(lambda: [r.status for r in rows(state, "run")].count("completed") == 2, 30)
        d2.proc.send_signal(signal.SIGTERM)
        assert d2.proc.wait(timeout=30) == 0
    # The daemon's exit left the runtime to its holder; stopping the agents is explicit.
    assert alive(session.pid) and alive(session.holder.pid)
    assert "stopped 1 held runtime(s)" in cli_ok(state, "stop-agents")
    # A final stop leaves nothing running: provider and holder are gone.
    _, left = psutil.wait_procs(
        [p for p in map(_proc, (session.pid, session.holder.pid)) if p is not None], timeout=10
    )
    assert not left
    check = cli("check", "--state-dir", str(state))
    assert check.returncode == 0, check.stdout + check.stderr


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _start_streaming(state: Path, tmp: Path) -> tuple[str, Any]:
    created = rpc(
        state, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": str(tmp)}
    )
    thread_id = created["result"]["threadId"]
    rpc(state, "run.send", {"commandId": "c2", "threadId": thread_id, "text": "hi"})
    wait_for(lambda: len(events(state, "turn_item.delta")) >= 2, 30)
    (session,) = [s for s in rows(state, "provider_session") if s.status != "stopped"]
    assert session.holder is not None and session.pid is not None
    return thread_id, session


def _settled_then_works_again(state: Path, cfg: Path, thread_id: str, holder_id: str) -> None:
    with serve(state, cfg, keep_holders=True) as d:
        d.wait_notify("READY=1")
        # Its journal was read and its runtime settled: the holder's directory is gone.
        assert not (state / "held" / holder_id).exists()
        # The holder is gone: its runtime is settled as before holders existed.
        (run,) = rows(state, "run")
        assert (run.status, run.last_error) == ("interrupted", "daemon_restart")
        assert all(s.status == "stopped" for s in rows(state, "provider_session"))
        rpc(state, "run.send", {"commandId": "c3", "threadId": thread_id, "text": "again"})
        wait_for(lambda: [r.status for r in rows(state, "run")].count("completed") == 1, 30)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
    cli_ok(state, "stop-agents")


def _daemon_killed_mid_stream(tmp_path: Path, grace_s: float) -> tuple[Path, Path, str, Any]:
    """A held runtime streaming a long reply (8 s) whose daemon was just SIGKILLed: the
    state dir, the config, the thread and its provider session."""
    state = tmp_path / "state"
    cfg = config_file(
        tmp_path,
        transcript=long_reply(tmp_path, [f"w{i} " for i in range(200)]),
        reattach_grace_s=grace_s,
    )
    with serve(state, cfg, keep_holders=True) as d:
        d.wait_notify("READY=1")
        thread_id, session = _start_streaming(state, tmp_path)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
    return state, cfg, thread_id, session


def test_a_holder_whose_daemon_never_returns_stops_its_provider_after_the_grace(
    tmp_path: Path,
) -> None:
    state, cfg, thread_id, session = _daemon_killed_mid_stream(tmp_path, grace_s=1)
    killed = time.monotonic()
    procs = [p for p in map(_proc, (session.pid, session.holder.pid)) if p is not None]
    _, left = psutil.wait_procs(procs, timeout=15)
    assert not left
    # Not before its grace (1 s), and well before the reply would have ended (8 s).
    assert 0.9 <= time.monotonic() - killed < 7
    _settled_then_works_again(state, cfg, thread_id, session.holder.holder_id)


def test_a_holder_killed_while_its_daemon_is_down_is_settled_by_the_next_start(
    tmp_path: Path,
) -> None:
    state, cfg, thread_id, session = _daemon_killed_mid_stream(tmp_path, grace_s=30)
    os.kill(session.holder.pid, signal.SIGKILL)
    # Its provider dies with it (the parent-death signal).
    procs = [p for p in map(_proc, (session.pid, session.holder.pid)) if p is not None]
    _, left = psutil.wait_procs(procs, timeout=10)
    assert not left
    _settled_then_works_again(state, cfg, thread_id, session.holder.holder_id)


def test_fifty_random_daemon_sigkills_lose_nothing_double_nothing_leave_nothing(
    tmp_path: Path,
) -> None:
    """Several sessions streaming; the daemon SIGKILLed 50 times at random points."""
    rng = random.Random(20)
    state = tmp_path / "state"
    words = [f"w{i} " for i in range(50)]
    cfg = config_file(
        tmp_path, transcript=long_reply(tmp_path, words, every_ms=25), reattach_grace_s=30
    )
    threads, runs = 3, 3
    started = time.monotonic()
    with serve(state, cfg, keep_holders=True) as d:
        d.wait_notify("READY=1")
        tids = []
        for t in range(threads):
            created = rpc(
                state, "thread.create", {"commandId": f"t{t}", "provider": "standin", "cwd": "/tmp"}
            )
            tids.append(created["result"]["threadId"])
        for r in range(runs):
            for t, tid in enumerate(tids):
                rpc(state, "run.send", {"commandId": f"r{t}.{r}", "threadId": tid, "text": "go"})
        # Every session streaming under its holder; from here on the kills land anywhere.
        wait_for(
            lambda: len([s for s in rows(state, "provider_session") if s.holder]) == threads,
            30,
        )
        wait_for(lambda: len(events(state, "turn_item.delta")) >= threads, 30)
        time.sleep(rng.uniform(0, 0.4))
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
    for _ in range(49):
        with serve(state, cfg, keep_holders=True) as d:
            d.wait_notify("READY=1")
            time.sleep(rng.uniform(0, 0.3))
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(timeout=10)
    with serve(state, cfg, keep_holders=True) as d:
        d.wait_notify("READY=1")
        wait_for(lambda: all(r.status == "completed" for r in rows(state, "run")), 60)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
    print(f"50 SIGKILLs and the final run in {time.monotonic() - started:.1f}s")
    all_runs = rows(state, "run")
    assert len(all_runs) == threads * runs
    # Every reply in the log exactly once: each item's deltas are its words, in order.
    by_item: dict[str, str] = {}
    for e in events(state, "turn_item.delta"):
        by_item[e.payload.item_id] = by_item.get(e.payload.item_id, "") + e.payload.text
    assert len(by_item) == threads * runs
    assert set(by_item.values()) == {"".join(words)}, by_item
    sessions = [s for s in rows(state, "provider_session") if s.holder is not None]
    cli_ok(state, "stop-agents")
    procs = [p for s in sessions for p in map(_proc, (s.pid, s.holder.pid)) if p is not None]
    _, left = psutil.wait_procs(procs, timeout=15)
    assert not left, left
    assert cli_ok(state, "held") == "no held runtimes\n"
    cli_ok(state, "check")


APPROVAL = REPO / "tests" / "supervisor" / "transcripts" / "codex_approval_pending.ndjson"


def test_an_approval_pending_across_a_daemon_sigkill_is_answered_after_it(
    tmp_path: Path,
) -> None:
    """The provider still waits on the same request id: the answer after the restart
    reaches it, and its turn completes (the stand-in plays Codex asking, then going on)."""
    state = tmp_path / "state"
    cfg = config_file(tmp_path, transcript=APPROVAL, reattach_grace_s=30)
    with serve(state, cfg, keep_holders=True) as d:
        d.wait_notify("READY=1")
        created = rpc(
            state, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": "/tmp"}
        )
        tid = created["result"]["threadId"]
        rpc(state, "run.send", {"commandId": "c2", "threadId": tid, "text": "touch it"})
        (request,) = wait_for(
            lambda: [r for r in rows(state, "runtime_request") if r.status == "pending"], 30
        )
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
    with serve(state, cfg, keep_holders=True) as d2:
        d2.wait_notify("READY=1")
        (still,) = [r for r in rows(state, "runtime_request") if r.id == request.id]
        assert still.status == "pending"
        assert rows(state, "run")[0].status in ("running", "waiting")
        rpc(
            state,
            "request.respond",
            {"commandId": "c3", "requestId": request.id, "decision": "accept"},
        )
        wait_for(lambda: rows(state, "run")[0].status == "completed", 30)
        (answered,) = [r for r in rows(state, "runtime_request") if r.id == request.id]
        assert (answered.status, answered.decision) == ("resolved", "accept")
        d2.proc.send_signal(signal.SIGTERM)
        assert d2.proc.wait(timeout=30) == 0
    cli_ok(state, "stop-agents")
    cli_ok(state, "check")


def test_a_copy_of_a_state_dir_with_live_holders_is_served_and_leaves_them_alone(
    tmp_path: Path,
) -> None:
    """A backup (or a crash drill's copy) taken while holders run: the copy has no sockets,
    its daemon settles the copied runtime and never reaches the original's holder, whose
    turn goes on; stopping the copy's agents stops nothing of the original's."""
    state = tmp_path / "state"
    copy = tmp_path / "copy"
    words = [f"w{i} " for i in range(60)]
    cfg = config_file(tmp_path, transcript=long_reply(tmp_path, words), reattach_grace_s=30)
    with serve(state, cfg) as d:
        d.wait_notify("READY=1")
        _, session = _start_streaming(state, tmp_path)
        copy_state_dir(state, copy)
        with serve(copy, cfg) as twin:
            twin.wait_notify("READY=1")
            assert json.loads(cli_ok(copy, "held", "--json")) == []
            twin.proc.send_signal(signal.SIGTERM)
            assert twin.proc.wait(timeout=30) == 0
        # `serve` stopped the copy's agents after its exit (as ExecStop= would).
        assert alive(session.pid) and alive(session.holder.pid)
        (run,) = rows(copy, "run")
        assert (run.status, run.last_error) == ("interrupted", "daemon_restart")
        assert not (copy / "held" / session.holder.holder_id).exists()
        wait_for(lambda: rows(state, "run")[0].status == "completed", 30)
        deltas = [e.payload.text for e in events(state, "turn_item.delta")]
        assert "".join(deltas) == "".join(words)
