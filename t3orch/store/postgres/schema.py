"""The PostgreSQL store's schema and its versioned migrations.

Everything lives in the ``t3orch`` schema of the database (so a database shared
with other applications is fine). ``MIGRATIONS[i]`` takes the store from version
``i`` to ``i + 1`` in one transaction together with the version row (PostgreSQL's
DDL is transactional: a crash mid-migration leaves the previous version), under
an advisory lock, so daemons starting at once migrate once. Never edit a released
migration: append.
"""

from __future__ import annotations

import psycopg

#: ``pg_advisory_xact_lock`` key of migrations ("t3or").
MIGRATION_LOCK = 0x74336F72

# ``kind`` and ``id`` sort as bytes (the C collation), as the projector's readers
# order rows by (position, id) in Python too. ``item_id`` is a delta's item: a
# streaming item's pending text is its deltas after the row's ``updated_seq``.
_V1 = """
CREATE SCHEMA IF NOT EXISTS t3orch;
CREATE TABLE t3orch.schema_version (version integer NOT NULL);
INSERT INTO t3orch.schema_version VALUES (0);
CREATE TABLE t3orch.log_head (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    last_sequence bigint NOT NULL
);
INSERT INTO t3orch.log_head VALUES (true, 0);
CREATE TABLE t3orch.events (
    sequence bigint PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    type text NOT NULL,
    occurred_at text NOT NULL,
    thread_id text,
    run_id text,
    node_id text,
    provider_session_id text,
    command_id text,
    item_id text,
    correlation bytea NOT NULL,
    payload bytea NOT NULL
);
CREATE INDEX events_thread ON t3orch.events (thread_id, sequence);
CREATE INDEX events_item ON t3orch.events (item_id, sequence) WHERE item_id IS NOT NULL;
CREATE TABLE t3orch.command_receipts (
    command_id text PRIMARY KEY,
    command_type text NOT NULL,
    accepted_at text NOT NULL,
    result_sequence bigint NOT NULL,
    result bytea NOT NULL
);
CREATE TABLE t3orch.rows (
    kind text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    thread_id text,
    position bigint NOT NULL,
    status text,
    body bytea NOT NULL,
    updated_seq bigint NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX rows_thread ON t3orch.rows (kind, thread_id, position);
CREATE INDEX rows_status ON t3orch.rows (kind, status)
"""

MIGRATIONS: tuple[str, ...] = (_V1,)
SCHEMA_VERSION = len(MIGRATIONS)


def read_version(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The store's schema version; 0 for a database t3orch never wrote to."""
    # A query of the catalog, not to_regclass: its cache may not show a table another
    # daemon's migration created after this session's lookups (the lock is advisory).
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables "
        "WHERE schemaname = 't3orch' AND tablename = 'schema_version')"
    ).fetchone()
    if row is None or not row[0]:
        return 0
    got = conn.execute("SELECT version FROM t3orch.schema_version").fetchone()
    return int(str(got[0])) if got else 0


def migrate(
    conn: psycopg.Connection[tuple[object, ...]], *, target: int = SCHEMA_VERSION
) -> list[int]:
    """Apply the missing migrations up to ``target`` (an autocommit connection);
    returns the versions reached."""
    reached: list[int] = []
    while True:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            version = read_version(conn)
            if version >= target:
                return reached
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement.encode())
            conn.execute("UPDATE t3orch.schema_version SET version = %s", (version + 1,))
        reached.append(version + 1)


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
