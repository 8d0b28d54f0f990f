"""The SQLite state view of a batch being decided (t3orch/store/staging.py).

SQLite has one writer, so what differs is small: stored rows and deltas are read
as asked (the page cache keeps them), and the store remembers a bounded number of
row keys as existing, across batches.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from t3orch.store.kinds import Chunk, Row
from t3orch.store.sqlite.rows import (
    count_rows,
    read_chunks,
    read_row,
    read_rows,
    read_rows_by_status,
)
from t3orch.store.staging import Key, OverlayView

#: How many row keys a store remembers as existing (insertion-ordered, oldest dropped).
KNOWN_ROWS = 16_384


class DecideView(OverlayView):
    """The :class:`OverlayView` of one SQLite batch."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        now: str,
        known: dict[Key, None],
        *,
        next_sequence: int,
    ) -> None:
        super().__init__(now, next_sequence=next_sequence)
        self._conn = conn
        self._known = known

    def _read_row(self, key: Key) -> Row | None:
        return read_row(self._conn, *key)

    def _read_rows(
        self, kind: str, thread_id: str | None, statuses: Sequence[str] | None
    ) -> list[Row]:
        if statuses is None:
            return read_rows(self._conn, kind, thread_id)
        return read_rows_by_status(self._conn, kind, statuses, thread_id)

    def _count_rows(self, kind: str, thread_id: str) -> int:
        return count_rows(self._conn, kind, thread_id)

    def _read_chunks(self, row: Row) -> list[Chunk]:
        return read_chunks(self._conn, row)

    def _read_positions(self, kind: str, ids: Sequence[str]) -> dict[str, int]:
        marks = ",".join("?" * len(ids))
        cur = self._conn.execute(
            f"SELECT id, position FROM rows WHERE kind = ? AND id IN ({marks})", (kind, *ids)
        )
        return dict(cur.fetchall())

    def _is_known(self, key: Key) -> bool:
        return key in self._known

    def _remember(self, key: Key) -> None:
        if len(self._known) >= KNOWN_ROWS:
            self._known.pop(next(iter(self._known)))
        self._known[key] = None

    def _after_stage(self, row: Row) -> None:
        # The batch's own items are asked about by every delta of the next batches.
        if row.kind == "turn_item":
            self._remember((row.kind, row.id))
