"""Live restore of a shared ``codex app-server`` (issue 21): two threads on one process
under one holder, the daemon SIGKILLed or restarted mid-stream; both runs complete, each
word once and the texts apart, an approval pending across the restart is answered after
it, and a shared holder killed while the daemon is down settles both threads."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.daemon.support import Served, alive, cli_ok, events, rows, rpc, serve, wait_for
from tests.real.live_restore import Held, held

pytestmark = pytest.mark.real_codex

WORDS = 30
STREAM = f"STREAM: {WORDS} 10"
STREAMED = "".join(f"word{i} " for i in range(WORDS))


def _threads(state: Path, work: Path, n: int) -> list[str]:
    return [
        rpc(
            state,
            "thread.create",
            {"commandId": f"t{i}", "provider": "codex", "cwd": str(work)},
        )["result"]["threadId"]
        for i in range(n)
    ]


def _send(state: Path, tid: str, text: str) -> str:
    command = f"s-{uuid.uuid4().hex}"
    sent = rpc(state, "run.send", {"commandId": command, "threadId": tid, "text": text})
    return str(sent["result"]["runId"])


def _live_sessions(state: Path) -> list[Any]:
    return [s for s in rows(state, "provider_session") if s.status != "stopped"]


def _run(state: Path, run_id: str) -> Any:
    return next(r for r in rows(state, "run") if r.id == run_id)


def _texts(state: Path, tid: str) -> list[str]:
    return [
        i.text
        for i in rows(state, "turn_item")
        if type(i).__name__ == "AssistantMessage" and i.thread_id == tid
    ]


def _deltas(state: Path, tid: str) -> str:
    """The thread's streamed text (one run each until the restart's turns end)."""
    return "".join(
        e.payload.text for e in events(state, "turn_item.delta") if e.payload.thread_id == tid
    )


def _both_streaming(h: Held, d: Served) -> tuple[str, str, str, str, list[Any]]:
    """Two threads on the daemon's one held process, a streaming (``STREAM``) and b
    dawdling, both mid-reply: (a, b, a's run, b's run, their live sessions)."""
    d.wait_notify("READY=1")
    a, b = _threads(h.state, h.work, 2)
    ra, rb = _send(h.state, a, STREAM), _send(h.state, b, "DAWDLE")
    wait_for(lambda: _deltas(h.state, a) and _deltas(h.state, b), 60)
    return a, b, ra, rb, _live_sessions(h.state)


def _codex_processes() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(part.endswith("codex") for part in cmd[:1]) and "app-server" in cmd:
            out.append(p)
    return out


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_two_threads_on_one_held_process_across_a_restart_each_word_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    with held(tmp_path, "codex") as h:
        state, cfg = h.state, h.config
        with serve(state, cfg, keep_holders=True) as d:
            a, b, ra, rb, sessions = _both_streaming(h, d)
            # One process, one holder, both threads on it.
            assert len(sessions) == 2
            assert len({s.pid for s in sessions}) == 1
            assert len({s.holder.holder_id for s in sessions}) == 1
            d.proc.send_signal(stop)
            d.proc.wait(timeout=30)
            assert alive(sessions[0].pid)
            assert _run(state, ra).status == "running"
            (listed,) = json.loads(cli_ok(state, "held", "--json"))
            assert listed["providerPid"] == sessions[0].pid
            assert listed["threads"] == sorted((a, b))
        with serve(state, cfg, keep_holders=True) as d2:
            d2.wait_notify("READY=1")
            wait_for(lambda: _run(state, ra).status == "completed", 60)
            wait_for(lambda: _run(state, rb).status == "completed", 60)
            assert _deltas(state, a) == STREAMED
            assert _deltas(state, b) == "dawdled: done"
            assert [t.strip() for t in _texts(state, a)] == [STREAMED.strip()]
            assert _texts(state, b) == ["dawdled: done"]
            # The next turns go on the same process, to their own threads.
            ra2 = _send(state, a, "RECALL")
            wait_for(lambda: _run(state, ra2).status == "completed", 60)
            assert _texts(state, a)[-1] == f'recall: ["{STREAM}"]'
            d2.proc.send_signal(signal.SIGTERM)
            assert d2.proc.wait(timeout=30) == 0
    wait_for(lambda: not alive(sessions[0].pid), 30)


def test_an_approval_on_one_shared_thread_survives_a_restart_and_runs(tmp_path: Path) -> None:
    with held(tmp_path, "codex") as h:
        work, state, cfg = h.work, h.state, h.config
        made = work / "approved.txt"
        with serve(state, cfg, keep_holders=True) as d:
            d.wait_notify("READY=1")
            a, b = _threads(state, work, 2)
            ra = _send(state, a, f"RUN_SHELL: ESCALATE touch {made}")
            rb = _send(state, b, STREAM)
            (request,) = wait_for(
                lambda: [r for r in rows(state, "runtime_request") if r.status == "pending"],
                60,
            )
            wait_for(lambda: _deltas(state, b), 60)
            assert len({s.pid for s in _live_sessions(state)}) == 1
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(timeout=30)
        assert not made.exists()
        with serve(state, cfg, keep_holders=True) as d2:
            d2.wait_notify("READY=1")
            (still,) = [r for r in rows(state, "runtime_request") if r.id == request.id]
            assert still.status == "pending"
            rpc(
                state,
                "request.respond",
                {"commandId": "answer", "requestId": request.id, "decision": "accept"},
            )
            wait_for(lambda: _run(state, ra).status == "completed", 60)
            assert made.exists()
            wait_for(lambda: _run(state, rb).status == "completed", 60)
            assert _deltas(state, b) == STREAMED
            d2.proc.send_signal(signal.SIGTERM)
            assert d2.proc.wait(timeout=30) == 0


def test_a_shared_holder_killed_while_the_daemon_is_down_settles_both(tmp_path: Path) -> None:
    with held(tmp_path, "codex") as h:
        state, cfg = h.state, h.config
        with serve(state, cfg, keep_holders=True) as d:
            a, b, ra, rb, sessions = _both_streaming(h, d)
            assert len({s.holder.holder_id for s in sessions}) == 1
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(timeout=30)
        os.kill(sessions[0].holder.pid, signal.SIGKILL)
        wait_for(lambda: not alive(sessions[0].pid), 30)
        with serve(state, cfg, keep_holders=True) as d2:
            d2.wait_notify("READY=1")
            for run_id in (ra, rb):
                assert _run(state, run_id).status in ("failed", "interrupted")
            assert all(s.status == "stopped" for s in rows(state, "provider_session"))
            # Each thread's next send works, on a new process.
            ra2, rb2 = _send(state, a, "RECALL"), _send(state, b, "RECALL")
            for run_id in (ra2, rb2):
                wait_for(lambda run_id=run_id: _run(state, run_id).status == "completed", 60)
            assert {s.pid for s in _live_sessions(state)}.isdisjoint({sessions[0].pid})
            d2.proc.send_signal(signal.SIGTERM)
            assert d2.proc.wait(timeout=30) == 0
    wait_for(lambda: not [p for p in _codex_processes() if str(state) in " ".join(p.cmdline())], 30)
