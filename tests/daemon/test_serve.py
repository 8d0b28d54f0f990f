"""`t3orch serve` as systemd sees it: READY only when usable, watchdog pings, clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.daemon.support import REPO, config_file, rpc, serve


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


def test_a_state_dir_too_long_for_its_socket_is_refused_in_one_line(tmp_path: Path) -> None:
    # 107 bytes is all a Unix socket address holds: the daemon could never serve here, and
    # used to find out only after opening the store, in a traceback.
    state = tmp_path / ("x" * 110)
    with serve(state, config_file(tmp_path)) as d:
        assert d.proc.wait(timeout=30) == 2
        assert d.proc.stderr is not None
        lines = d.proc.stderr.read().decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"t3orch serve: error: state dir {state} cannot hold the daemon's")
    assert "a Unix socket path has at most 107 bytes" in lines[0]
    assert not state.exists()  # nothing written
    # A client says the same instead of "cannot reach the daemon …: None".
    client = subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", "status", "--state-dir", str(state)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert client.returncode == 2
    assert client.stderr.splitlines() == [
        f"t3orch status: no t3orch daemon can serve {state}: "
        + lines[0].split("cannot hold the daemon's socket: ", 1)[1]
    ]


def test_a_file_where_the_socket_goes_is_kept_and_named_in_one_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "api.sock").write_text("not a socket\n")
    with serve(state, config_file(tmp_path)) as d:
        assert d.proc.wait(timeout=30) == 2
        assert d.proc.stderr is not None
        err = d.proc.stderr.read().decode()
    assert err.splitlines()[-1] == (
        f"t3orch serve: error: {state / 'api.sock'} exists and is not a socket; "
        "refusing to replace it"
    )
    assert "Traceback" not in err
    assert (state / "api.sock").read_text() == "not a socket\n"
