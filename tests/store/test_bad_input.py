"""Bad stores and state dirs: a clear one-line error, a non-zero exit, no data touched."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from t3orch.core import open_core
from t3orch.ids import CommandId
from t3orch.state import prepare_state_dir
from t3orch.store import writer as writer_module
from t3orch.store.errors import (
    SchemaTooNew,
    StateDirInvalid,
    StoreCorrupt,
    StoreError,
    StoreFull,
)
from t3orch.store.sqlite import backend
from t3orch.store.sqlite.backend import SQLiteStore
from tests.store.contract import diag, upsert

REPO = Path(__file__).resolve().parents[2]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _assert_one_line_failure(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]


def test_garbage_file_is_refused_untouched(state_dir: Path) -> None:
    db = state_dir / "events.sqlite3"
    db.write_bytes(b"this is not a database\n" * 100)
    before = _digest(db)
    with pytest.raises(StoreCorrupt, match="not a SQLite database"):
        SQLiteStore(db)
    for cmd in ("check", "events"):
        _assert_one_line_failure(_cli(cmd, "--state-dir", str(state_dir)), "not a SQLite database")
    assert _digest(db) == before
    assert sorted(p.name for p in state_dir.iterdir()) == ["events.sqlite3"]


def test_damaged_sqlite_file_is_refused_untouched(state_dir: Path) -> None:
    db = state_dir / "events.sqlite3"
    store = SQLiteStore(db)
    store.commit_batch([diag(50)])
    store.close()
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # wreck the first page's b-tree
    db.write_bytes(bytes(data))
    before = _digest(db)
    with pytest.raises(StoreCorrupt):
        SQLiteStore(db)
    _assert_one_line_failure(_cli("check", "--state-dir", str(state_dir)), "events.sqlite3")
    assert _digest(db) == before


def test_foreign_sqlite_database_is_refused_untouched(state_dir: Path) -> None:
    db = state_dir / "events.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = _digest(db)
    with pytest.raises(StoreCorrupt, match="another application"):
        SQLiteStore(db)
    _assert_one_line_failure(_cli("check", "--state-dir", str(state_dir)), "another application")
    assert _digest(db) == before


def test_store_from_a_newer_schema_is_refused_untouched(state_dir: Path) -> None:
    db = state_dir / "events.sqlite3"
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = _digest(db)
    with pytest.raises(SchemaTooNew, match="version 99"):
        SQLiteStore(db)
    _assert_one_line_failure(_cli("check", "--state-dir", str(state_dir)), "newer t3orch")
    assert _digest(db) == before


def test_invalid_state_dirs(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(StateDirInvalid, match="not a directory"):
        prepare_state_dir(a_file, create=True)
    with pytest.raises(StateDirInvalid, match="does not exist"):
        prepare_state_dir(tmp_path / "missing", create=False)
    _assert_one_line_failure(_cli("events", "--state-dir", str(a_file)), "not a directory")
    _assert_one_line_failure(
        _cli("check", "--state-dir", str(tmp_path / "missing")), "does not exist"
    )
    assert not (tmp_path / "missing").exists()


def test_full_disk_fails_the_batch_and_keeps_committed_data(state_dir: Path) -> None:
    db = state_dir / "events.sqlite3"
    store = SQLiteStore(db)
    store.commit_batch([upsert(1)])
    # A real SQLITE_FULL: cap the file at its current size.
    (pages,) = store._conn.execute("PRAGMA page_count").fetchone()
    store._conn.execute(f"PRAGMA max_page_count = {pages + 1}")
    with pytest.raises(StoreFull, match="full"):
        store.commit_batch([diag(2000)])
    assert store.last_sequence() == 1
    assert [r.id for r in store.rows("thread")] == ["thr_0001"]
    store._conn.execute("PRAGMA max_page_count = 1073741823")
    (o,) = store.commit_batch([diag(1)])
    assert o.events[0].sequence == 2
    store.close()


async def test_a_full_store_refuses_commands_and_keeps_the_rest_until_it_has_room(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "FULL_RETRY_S", 0.05)
    db = state_dir / "events.sqlite3"
    async with open_core(db) as core:
        await core.writer.submit(upsert(1).decide)
        # A real SQLITE_FULL: cap the file at its current size.
        (pages,) = core.store._conn.execute("PRAGMA page_count").fetchone()
        core.store._conn.execute(f"PRAGMA max_page_count = {pages + 1}")
        with pytest.raises(StoreFull, match="full"):
            await core.writer.submit(diag(2000).decide, command_id=CommandId("cmd-1"))
        # Provider events (no command id) wait for room, however long it takes...
        waiting = await core.writer.enqueue(diag(2000).decide)
        await trio.sleep(0.3)
        assert not waiting.done
        # ...while a command queued behind them is refused, not held.
        with trio.fail_after(5), pytest.raises(StoreFull):
            await core.writer.submit(diag(1).decide, command_id=CommandId("cmd-2"))
        core.store._conn.execute("PRAGMA max_page_count = 1073741823")
        with trio.fail_after(5):
            out = await waiting.outcome()
        assert [e.sequence for e in out.events][:1] == [2] and len(out.events) == 2000
        later = await core.writer.submit(diag(1).decide, command_id=CommandId("cmd-3"))
        assert later.events[0].sequence == 2002
        assert core.store.receipt(CommandId("cmd-1")) is None
        assert core.store.receipt(CommandId("cmd-2")) is None


def test_an_io_error_on_a_full_disk_is_a_full_store(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite says "disk I/O error" where its -shm cannot grow: the writer must wait for
    # room then, as it does for SQLITE_FULL, not fail the batch.
    db = str(state_dir / "events.sqlite3")
    io_error = sqlite3.OperationalError("disk I/O error")
    assert not isinstance(backend._translate(io_error, db), StoreFull)
    full = os.statvfs(state_dir)
    monkeypatch.setattr(os, "statvfs", lambda p: os.statvfs_result((*full[:4], 0, *full[5:])))
    translated = backend._translate(io_error, db)
    assert isinstance(translated, StoreFull) and "no room left" in str(translated)


def test_a_page_check_a_full_disk_stops_is_not_called_damage(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = state_dir / "events.sqlite3"
    store = SQLiteStore(db)
    store.commit_batch([upsert(1)])
    store.close()
    Path(f"{db}-wal").write_bytes(b"")  # an unclean stop: the check must open the -shm

    class _NoRoom:
        """The check's connection on a disk that cannot take the -shm SQLite rebuilds."""

        def execute(self, sql: str) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        def close(self) -> None:
            pass

    full = os.statvfs(state_dir)
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: _NoRoom())
    monkeypatch.setattr(os, "statvfs", lambda p: os.statvfs_result((*full[:4], 0, *full[5:])))
    with pytest.raises(StoreError) as caught:
        SQLiteStore(db)
    assert not isinstance(caught.value, StoreCorrupt)
    message = str(caught.value)
    assert "its pages could not be checked: disk I/O error" in message
    assert "no room left" in message and "nothing was changed" in message
    assert "damaged" not in message and "move it aside" not in message


