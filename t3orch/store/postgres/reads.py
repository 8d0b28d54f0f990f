"""Reading rows and a turn item's streamed text back from PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from t3orch.projections.projector import fold_chunks
from t3orch.store.encoding import chunk_of, streaming
from t3orch.store.kinds import Chunk, Row
from t3orch.store.paging import Cursor

Conn = psycopg.Connection[TupleRow]

ROW_COLUMNS = "kind, id, thread_id, position, status, body, updated_seq"


def _row(r: TupleRow) -> Row:
    kind, id, thread_id, position, status, body, updated_seq = r
    return Row(kind, id, thread_id, position, status, bytes(body), updated_seq)


def read_chunks(conn: Conn, row: Row) -> list[Chunk]:
    """The item's committed deltas after its row's last write."""
    cur = conn.execute(
        "SELECT sequence, payload FROM t3orch.events WHERE item_id = %s AND sequence > %s "
        "ORDER BY sequence",
        (row.id, row.updated_seq),
    )
    return [chunk_of(seq, payload) for seq, payload in cur]


def folded(conn: Conn, row: Row) -> Row:
    return fold_chunks(row, read_chunks(conn, row)) if streaming(row) else row


def read_row(conn: Conn, kind: str, id: str) -> Row | None:
    r = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM t3orch.rows WHERE kind = %s AND id = %s", (kind, id)
    ).fetchone()
    return _row(r) if r else None


def read_positions(conn: Conn, kind: str, ids: Sequence[str]) -> dict[str, int]:
    """The stored positions of those rows (the ones that exist)."""
    cur = conn.execute(
        "SELECT id, position FROM t3orch.rows WHERE kind = %s AND id = ANY(%s)", (kind, list(ids))
    )
    return {str(id): int(position) for id, position in cur}


def read_rows(
    conn: Conn, kind: str, thread_id: str | None, *, statuses: Sequence[str] | None = None
) -> list[Row]:
    """Rows of a kind (of one thread; of these statuses), in (position, id) order."""
    where = "kind = %s"
    args: list[Any] = [kind]
    if thread_id is not None:
        where += " AND thread_id = %s"
        args.append(thread_id)
    if statuses is not None:
        where += " AND status = ANY(%s)"
        args.append(list(statuses))
    cur = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM t3orch.rows WHERE {where} ORDER BY position, id", args
    )
    return [_row(r) for r in cur]


def read_rows_window(
    conn: Conn, kind: str, thread_id: str, limit: int, before: int
) -> tuple[list[Row], int]:
    cur = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM t3orch.rows WHERE kind = %s AND thread_id = %s "
        "AND position < %s ORDER BY position DESC, id DESC LIMIT %s",
        (kind, thread_id, before, limit),
    )
    rows = [_row(r) for r in cur]
    rows.reverse()
    return rows, count_rows(conn, kind, thread_id)


def count_rows(conn: Conn, kind: str, thread_id: str) -> int:
    """How many rows of ``kind`` the thread has (index ``rows_thread``, nothing decoded)."""
    total = conn.execute(
        "SELECT count(*) FROM t3orch.rows WHERE kind = %s AND thread_id = %s", (kind, thread_id)
    ).fetchone()
    return int(total[0]) if total else 0


def read_recent_page(
    conn: Conn, kind: str, thread_id: str, since: int, before: Cursor, limit: int
) -> list[Row]:
    """At most ``limit`` rows of a thread created at or after ``since`` and before
    ``before``, newest first (index ``rows_thread`` read backwards)."""
    cur = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM t3orch.rows WHERE kind = %s AND thread_id = %s "
        "AND position >= %s AND (position, id) < (%s, %s) "
        "ORDER BY position DESC, id DESC LIMIT %s",
        (kind, thread_id, since, *before, limit),
    )
    return [_row(r) for r in cur]
