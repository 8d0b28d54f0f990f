"""What a SIGKILLed daemon's providers left running is swept at the next start; a copy of a
live state dir leaves the original daemon's agents alone."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from t3orch.state import copy_state_dir
from tests.daemon.support import config_file, events, rows, rpc, serve, wait_for


def _helpers(pidfile: Path) -> dict[str, psutil.Process]:
    lines = wait_for(lambda: pidfile.exists() and len(pidfile.read_text().splitlines()) >= 2, 20)
    assert lines
    out = {}
    for line in pidfile.read_text().splitlines()[:2]:
        name, pid = line.split()
        out[name] = psutil.Process(int(pid))
    return out


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _running_turn(state: Path, tmp: Path) -> Any:
    thread_id = rpc(
        state, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": str(tmp)}
    )["result"]["threadId"]
    rpc(state, "run.send", {"commandId": "c2", "threadId": thread_id, "text": "hi"})
    wait_for(lambda: any(r.status == "running" for r in rows(state, "run")), 20)
    return wait_for(lambda: next((s for s in rows(state, "provider_session") if s.pid), None), 20)


def _kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()


def test_helpers_of_a_sigkilled_daemons_provider_are_swept_at_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    pidfile = tmp_path / "helpers"
    config = config_file(tmp_path, "--slow-ms", "400", "--helpers-pidfile", str(pidfile))
    helpers: dict[str, psutil.Process] = {}
    try:
        with serve(state, config) as d:
            d.wait_notify("READY=1")
            session = _running_turn(state, tmp_path)
            helpers = _helpers(pidfile)
            assert helpers["group"].pid != session.pid
            assert psutil.Process(session.pid).pid == helpers["group"].ppid()
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(timeout=10)
            # The provider itself dies with the daemon (parent-death signal); its helpers don't.
            time.sleep(0.5)
            assert _alive(helpers["group"]) and _alive(helpers["escaped"])
        with serve(state, config) as d2:
            d2.wait_notify("READY=1")
            restarted = time.monotonic()
            deadline = restarted + 5
            while time.monotonic() < deadline and any(_alive(p) for p in helpers.values()):
                time.sleep(0.05)
            left = [name for name, p in helpers.items() if _alive(p)]
            assert left == [], f"{left} still running 5 s after the restart"
            (run,) = rows(state, "run")
            # Not the user's interrupt: the run says the daemon was lost.
            assert run.status == "interrupted" and run.last_error == "daemon_restart"
            counts = events(state, "runtime.reconciled")[-1].payload.counts
            assert counts["orphans_killed"] >= 2
            d2.proc.send_signal(signal.SIGTERM)
            assert d2.proc.wait(timeout=20) == 0
    finally:
        _kill_all(list(helpers.values()))


def test_a_daemon_on_a_copy_leaves_the_originals_agents_alone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    copy = tmp_path / "copy"
    pidfile = tmp_path / "helpers"
    config = config_file(tmp_path, "--slow-ms", "400", "--helpers-pidfile", str(pidfile))
    helpers: dict[str, psutil.Process] = {}
    try:
        with serve(state, config) as original:
            original.wait_notify("READY=1")
            session = _running_turn(state, tmp_path)
            helpers = _helpers(pidfile)
            provider = psutil.Process(session.pid)
            # A backup taken while the daemon runs, then served (a restore, a drill).
            copy_state_dir(state, copy)
            with serve(copy, config) as second:
                second.wait_notify("READY=1")
                assert _alive(provider), "the copy's daemon killed the original's provider"
                assert all(_alive(p) for p in helpers.values())
                # The original's run goes on.
                assert any(r.status == "running" for r in rows(state, "run"))
                notes = [
                    e.payload
                    for e in events(copy, "provider.diagnostic")
                    if e.payload.code == "state_dir_copy"
                ]
                assert notes and str(state) in notes[0].message
                counts = events(copy, "runtime.reconciled")[-1].payload.counts
                assert counts["copy_of_live_state_dir"] == 1
                assert counts["orphans_killed"] == 0
                second.proc.send_signal(signal.SIGTERM)
                assert second.proc.wait(timeout=20) == 0
            assert _alive(provider)
            original.proc.send_signal(signal.SIGTERM)
            assert original.proc.wait(timeout=20) == 0
        # A graceful stop takes the helpers with the provider, the escaped one too.
        wait_for(lambda: not any(_alive(p) for p in helpers.values()), 5)
    finally:
        _kill_all(list(helpers.values()))
