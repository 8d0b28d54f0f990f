"""``Membership.check_alone``: is the live row of this daemon id another daemon's, here?

On one host, a row's pid names its daemon while the process that wrote the row's last
heartbeat still has it. The real registry (SQLite) and real processes; the wall clock
of the row's writer is what the test sets, as a clock step would have left it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import trio

from t3orch.fleet.members import Membership
from t3orch.ids import DaemonId
from t3orch.store.errors import StateDirInvalid
from t3orch.store.interface import DaemonRecord
from t3orch.store.sqlite.registry import SQLiteRegistry

ME = DaemonId("dmn_twin")


def _check(tmp_path: Path, theirs: DaemonRecord) -> None:
    registry = SQLiteRegistry(tmp_path / "events.sqlite3")
    try:
        registry.upsert_daemon(theirs)
        me = Membership.starting(
            registry,
            ME,
            host=theirs.host,
            version="0",
            token="0" * 64,
            heartbeat_s=1.0,
            timeout_s=10.0,
        )
        trio.run(me.check_alone, tmp_path)
    finally:
        registry.close()


def _row(pid: int, started_at: float, heartbeat_at: float) -> DaemonRecord:
    return DaemonRecord(
        daemon_id=ME,
        host="box",
        version="0",
        pid=pid,
        api_url="",
        token="0" * 64,
        started_at=started_at,
        heartbeat_at=heartbeat_at,
        expires_at=time.time() + 60,
    )


def test_a_live_daemon_whose_clock_stepped_forward_since_it_registered_is_still_live(
    tmp_path: Path,
) -> None:
    """It registered on a clock 30 s behind the one it beats on now (NTP's first sync):
    its process's start, read on today's wall clock, is after its ``started_at``."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            time.sleep(0.2)
            start = psutil.Process(live.pid).create_time()
            row = _row(live.pid, started_at=start - 30 + 0.2, heartbeat_at=time.time())
            with pytest.raises(StateDirInvalid, match=f"daemon {ME} already serves this log"):
                _check(tmp_path, row)
        finally:
            live.kill()


def test_a_pid_reused_after_the_rows_last_heartbeat_is_not_that_daemon(tmp_path: Path) -> None:
    """The row's writer beat 5 s ago and died; a process that started since has its pid."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as later:
        try:
            beat = time.time() - 5
            _check(tmp_path, _row(later.pid, started_at=beat - 100, heartbeat_at=beat))
        finally:
            later.kill()


def test_this_very_process_is_not_a_twin(tmp_path: Path) -> None:
    now = time.time()
    _check(tmp_path, _row(os.getpid(), started_at=now - 1, heartbeat_at=now))
