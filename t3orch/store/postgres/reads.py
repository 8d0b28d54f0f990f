"""Reading rows, events and a turn item's streamed text back from PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import psycopg
from psycopg.rows import TupleRow

from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import Correlation, EventEnvelope, EventPayload, TurnItemDelta
from t3orch.projections.projector import fold_chunks
from t3orch.store.kinds import Chunk, Row

Conn = psycopg.Connection[TupleRow]

ROW_COLUMNS = "kind, id, thread_id, position, status, body, updated_seq"
EVENT_COLUMNS = (
    "sequence, event_id, type, occurred_at, thread_id, run_id, node_id, "
    "provider_session_id, command_id, correlation, payload"
)
_TERMINAL = frozenset(TURN_ITEM_TERMINAL)
_delta_decoder = msgspec.json.Decoder(TurnItemDelta)
_payload_decoder: msgspec.json.Decoder[EventPayload] = msgspec.json.Decoder(EventPayload)
_correlation_decoder = msgspec.json.Decoder(Correlation)


def _row(r: TupleRow) -> Row:
    kind, id, thread_id, position, status, body, updated_seq = r
    return Row(kind, id, thread_id, position, status, bytes(body), updated_seq)


def envelope(r: TupleRow) -> EventEnvelope:
    return EventEnvelope(
        sequence=r[0],
        event_id=r[1],
        type=r[2],
        occurred_at=r[3],
        thread_id=r[4],
        run_id=r[5],
        node_id=r[6],
        provider_session_id=r[7],
        command_id=r[8],
        correlation=_correlation_decoder.decode(r[9]),
        payload=_payload_decoder.decode(r[10]),
    )


def chunk_of(seq: int, payload: bytes) -> Chunk:
    d = _delta_decoder.decode(payload)
    return Chunk(seq, d.item_id, d.field, d.replace, d.text)


def streaming(row: Row) -> bool:
    """A turn item that may have streamed text after its row (terminal ones ignore it)."""
    return row.kind == "turn_item" and row.status not in _TERMINAL


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
    total = conn.execute(
        "SELECT count(*) FROM t3orch.rows WHERE kind = %s AND thread_id = %s", (kind, thread_id)
    ).fetchone()
    return rows, int(total[0]) if total else 0
