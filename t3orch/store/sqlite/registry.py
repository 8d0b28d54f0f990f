"""The fleet registry in a SQLite store: one ``daemons`` table beside the log.

A fleet of one, here: the table holds this state dir's daemon. It is not a log
table (no sequence, not rebuilt by ``check``), so it is created on first use
instead of by a migration, and a store without it simply has no daemons yet.
The registry has its own connection: heartbeats come from the event loop's
worker threads, never through the writer's connection and thread.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec

from t3orch.store.errors import StoreError
from t3orch.store.interface import DaemonRecord
from t3orch.store.sqlite.backend import readonly_uri

_CREATE = (
    "CREATE TABLE IF NOT EXISTS daemons "
    "(daemon_id TEXT PRIMARY KEY, heartbeat_at REAL NOT NULL, body BLOB NOT NULL)"
)
_decoder = msgspec.json.Decoder(DaemonRecord)


class SQLiteRegistry:
    """The ``daemons`` table of the store at ``path``; read-only opens only read it."""

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = str(path)
        self.readonly = readonly
        try:
            if readonly:
                self._conn = sqlite3.connect(
                    readonly_uri(Path(path)),
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                self._conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False
                )
                self._conn.execute("PRAGMA busy_timeout = 5000")
                self._conn.execute(_CREATE)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: the daemon registry: {exc}") from exc

    def upsert_daemon(self, record: DaemonRecord) -> None:
        try:
            self._conn.execute(
                "INSERT INTO daemons (daemon_id, heartbeat_at, body) VALUES (?, ?, ?) "
                "ON CONFLICT (daemon_id) DO UPDATE SET "
                "heartbeat_at = excluded.heartbeat_at, body = excluded.body",
                (record.daemon_id, record.heartbeat_at, msgspec.json.encode(record)),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: the daemon registry: {exc}") from exc

    def daemons(self) -> list[DaemonRecord]:
        try:
            rows = self._conn.execute("SELECT body FROM daemons ORDER BY daemon_id").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # a store no daemon of this version has served yet
            raise StoreError(f"{self.path}: the daemon registry: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: the daemon registry: {exc}") from exc
        return [_decoder.decode(body) for (body,) in rows]

    def close(self) -> None:
        self._conn.close()
