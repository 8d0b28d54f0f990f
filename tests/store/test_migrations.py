"""Migrations from every earlier schema version keep the data and reach the current one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.sqlite.schema import MIGRATIONS, SCHEMA_VERSION, migrate, read_version
from tests.store.contract import diag, upsert


def _store_at(path: Path, version: int) -> None:
    """Build a store at ``version`` with data written the way that version wrote it."""
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, target=version)
    if version >= 1:
        conn.close()
        # Data is written by today's code but only through v1 tables and columns.
        store = SQLiteStore.__new__(SQLiteStore)
        store.path, store.readonly = str(path), False
        from t3orch.clock import system_clock
        from t3orch.ids import IdFactory

        store._clock, store._ids = system_clock, IdFactory()
        store._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        store.commit_batch([upsert(1), diag(3), upsert(2)])
        store.close()
    else:
        conn.close()


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_migrates_from_every_earlier_version(tmp_path: Path, version: int) -> None:
    db = tmp_path / "events.sqlite3"
    _store_at(db, version)
    store = SQLiteStore(db)
    try:
        assert read_version(store._conn) == SCHEMA_VERSION
        assert store.last_sequence() == 5
        assert [r.id for r in store.rows("thread")] == ["thr_0001", "thr_0002"]
        indexes = {
            r[0] for r in store._conn.execute("SELECT name FROM sqlite_master WHERE type='index'")
        }
        assert {"rows_status", "events_run"} <= indexes
        (o,) = store.commit_batch([diag(1)])
        assert o.events[0].sequence == 6
    finally:
        store.close()


def test_a_failed_migration_leaves_the_previous_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "events.sqlite3"
    _store_at(db, 1)
    broken = (*MIGRATIONS[:1], "CREATE INDEX rows_status ON rows (kind); CREATE TABLE broken (")
    monkeypatch.setattr("t3orch.store.sqlite.schema.MIGRATIONS", broken)
    conn = sqlite3.connect(db, isolation_level=None)
    with pytest.raises(sqlite3.Error):
        migrate(conn, target=2)
    assert read_version(conn) == 1
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "rows_status" not in indexes
    conn.close()


def test_schema_version_matches_the_migration_list() -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 2
