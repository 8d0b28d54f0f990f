"""The daemon-less read-only commands change no file of the state dir.

The README promises it: `check`, `events`, `threads`, `show` and `logs` read a stopped
daemon's store as it is. A read-only SQLite open of a WAL store still created empty
``-wal`` and ``-shm`` files beside it; with no ``-wal`` the store is now read as
immutable. With a ``-wal`` (a live daemon) the read uses the daemon's ``-shm``, and
``events --follow`` sees each new commit.
"""

from __future__ import annotations

import hashlib
import os
import select
import signal
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path

from t3orch.state import DB_NAME
from tests.cli.test_client_output import CLI, _cli, _daemon, _env, _new_thread
from tests.daemon.support import REPO


def _files(state: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under the state dir: size, mtime and content hash."""
    found = {}
    for path in sorted(state.rglob("*")):
        if path.is_file() and not path.is_socket():
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(state))] = (st.st_size, st.st_mtime_ns, digest)
    return found


def test_read_only_commands_on_a_stopped_store_create_and_change_nothing(
    tmp_path: Path,
) -> None:
    with _daemon(tmp_path) as state:
        tid = _new_thread(state, tmp_path)
    assert not (state / f"{DB_NAME}-wal").exists(), "a clean stop removes the -wal"
    before = _files(state)
    time.sleep(0.01)  # so that a rewrite would show in a mtime

    for args in (
        ("check",),
        ("events",),
        ("threads",),
        ("show", tid),
        ("logs", tid),
    ):
        out = _cli(state, *args)
        assert out.returncode == 0, (args, out.stderr)
        assert _files(state) == before, f"`t3orch {' '.join(args)}` changed the state dir"
    events = _cli(state, "events")
    assert tid in events.stdout


def _follow(state: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, "events", "--follow", "--state-dir", str(state)],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(follow: subprocess.Popen[bytes], needle: str, within: float = 30) -> None:
    assert follow.stdout is not None
    seen = b""
    deadline = time.monotonic() + within
    while needle.encode() not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([follow.stdout], [], [], 0.5)
        if ready:
            seen += os.read(follow.stdout.fileno(), 65536)
    assert needle.encode() in seen, seen[-500:]


def _end(follow: subprocess.Popen[bytes]) -> None:
    follow.send_signal(signal.SIGINT)
    follow.wait(timeout=10)
    if follow.stdout:
        follow.stdout.close()


def test_events_follow_sees_a_live_daemons_new_commits(tmp_path: Path) -> None:
    with _daemon(tmp_path) as state:
        follow = _follow(state)
        try:
            time.sleep(1.0)  # following, past the events already there
            _wait_for(follow, _new_thread(state, tmp_path))
        finally:
            _end(follow)


def test_events_follow_of_a_stopped_store_sees_a_daemon_started_later(tmp_path: Path) -> None:
    with _daemon(tmp_path) as state:
        first = _new_thread(state, tmp_path)
    follow = _follow(state)
    try:
        _wait_for(follow, first)
        # Read as immutable (no -wal): the daemon's writes come after. A read held
        # open from before them keeps them in the -wal (no checkpoint can move them
        # past it): only a reader of the -wal sees them.
        with _daemon(tmp_path), closing(sqlite3.connect(state / DB_NAME)) as held:
            held.execute("BEGIN")
            held.execute("SELECT count(*) FROM events").fetchone()
            _wait_for(follow, _new_thread(state, tmp_path))
            held.execute("COMMIT")
        # ... and after it stopped again (its -wal checkpointed and gone).
        with _daemon(tmp_path):
            later = _new_thread(state, tmp_path)
        _wait_for(follow, later)
    finally:
        _end(follow)
