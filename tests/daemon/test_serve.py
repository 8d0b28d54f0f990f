"""`t3orch serve` as systemd sees it: READY only when usable, watchdog pings, clean stop."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.daemon.support import config_file, rpc, serve


def test_ready_watchdog_and_graceful_stop(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve(state, config_file(tmp_path), watchdog_usec=400_000) as d:
        ready = d.wait_notify("READY=1")
        # READY means usable: the API answers and the previous run was settled.
        assert "STATUS=ready" in ready
        assert (state / "api.sock").exists() and (state / "daemon.json").exists()
        status = rpc(state, "daemon.status")
        assert status is not None
        # Pings come at half of WATCHDOG_USEC, each after a round-trip through the writer.
        d.wait_notify("WATCHDOG=1", within=5)
        d.messages.clear()
        d.wait_notify("WATCHDOG=1", within=5)
        d.proc.send_signal(signal.SIGTERM)
        d.wait_notify("STOPPING=1", within=10)
        assert d.proc.wait(timeout=20) == 0


def test_a_second_daemon_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve(state, config_file(tmp_path)) as first:
        first.wait_notify("READY=1")
        with serve(state, config_file(tmp_path)) as second:
            assert second.proc.wait(timeout=30) == 2
            assert second.proc.stderr is not None
            err = second.proc.stderr.read().decode()
            assert "another t3orch daemon is running" in err
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(timeout=20) == 0
