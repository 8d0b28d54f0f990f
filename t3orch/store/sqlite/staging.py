"""A batch decided before it is written: the state view deciding sees, and what it staged.

The store decides a whole batch inside its write transaction, then writes it with
one ``executemany`` per table. Until then nothing a submission decides is in
SQLite: a :class:`DecideView` reads the stored rows and lays over them what the
batch's earlier submissions staged, so a submission sees the ones before it, and
a rejected one is dropped from memory alone (no savepoint per submission). A
turn item's streamed text is read from the log up to the stored head; this
batch's own deltas are in memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, TypeVar

from t3orch.projections.projector import fold_item
from t3orch.store.interface import CommandReceipt, Outcome
from t3orch.store.kinds import Chunk, Row, kind_of
from t3orch.store.sqlite.rows import (
    TERMINAL_ITEM,
    read_chunks,
    read_position,
    read_row,
    read_rows,
    read_rows_by_status,
)

#: How many row keys a store remembers as existing (insertion-ordered, oldest dropped).
KNOWN_ROWS = 16_384

Key = tuple[str, str]
E = TypeVar("E")
#: A position cached for a row that was read and is not stored (positions are >= 0).
ABSENT = -1


class PreparedBatch:
    """A decided batch: its outcomes and every write it needs, in the order made."""

    __slots__ = (
        "chunks",
        "events",
        "first_sequence",
        "last_sequence",
        "next_sequence",
        "outcomes",
        "overlay",
        "receipts",
        "rows",
    )

    def __init__(self, first_sequence: int) -> None:
        self.outcomes: list[Outcome] = []
        #: Event rows in sequence order; a streamed delta's (no run, node, session or
        #: command) is the shorter tuple of the streamed insert.
        self.events: list[tuple[Any, ...]] = []
        #: One upsert per row: the last values written, the first position.
        self.rows: dict[Key, tuple[Any, ...]] = {}
        #: The rows as the batch left them, for reads of its later submissions.
        self.overlay: dict[Key, Row] = {}
        self.receipts: dict[str, CommandReceipt] = {}
        #: Streamed text of kept submissions, by item.
        self.chunks: dict[str, list[Chunk]] = {}
        self.first_sequence = first_sequence
        self.next_sequence = first_sequence
        #: The projection cursor: the last event of a kept submission (0: none).
        self.last_sequence = 0


class DecideView:
    """State view and row sink for deciding one batch (see the module docstring).

    What a submission writes is staged and becomes visible to later submissions
    when it is kept; a rejected submission's staging is dropped (no savepoint).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        now: str,
        known: dict[Key, None],
        *,
        next_sequence: int,
    ) -> None:
        self._conn = conn
        self._now = now
        self._known = known
        self.batch = PreparedBatch(next_sequence)
        self.next_sequence = next_sequence
        #: Where the current submission's events start, and its first sequence.
        self._mark = 0
        self._first_sequence = next_sequence
        #: The current submission's rows, in order.
        self._rows: list[Row] = []
        #: Positions of stored rows read while deciding (ABSENT: read, not there): a
        #: staged row keeps its first, and most staged rows were read just before.
        self._positions: dict[Key, int] = {}

    def now(self) -> str:
        return self._now

    # -- a submission's life ----------------------------------------------------

    def begin(self) -> None:
        self._mark = len(self.batch.events)
        self._first_sequence = self.next_sequence

    def keep(self, receipt: CommandReceipt | None) -> None:
        batch = self.batch
        for r in self._rows:
            self._stage(r)
        self._rows.clear()
        if receipt is not None:
            batch.receipts[receipt.command_id] = receipt
        if self.next_sequence > self._first_sequence:
            batch.last_sequence = self.next_sequence - 1
        batch.next_sequence = self.next_sequence

    def forget(self) -> None:
        """The submission was rejected: drop what it staged, reuse its sequences."""
        del self.batch.events[self._mark :]
        self._rows.clear()
        first = self._first_sequence
        for chunks in self.batch.chunks.values():
            while chunks and chunks[-1].seq >= first:
                chunks.pop()
        self.next_sequence = first

    def _stage(self, r: Row) -> None:
        key = (r.kind, r.id)
        # ``r.position`` is the writing event's sequence. A row keeps its first
        # position (the upsert leaves a stored one alone, and the overlay must order
        # reads as SQLite will); every write records the sequence as updated_seq.
        seen = self._staged(key)
        if seen is not None:
            position = seen.position
        else:
            stored = self._positions.get(key)
            if stored is None:
                stored = read_position(self._conn, r.kind, r.id)
            position = r.position if stored is None or stored == ABSENT else stored
        self.batch.rows[key] = (
            r.kind,
            r.id,
            r.thread_id,
            position,
            r.status,
            bytearray(r.body),  # bound directly: bytes go through the adapter lookup
            r.position,
        )
        self.batch.overlay[key] = Row(
            r.kind, r.id, r.thread_id, position, r.status, r.body, r.position
        )
        if r.kind == "turn_item":
            self._remember(key)

    def receipt(self, command_id: str) -> CommandReceipt | None:
        """A receipt this batch staged (the store reads the rest)."""
        return self.batch.receipts.get(command_id)

    # -- RowSink ------------------------------------------------------------------

    def put_row(self, row: Row) -> None:
        self._rows.append(row)

    def append_chunk(self, chunk: Chunk) -> None:
        # Nothing to write: the delta event is in the log, after the item's
        # updated_seq. Kept in memory for reads until it is committed. The
        # submission's own decide is over by now (events are appended after it), so
        # this is visible to later submissions only; ``forget`` takes it back.
        chunks = self.batch.chunks.get(chunk.item_id)
        if chunks is None:
            self.batch.chunks[chunk.item_id] = [chunk]
        else:
            chunks.append(chunk)

    def drop_chunks(self, item_id: str) -> None:
        """Nothing to write: the item's upsert moves its updated_seq past its deltas."""

    # -- StateView ------------------------------------------------------------------

    def _staged(self, key: Key) -> Row | None:
        return self.batch.overlay.get(key)

    def _row(self, kind: str, id: str) -> Row | None:
        key = (kind, id)
        staged = self._staged(key)
        if staged is not None:
            return staged
        row = read_row(self._conn, kind, id)
        self._positions[key] = ABSENT if row is None else row.position
        return row

    def _stored(self, rows: list[Row]) -> list[Row]:
        for r in rows:
            self._positions[(r.kind, r.id)] = r.position
        return rows

    def exists(self, entity: type, id: str) -> bool:
        # Rows are never deleted, so a row seen once exists for good: every streamed
        # delta asks about its item, and a hit here saves a query per delta.
        kind = kind_of(entity)
        key = (kind, id)
        if key in self._known:
            return True
        if self._staged(key) is not None:
            return True
        row = read_row(self._conn, kind, id)
        self._positions[key] = ABSENT if row is None else row.position
        if row is not None:
            self._remember(key)
        return row is not None

    def _remember(self, key: Key) -> None:
        if len(self._known) >= KNOWN_ROWS:
            self._known.pop(next(iter(self._known)))
        self._known[key] = None

    def _decoded(self, row: Row) -> Any:
        """The row's value; a streaming item with its pending text folded in."""
        if row.kind != "turn_item" or row.status in TERMINAL_ITEM:
            return row.decode()
        after = row.updated_seq
        # The log holds the text up to the batch's first sequence; the rest is staged.
        chunks = read_chunks(self._conn, row) if after < self.batch.first_sequence - 1 else []
        chunks += [c for c in self.batch.chunks.get(row.id, ()) if c.seq > after]
        # Folded as a value: the decision wants the item, not its JSON.
        return fold_item(row.decode(), chunks) if chunks else row.decode()

    def get(self, entity: type[E], id: str) -> E | None:
        row = self._row(kind_of(entity), id)
        value = None if row is None else self._decoded(row)
        return value if isinstance(value, entity) else None

    def get_unfolded(self, entity: type[E], id: str) -> E | None:
        row = self._row(kind_of(entity), id)
        value = None if row is None else row.decode()
        return value if isinstance(value, entity) else None

    def select(self, entity: type[E], *, thread_id: str | None = None) -> list[E]:
        kind = kind_of(entity)
        stored = self._stored(read_rows(self._conn, kind, thread_id))
        rows = self._merged(kind, thread_id, stored, None)
        return [v for r in rows if isinstance(v := self._decoded(r), entity)]

    def select_by_status(
        self, entity: type[E], statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[E]:
        kind = kind_of(entity)
        stored = self._stored(read_rows_by_status(self._conn, kind, statuses, thread_id))
        rows = self._merged(kind, thread_id, stored, frozenset(statuses))
        return [v for r in rows if isinstance(v := self._decoded(r), entity)]

    def _merged(
        self,
        kind: str,
        thread_id: str | None,
        stored: list[Row],
        statuses: frozenset[str] | None,
    ) -> list[Row]:
        """``stored`` with the staged rows laid over it: a staged row replaces or adds
        its row, or drops it when it left ``statuses``; order stays (position, id)."""
        staged = [
            r
            for (k, _), r in self.batch.overlay.items()
            if k == kind and (thread_id is None or r.thread_id == thread_id)
        ]
        if not staged:
            return stored
        rows = {r.id: r for r in stored}
        for r in staged:
            if statuses is None or r.status in statuses:
                rows[r.id] = r
            else:
                rows.pop(r.id, None)
        return sorted(rows.values(), key=_order)


def _order(row: Row) -> tuple[int, str]:
    return (row.position, row.id)
