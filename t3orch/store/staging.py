"""The state view of a batch being decided: stored rows with the batch's staged writes over them.

A store decides a whole batch inside its write transaction and writes it at the end
in a few statements. Until then nothing a submission decides is in the database: an
:class:`OverlayView` reads the stored rows and lays over them what the batch's
earlier submissions staged, so a submission sees the ones before it, and a rejected
one is dropped from memory alone (no savepoint per submission). A turn item's
streamed text is read from the log up to the stored head; this batch's own deltas
are in memory. The same for every backend: each says how it reads stored rows,
positions and deltas, and how it remembers which rows exist.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import attrs

from t3orch.projections.projector import fold_item
from t3orch.store.encoding import streaming
from t3orch.store.interface import CommandReceipt, E, Outcome
from t3orch.store.kinds import Chunk, Row, entity_of, kind_of

Key = tuple[str, str]
#: A position cached for a row that was read and is not stored (positions are >= 0).
ABSENT = -1


class StagedBatch:
    """A decided batch: its outcomes and every write it needs, in the order made."""

    __slots__ = (
        "chunks",
        "events",
        "first_sequence",
        "last_sequence",
        "next_sequence",
        "outcomes",
        "receipts",
        "rows",
    )

    def __init__(self, first_sequence: int) -> None:
        self.outcomes: list[Outcome] = []
        #: Event rows in sequence order, as the backend inserts them.
        self.events: list[tuple[Any, ...]] = []
        #: One upsert per row: the last values written, the first position. Also the
        #: rows as the batch left them, for reads of its later submissions.
        self.rows: dict[Key, Row] = {}
        self.receipts: dict[str, CommandReceipt] = {}
        #: Streamed text of kept submissions, by item (not in the log until commit).
        self.chunks: dict[str, list[Chunk]] = {}
        self.first_sequence = first_sequence
        self.next_sequence = first_sequence
        #: The projection cursor: the last event of a kept submission (0: none).
        self.last_sequence = 0


class OverlayView(ABC):
    """State view and row sink for deciding one batch (see the module docstring).

    What a submission writes is staged and becomes visible to later submissions
    when it is kept; a rejected submission's staging is dropped (no savepoint).
    """

    def __init__(self, now: str, *, next_sequence: int) -> None:
        self._now = now
        self.batch = StagedBatch(next_sequence)
        self.next_sequence = next_sequence
        #: Where the current submission's events start, and its first sequence.
        self._mark = 0
        self._first_sequence = next_sequence
        #: The current submission's rows, in order.
        self._rows: list[Row] = []
        #: Positions of stored rows read while deciding (ABSENT: read, not there): a
        #: staged row keeps its first, and most staged rows were read just before.
        self._positions: dict[Key, int] = {}
        #: Stored rows read by this batch (None: not there). Nothing stored changes
        #: while the batch's transaction is open (the single writer's, or the one
        #: holding the log's head), so each is read once per batch: a session's
        #: submissions read the same run, node and turn one after another.
        self._stored: dict[Key, Row | None] = {}
        #: Staged rows whose stored position (if they have one) was never read: no read
        #: per row; ``_settle`` reads them together once a select needs their order (the
        #: upsert leaves a stored position alone, so the write never needs it).
        self._unsettled: set[Key] = set()

    # -- what each backend says -------------------------------------------------------

    @abstractmethod
    def _read_row(self, key: Key) -> Row | None:
        """The stored row (asked once per key and batch)."""

    @abstractmethod
    def _read_rows(
        self, kind: str, thread_id: str | None, statuses: Sequence[str] | None
    ) -> list[Row]:
        """Stored rows of a kind (of one thread; of these statuses), in (position, id) order."""

    @abstractmethod
    def _count_rows(self, kind: str, thread_id: str) -> int:
        """How many stored rows of a kind the thread has."""

    @abstractmethod
    def _read_chunks(self, row: Row) -> list[Chunk]:
        """The item's stored deltas after its row's last write (the caller does not
        change the list)."""

    @abstractmethod
    def _read_positions(self, kind: str, ids: Sequence[str]) -> dict[str, int]:
        """The stored positions of those rows of ``kind`` (the ones that exist)."""

    @abstractmethod
    def _is_known(self, key: Key) -> bool:
        """The store remembers this row as existing (rows are never deleted)."""

    @abstractmethod
    def _remember(self, key: Key) -> None:
        """Remember this row as existing, for later batches too."""

    @abstractmethod
    def _after_stage(self, row: Row) -> None:
        """``row`` was staged (a backend may remember it)."""

    # -- a submission's life ----------------------------------------------------

    def now(self) -> str:
        return self._now

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
        # ``r.position`` is the writing event's sequence (its ``updated_seq``). A row
        # keeps its first position (the upsert leaves a stored one alone, and the
        # overlay must order reads as the database will).
        seen = self.batch.rows.get(key)
        if seen is not None:
            position = seen.position
        else:
            stored = self._positions.get(key)
            if stored is None:
                self._unsettled.add(key)
            position = r.position if stored is None or stored == ABSENT else stored
        # Most rows are new, or their position is not read yet: staged as projected.
        staged = (
            r
            if position == r.position
            else Row(r.kind, r.id, r.thread_id, position, r.status, r.body, r.updated_seq)
        )
        self.batch.rows[key] = staged
        self._after_stage(staged)

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

    def drop_chunks(self, item_id: str) -> None:  # noqa: B027 - a no-op of the RowSink
        """Nothing to write: the item's upsert moves its updated_seq past its deltas."""

    # -- StateView ------------------------------------------------------------------

    def _row(self, kind: str, id: str) -> Row | None:
        key = (kind, id)
        staged = self.batch.rows.get(key)
        if staged is not None:
            return staged
        if key in self._stored:
            return self._stored[key]
        row = self._stored[key] = self._read_row(key)
        self._positions[key] = ABSENT if row is None else row.position
        return row

    def exists(self, entity: type, id: str) -> bool:
        # Rows are never deleted, so a row seen once exists for good: every streamed
        # delta asks about its item, and a hit here saves a query per delta.
        key = (kind_of(entity), id)
        if self._is_known(key) or key in self.batch.rows:
            return True
        found = self._row(*key) is not None
        if found:
            self._remember(key)
        return found

    def _decoded(self, row: Row) -> Any:
        """The row's value; a streaming item with its pending text folded in."""
        if not streaming(row):
            return row.decode()
        after = row.updated_seq
        # The log holds the text up to the batch's first sequence; the rest is staged.
        stored = self._read_chunks(row) if after < self.batch.first_sequence - 1 else []
        chunks = stored + [c for c in self.batch.chunks.get(row.id, ()) if c.seq > after]
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
        rows = self._merged(kind_of(entity), thread_id, None)
        return [v for r in rows if isinstance(v := self._decoded(r), entity)]

    def select_by_status(
        self, entity: type[E], statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[E]:
        rows = self._merged(kind_of(entity), thread_id, statuses)
        return [v for r in rows if isinstance(v := self._decoded(r), entity)]

    def count(self, entity: type, *, thread_id: str) -> int:
        kind = kind_of(entity)
        if entity is not entity_of(kind):
            return len(self.select(entity, thread_id=thread_id))  # a turn item variant
        # Counted, not read: a send counts its thread's runs, and a thread's history grows.
        staged = [
            r.id for (k, _), r in self.batch.rows.items() if k == kind and r.thread_id == thread_id
        ]
        stored = self._count_rows(kind, thread_id)
        return stored + len(staged) - len(self._read_positions(kind, staged)) if staged else stored

    def _merged(
        self, kind: str, thread_id: str | None, statuses: Sequence[str] | None
    ) -> list[Row]:
        """The stored rows with the staged rows laid over them: a staged row replaces or
        adds its row, or drops it when it left ``statuses``; order stays (position, id)."""
        stored = self._read_rows(kind, thread_id, statuses)
        for r in stored:
            self._positions[(r.kind, r.id)] = r.position
        if self._unsettled:
            self._settle(kind)
        staged = [
            r
            for (k, _), r in self.batch.rows.items()
            if k == kind and (thread_id is None or r.thread_id == thread_id)
        ]
        if not staged:
            return stored
        wanted = None if statuses is None else frozenset(statuses)
        rows = {r.id: r for r in stored}
        for r in staged:
            if wanted is None or r.status in wanted:
                rows[r.id] = r
            else:
                rows.pop(r.id, None)
        return sorted(rows.values(), key=_order)

    def _settle(self, kind: str) -> None:
        """Give the staged rows of ``kind`` their stored positions (one read for all)."""
        keys = [k for k in self._unsettled if k[0] == kind]
        if not keys:
            return
        unknown = [key[1] for key in keys if key not in self._positions]
        if unknown:
            found = self._read_positions(kind, unknown)
            for id in unknown:
                self._positions[(kind, id)] = found.get(id, ABSENT)
        rows = self.batch.rows
        for key in keys:
            self._unsettled.discard(key)
            stored = self._positions[key]
            staged = rows[key]
            if stored != ABSENT and staged.position != stored:
                rows[key] = attrs.evolve(staged, position=stored)


def _order(row: Row) -> tuple[int, str]:
    return (row.position, row.id)
