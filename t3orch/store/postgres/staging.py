"""The PostgreSQL state view of a batch being decided (t3orch/store/staging.py).

The batch's transaction holds the log's head row lock before anything is
decided, so the committed state read here is final until the batch commits: no
other daemon can commit in between. Each stored row and item's deltas is therefore
read once per batch, and the stored positions of rows staged without being read
are read together, once a select needs their order.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg.rows import TupleRow

from t3orch.store.kinds import Chunk, Row
from t3orch.store.postgres.reads import (
    count_rows,
    read_chunks,
    read_positions,
    read_row,
    read_rows,
)
from t3orch.store.staging import Key, OverlayView


class BatchView(OverlayView):
    """The :class:`OverlayView` of one PostgreSQL batch."""

    def __init__(
        self, conn: psycopg.Connection[TupleRow], now: str, head: int, known: set[Key]
    ) -> None:
        super().__init__(now, next_sequence=head + 1)
        self._conn = conn
        #: Committed rows of these keys exist (rows are never deleted): the store's.
        self._known = known
        #: Committed item deltas read by this batch (its rows: the overlay's). Nothing
        #: committed changes while the batch holds the head row (every commit takes it),
        #: so each is read once per batch.
        self._stored_chunks: dict[tuple[str, int], list[Chunk]] = {}

    def _read_row(self, key: Key) -> Row | None:
        return read_row(self._conn, *key)

    def _read_rows(
        self, kind: str, thread_id: str | None, statuses: Sequence[str] | None
    ) -> list[Row]:
        return read_rows(self._conn, kind, thread_id, statuses=statuses)

    def _count_rows(self, kind: str, thread_id: str) -> int:
        return count_rows(self._conn, kind, thread_id)

    def _read_chunks(self, row: Row) -> list[Chunk]:
        key = (row.id, row.updated_seq)
        stored = self._stored_chunks.get(key)
        if stored is None:
            stored = self._stored_chunks[key] = read_chunks(self._conn, row)
        return stored

    def _read_positions(self, kind: str, ids: Sequence[str]) -> dict[str, int]:
        return read_positions(self._conn, kind, ids)

    def _is_known(self, key: Key) -> bool:
        return key in self._known

    def _remember(self, key: Key) -> None:
        self._known.add(key)

    def _after_stage(self, row: Row) -> None:
        """Nothing to remember: the batch's rows are known to it (``batch.rows``)."""
