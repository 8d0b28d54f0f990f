"""Deciding a batch inside its transaction: the state view, and what the batch staged.

The batch's transaction holds the log's head row lock before anything is
decided, so the committed state read here is final until the batch commits: no
other daemon can commit in between. What a submission writes is staged in memory
and laid over the committed rows for later submissions; a rejected submission's
staging is dropped (no savepoint), and the whole batch is written at the end in a
few statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import psycopg
from psycopg.rows import TupleRow

from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.projections.projector import fold_item
from t3orch.store.interface import CommandReceipt, Outcome
from t3orch.store.kinds import Chunk, Row, kind_of
from t3orch.store.postgres.reads import read_chunks, read_positions, read_row, read_rows

Key = tuple[str, str]
#: A position cached for a row that was read and is not stored (positions are >= 0).
ABSENT = -1
_TERMINAL = frozenset(TURN_ITEM_TERMINAL)


class StagedBatch:
    """What a decided batch writes: events in sequence order, rows, receipts."""

    def __init__(self, first_sequence: int) -> None:
        self.outcomes: list[Outcome] = []
        #: Event rows (the columns of ``EVENT_COLUMNS``), in sequence order.
        self.events: list[tuple[Any, ...]] = []
        #: One upsert per row: the last values written, the first position.
        self.rows: dict[Key, Row] = {}
        self.receipts: dict[str, CommandReceipt] = {}
        #: Streamed text of kept submissions, by item (not in the log until commit).
        self.chunks: dict[str, list[Chunk]] = {}
        self.next_sequence = first_sequence
        #: The last sequence of a kept submission (0: nothing written).
        self.last_sequence = 0


class BatchView:
    """The :class:`~t3orch.store.interface.StateView` and row sink of one batch."""

    def __init__(
        self, conn: psycopg.Connection[TupleRow], now: str, head: int, known: set[Key]
    ) -> None:
        self._conn = conn
        self._now = now
        #: Committed rows of these keys exist (rows are never deleted): the store's.
        self._known = known
        self.batch = StagedBatch(head + 1)
        self.next_sequence = head + 1
        self._mark = 0
        self._first_sequence = head + 1
        #: The current submission's rows, in order.
        self._rows: list[Row] = []
        #: Stored positions of rows read while deciding (ABSENT: read, not there).
        self._positions: dict[Key, int] = {}
        #: Committed rows and item deltas read by this batch. Nothing committed changes
        #: while the batch holds the head row (every commit takes it), so each is read
        #: once per batch: a session's ingest reads the same item and turn per submission.
        self._stored_rows: dict[Key, Row | None] = {}
        self._stored_chunks: dict[tuple[str, int], list[Chunk]] = {}
        #: Staged rows whose stored position (if they have one) was never read.
        self._unsettled: set[Key] = set()

    def now(self) -> str:
        return self._now

    # -- a submission's life ----------------------------------------------------

    def begin(self) -> None:
        self._mark = len(self.batch.events)
        self._first_sequence = self.next_sequence

    def keep(self, receipt: CommandReceipt | None) -> None:
        for r in self._rows:
            self._stage(r)
        self._rows.clear()
        if receipt is not None:
            self.batch.receipts[receipt.command_id] = receipt
        if self.next_sequence > self._first_sequence:
            self.batch.last_sequence = self.next_sequence - 1
        self.batch.next_sequence = self.next_sequence

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
        # A row keeps its first position: the staged one's, else the stored one's. The
        # upsert leaves a stored position alone, so a row never read keeps its own here
        # until a select of its kind needs the order (``_settle``): no read per row.
        seen = self.batch.rows.get(key)
        if seen is not None:
            position = seen.position
        else:
            stored = self._positions.get(key)
            if stored is None:
                self._unsettled.add(key)
            position = r.position if stored is None or stored == ABSENT else stored
        # ``r.position`` is the writing event's sequence: the row's updated_seq.
        self.batch.rows[key] = Row(
            r.kind, r.id, r.thread_id, position, r.status, r.body, r.position
        )

    def receipt(self, command_id: str) -> CommandReceipt | None:
        return self.batch.receipts.get(command_id)

    # -- RowSink ------------------------------------------------------------------

    def put_row(self, row: Row) -> None:
        self._rows.append(row)

    def append_chunk(self, chunk: Chunk) -> None:
        # The delta event is the chunk in the log; kept here for later submissions.
        self.batch.chunks.setdefault(chunk.item_id, []).append(chunk)

    def drop_chunks(self, item_id: str) -> None:
        """Nothing to write: the item's upsert moves its updated_seq past its deltas."""

    # -- StateView ------------------------------------------------------------------

    def _row(self, kind: str, id: str) -> Row | None:
        key = (kind, id)
        staged = self.batch.rows.get(key)
        if staged is not None:
            return staged
        if key in self._stored_rows:
            return self._stored_rows[key]
        row = self._stored_rows[key] = read_row(self._conn, kind, id)
        self._positions[key] = ABSENT if row is None else row.position
        return row

    def exists(self, kind: str, id: str) -> bool:
        key = (kind, id)
        if key in self._known or key in self.batch.rows:
            return True
        found = self._row(kind, id) is not None
        if found:
            self._known.add(key)
        return found

    def _decoded(self, row: Row) -> Any:
        """The row's value; a streaming item with its pending text folded in."""
        if row.kind != "turn_item" or row.status in _TERMINAL:
            return row.decode()
        after = row.updated_seq
        stored = self._stored_chunks.get((row.id, after))
        if stored is None:
            stored = self._stored_chunks[(row.id, after)] = read_chunks(self._conn, row)
        chunks = stored + [c for c in self.batch.chunks.get(row.id, ()) if c.seq > after]
        return fold_item(row.decode(), chunks) if chunks else row.decode()

    def get(self, kind: str | type[Any], id: str) -> Any | None:
        if isinstance(kind, str):
            row = self._row(kind, id)
            return None if row is None else self._decoded(row)
        row = self._row(kind_of(kind), id)
        value = None if row is None else self._decoded(row)
        return value if isinstance(value, kind) else None

    def get_unfolded(self, kind: str, id: str) -> Any | None:
        row = self._row(kind, id)
        return None if row is None else row.decode()

    def select(self, kind: str | type[Any], *, thread_id: str | None = None) -> list[Any]:
        name = kind if isinstance(kind, str) else kind_of(kind)
        rows = self._merged(name, thread_id, read_rows(self._conn, name, thread_id), None)
        return _typed(kind, [self._decoded(r) for r in rows])

    def select_by_status(
        self, kind: str | type[Any], statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[Any]:
        name = kind if isinstance(kind, str) else kind_of(kind)
        stored = read_rows(self._conn, name, thread_id, statuses=statuses)
        rows = self._merged(name, thread_id, stored, frozenset(statuses))
        return _typed(kind, [self._decoded(r) for r in rows])

    def _merged(
        self,
        kind: str,
        thread_id: str | None,
        stored: list[Row],
        statuses: frozenset[str] | None,
    ) -> list[Row]:
        """``stored`` with the staged rows laid over it, in (position, id) order."""
        for r in stored:
            self._positions[(r.kind, r.id)] = r.position
        self._settle(kind)
        staged = [
            r
            for (k, _), r in self.batch.rows.items()
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
        return sorted(rows.values(), key=lambda r: (r.position, r.id))

    def _settle(self, kind: str) -> None:
        """Give the staged rows of ``kind`` their stored positions (one read for all)."""
        keys = [k for k in self._unsettled if k[0] == kind]
        if not keys:
            return
        unknown = [key[1] for key in keys if key not in self._positions]
        if unknown:
            found = read_positions(self._conn, kind, unknown)
            for id in unknown:
                self._positions[(kind, id)] = found.get(id, ABSENT)
        for key in keys:
            self._unsettled.discard(key)
            stored = self._positions[key]
            staged = self.batch.rows[key]
            if stored != ABSENT and staged.position != stored:
                self.batch.rows[key] = attrs.evolve(staged, position=stored)


def _typed(kind: str | type[Any], values: list[Any]) -> list[Any]:
    """Of a typed read, the values of that type (a turn item variant of all items)."""
    return values if isinstance(kind, str) else [v for v in values if isinstance(v, kind)]
