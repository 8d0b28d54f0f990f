"""Reading projection rows and a turn item's streamed text back from SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from t3orch.projections.projector import fold_chunks
from t3orch.store.encoding import chunk_of, streaming
from t3orch.store.kinds import Chunk, Row
from t3orch.store.paging import Cursor

ROW_COLUMNS = "kind, id, thread_id, position, status, body, updated_seq"
# An update keeps the row's first position: order is creation order.
UPSERT_ROW = (
    "INSERT INTO rows (kind, id, thread_id, position, status, body, updated_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kind, id) DO UPDATE SET "
    "thread_id = excluded.thread_id, status = excluded.status, body = excluded.body, "
    "updated_seq = excluded.updated_seq"
)


def read_chunks(conn: sqlite3.Connection, row: Row, *, upto: int | None = None) -> list[Chunk]:
    """The item's deltas after its last write (up to ``upto``): its thread's, by item."""
    # instr() skips the thread's other items' deltas without decoding them.
    cur = conn.execute(
        "SELECT sequence, payload FROM events WHERE thread_id = ? AND sequence > ? "
        "AND sequence <= ? AND type = 'turn_item.delta' AND instr(payload, ?) "
        "ORDER BY sequence",
        (row.thread_id, row.updated_seq, 2**62 if upto is None else upto, row.id.encode()),
    )
    chunks = (chunk_of(seq, payload) for seq, payload in cur)
    return [c for c in chunks if c.item_id == row.id]


def folded(conn: sqlite3.Connection, row: Row) -> Row:
    """A turn item with the streamed text it has not folded in yet."""
    return fold_chunks(row, read_chunks(conn, row)) if streaming(row) else row


def read_row(conn: sqlite3.Connection, kind: str, id: str) -> Row | None:
    r = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM rows WHERE kind = ? AND id = ?", (kind, id)
    ).fetchone()
    return Row(*r) if r else None


def read_rows(conn: sqlite3.Connection, kind: str, thread_id: str | None) -> list[Row]:
    if thread_id is None:
        cur = conn.execute(
            f"SELECT {ROW_COLUMNS} FROM rows WHERE kind = ? ORDER BY position, id", (kind,)
        )
    else:
        cur = conn.execute(
            f"SELECT {ROW_COLUMNS} FROM rows WHERE kind = ? AND thread_id = ? "
            "ORDER BY position, id",
            (kind, thread_id),
        )
    return [Row(*r) for r in cur.fetchall()]


def count_rows(conn: sqlite3.Connection, kind: str, thread_id: str) -> int:
    """How many rows of ``kind`` the thread has (index ``rows_thread``, nothing decoded)."""
    (total,) = conn.execute(
        "SELECT count(*) FROM rows WHERE kind = ? AND thread_id = ?", (kind, thread_id)
    ).fetchone()
    return int(total)


def read_rows_by_status(
    conn: sqlite3.Connection, kind: str, statuses: Sequence[str], thread_id: str | None = None
) -> list[Row]:
    marks = ",".join("?" * len(statuses))
    where = f"kind = ? AND status IN ({marks})"
    args: tuple[Any, ...] = (kind, *statuses)
    if thread_id is not None:
        where += " AND thread_id = ?"
        args += (thread_id,)
    # Live rows are few, a thread's rows many: without the hint SQLite picks the
    # thread index and reads every row of the thread to test its status.
    cur = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM rows INDEXED BY rows_status WHERE {where} "
        "ORDER BY position, id",
        args,
    )
    return [Row(*r) for r in cur.fetchall()]


def read_recent_page(
    conn: sqlite3.Connection, kind: str, thread_id: str, since: int, before: Cursor, limit: int
) -> list[Row]:
    """At most ``limit`` rows of a thread created at or after ``since`` and before
    ``before``, newest first: a range of index ``rows_thread`` read backwards (it
    holds ``id`` too, the table's key), stopping after ``limit``."""
    cur = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM rows WHERE kind = ? AND thread_id = ? AND position >= ? "
        "AND (position, id) < (?, ?) ORDER BY position DESC, id DESC LIMIT ?",
        (kind, thread_id, since, *before, limit),
    )
    return [Row(*r) for r in cur.fetchall()]
