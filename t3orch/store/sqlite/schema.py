"""Versioned schema migrations.

``MIGRATIONS[i]`` takes a store from version ``i`` to ``i + 1``. Each runs in
its own transaction together with the version bump, so a crash mid-migration
leaves the previous version intact. Never edit a released migration: append.
"""

from __future__ import annotations

import sqlite3

APPLICATION_ID = 0x74336F72  # "t3or": marks the file as ours in the SQLite header

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    occurred_at TEXT NOT NULL,
    thread_id TEXT,
    run_id TEXT,
    node_id TEXT,
    provider_session_id TEXT,
    command_id TEXT,
    correlation BLOB NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX events_thread ON events (thread_id, sequence);
CREATE TABLE command_receipts (
    command_id TEXT PRIMARY KEY,
    command_type TEXT NOT NULL,
    accepted_at TEXT NOT NULL,
    result_sequence INTEGER NOT NULL,
    result BLOB NOT NULL
);
CREATE TABLE rows (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    thread_id TEXT,
    position INTEGER NOT NULL,
    status TEXT,
    body BLOB NOT NULL,
    PRIMARY KEY (kind, id)
) WITHOUT ROWID;
CREATE INDEX rows_thread ON rows (kind, thread_id, position);
CREATE TABLE projection_state (name TEXT PRIMARY KEY, last_sequence INTEGER NOT NULL);
INSERT INTO projection_state VALUES ('rows', 0);
"""

# v2: the pending-request and session queries filter on status; reconciliation at
# startup scans every non-terminal row, which without this index reads the table.
_V2 = """
CREATE INDEX rows_status ON rows (kind, status);
CREATE INDEX events_run ON events (run_id, sequence) WHERE run_id IS NOT NULL;
"""

# v3: rows become an ordinary rowid table. WITHOUT ROWID stored multi-KB bodies in
# key order across overflow pages: reads of a thread's items were scattered and an
# update rewrote a B-tree cell far larger than the key (bench/store.py measured
# reads 2x and updates 5x slower). An upsert now keeps the first position by itself.
_V3 = """
CREATE TABLE rows_v3 (
    rid INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    thread_id TEXT,
    position INTEGER NOT NULL,
    status TEXT,
    body BLOB NOT NULL,
    UNIQUE (kind, id)
);
INSERT INTO rows_v3 (kind, id, thread_id, position, status, body)
    SELECT kind, id, thread_id, position, status, body FROM rows ORDER BY position, kind, id;
DROP TABLE rows;
ALTER TABLE rows_v3 RENAME TO rows;
CREATE INDEX rows_thread ON rows (kind, thread_id, position);
CREATE INDEX rows_status ON rows (kind, status)
"""

# v4: streamed text is appended as chunks instead of rewriting the item's row per
# delta (a growing row rewritten per delta made appends quadratic in item size).
# An item's next upsert folds its chunks into the row and drops them.
_V4 = """
CREATE TABLE item_chunks (
    seq INTEGER PRIMARY KEY,
    item_id TEXT NOT NULL,
    field TEXT,
    replace INTEGER NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX item_chunks_item ON item_chunks (item_id, seq)
"""

# v5: the log is the store of streamed text. A delta event no longer writes a chunk
# row as well (86% of a busy log are deltas: the chunk table doubled the rows each
# commit wrote); a row records the sequence of the event that last wrote it, and a
# turn item's pending text is its thread's deltas after that sequence. Items with
# chunks get the sequence just before their first chunk, the rest the log's head.
_V5 = """
ALTER TABLE rows ADD COLUMN updated_seq INTEGER NOT NULL DEFAULT 0;
UPDATE rows SET updated_seq = coalesce(
    (SELECT min(c.seq) - 1 FROM item_chunks AS c WHERE c.item_id = rows.id),
    (SELECT seq FROM sqlite_sequence WHERE name = 'events'),
    0
) WHERE kind = 'turn_item';
DROP TABLE item_chunks
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5)
SCHEMA_VERSION = len(MIGRATIONS)


def read_version(conn: sqlite3.Connection) -> int:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def migrate(conn: sqlite3.Connection, *, target: int = SCHEMA_VERSION) -> list[int]:
    """Apply the missing migrations up to ``target``; returns the versions reached."""
    reached: list[int] = []
    version = read_version(conn)
    while version < target:
        script = MIGRATIONS[version]
        # executescript commits first, so wrap explicitly to keep bump + DDL atomic.
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        version += 1
        reached.append(version)
    return reached


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
