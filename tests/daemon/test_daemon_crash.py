"""SIGKILL the daemon mid-turn: no provider survives it, the next daemon settles before serving."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.daemon.support import REPO, config_file, events, rows, rpc, serve, wait_for


def test_daemon_sigkill_leaves_no_provider_and_restart_settles_before_ready(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = config_file(tmp_path, "--slow-ms", "400")  # a turn that takes seconds
    with serve(state, config) as d:
        d.wait_notify("READY=1")
        created = rpc(
            state, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": str(tmp_path)}
        )
        thread_id = created["result"]["threadId"]
        rpc(state, "run.send", {"commandId": "c2", "threadId": thread_id, "text": "hi"})
        session = wait_for(
            lambda: next(
                (
                    s
                    for s in rows(state, "provider_session")
                    if s.pid and s.status in ("running", "ready")
                ),
                None,
            ),
            20,
        )
        wait_for(lambda: any(r.status == "running" for r in rows(state, "run")), 20)
        provider = psutil.Process(session.pid)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(timeout=10)
        killed_at = time.monotonic()
        _, alive = psutil.wait_procs([provider], timeout=5)
        assert not alive, f"provider {session.pid} outlived the daemon by more than 5 s"
        print(f"provider gone {time.monotonic() - killed_at:.3f}s after the daemon's SIGKILL")
    with serve(state, config) as d2:
        d2.wait_notify("READY=1")
        # By READY the dead daemon's run is settled and its session released.
        (run,) = rows(state, "run")
        assert run.status == "interrupted"
        (sess,) = rows(state, "provider_session")
        assert sess.status == "stopped"
        reconciled = events(state, "runtime.reconciled")
        assert reconciled[-1].payload.counts["run"] == 1  # type: ignore[union-attr]
        # And the thread works again on a new runtime.
        rpc(state, "run.send", {"commandId": "c3", "threadId": thread_id, "text": "again"})
        wait_for(lambda: [r.status for r in rows(state, "run")].count("completed") == 1, 30)
        d2.proc.send_signal(signal.SIGTERM)
        assert d2.proc.wait(timeout=20) == 0
    check = subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", "check", "--state-dir", str(state)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