def test_serve_refuses_a_store_with_damaged_pages_and_changes_nothing(state_dir: Path) -> None:
    """A valid header and damaged pages in the middle: ``serve`` exits with one line."""
    db = state_dir / "events.sqlite3"
    store = SQLiteStore(db)
    for _ in range(20):
        store.commit_batch([diag(50)])
    store.close()
    size = db.stat().st_size
    assert size > 64 * 4096
    middle = (size // 2) // 4096 * 4096
    with db.open("r+b") as fh:
        fh.seek(middle)
        fh.write(b"\x5a" * 2 * 4096)  # two pages of the log's b-tree, header intact

    def files() -> dict[str, str]:
        return {
            p.name: _digest(p) for p in sorted(state_dir.iterdir()) if p.name.startswith("events")
        }

    before = files()
    assert list(before) == ["events.sqlite3"]
    proc = _cli("serve", "--state-dir", str(state_dir))
    _assert_one_line_failure(proc, str(db))
    assert proc.returncode == 2
    assert "damaged pages" in proc.stderr and "move it aside" in proc.stderr
    assert files() == before
    # What `check` says of the same file.
    _assert_one_line_failure(
        _cli("check", "--state-dir", str(state_dir)), "integrity check failed: Page"
    )
    assert _digest(db) == before["events.sqlite3"]
