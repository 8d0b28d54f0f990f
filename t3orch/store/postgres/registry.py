"""The fleet registry in a PostgreSQL store: ``t3orch.daemons`` beside the log.

The fleet's daemons share one database, so this table is the fleet: every daemon
upserts its own row each heartbeat and reads everyone's. Not a log table (no
sequence, not rebuilt by ``check``); it is created on first writable open, under
the migrations' advisory lock so daemons starting at once create it once. One
autocommit connection of its own: heartbeats never wait on the writer's.
"""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg

from t3orch.store.interface import DaemonRecord
from t3orch.store.postgres.backend import connect, redacted, translate
from t3orch.store.postgres.reads import Conn
from t3orch.store.postgres.schema import MIGRATION_LOCK

_CREATE = (
    "CREATE TABLE IF NOT EXISTS t3orch.daemons "
    "(daemon_id text PRIMARY KEY, heartbeat_at double precision NOT NULL, body bytea NOT NULL)"
)
_decoder = msgspec.json.Decoder(DaemonRecord)


class PostgresRegistry:
    def __init__(self, url: str, *, readonly: bool = False) -> None:
        self.location = redacted(url)
        self._url = url
        self._conn = connect(url)
        if readonly:
            return
        try:
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                self._conn.execute(_CREATE)
        except psycopg.Error as exc:
            self._conn.close()
            raise translate(exc, f"{self.location}: the daemon registry") from exc

    def _alive(self) -> Conn:
        """The connection, made again if the server dropped it (a restart, a failover):
        a heartbeat that failed once must not fail for good."""
        if self._conn.closed or self._conn.broken:
            self._conn = connect(self._url)
        return self._conn

    def _execute(self, query: str, params: tuple[object, ...] = ()) -> psycopg.Cursor[Any]:
        """One statement; once more on a new connection when the server had ended this
        one (idle since before a restart, it is found dead only by using it). Both
        statements here repeat harmlessly, and a send's routing reads the fleet: without
        this the first send after a restart failed."""
        try:
            return self._alive().execute(query, params)
        except psycopg.OperationalError:
            if not self._conn.broken:
                raise
        return self._alive().execute(query, params)

    def upsert_daemon(self, record: DaemonRecord) -> None:
        try:
            self._execute(
                "INSERT INTO t3orch.daemons (daemon_id, heartbeat_at, body) VALUES (%s, %s, %s) "
                "ON CONFLICT (daemon_id) DO UPDATE SET "
                "heartbeat_at = excluded.heartbeat_at, body = excluded.body",
                (record.daemon_id, record.heartbeat_at, msgspec.json.encode(record)),
            )
        except psycopg.Error as exc:
            raise translate(exc, f"{self.location}: the daemon registry") from exc

    def daemons(self) -> list[DaemonRecord]:
        try:
            rows = self._execute("SELECT body FROM t3orch.daemons ORDER BY daemon_id").fetchall()
        except psycopg.errors.UndefinedTable:
            return []  # a store no daemon of this version has served yet
        except psycopg.Error as exc:
            raise translate(exc, f"{self.location}: the daemon registry") from exc
        return [_decoder.decode(bytes(body)) for (body,) in rows]

    def close(self) -> None:
        self._conn.close()
