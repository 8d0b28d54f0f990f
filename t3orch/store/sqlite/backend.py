"""SQLite implementation of the :class:`~t3orch.store.interface.EventStore` contract."""

from __future__ import annotations

import contextlib
import functools
import itertools
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import msgspec

from t3orch.clock import WallClock, iso, system_clock
from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import TYPE_OF, Correlation, EventEnvelope, EventPayload, TurnItemDelta
from t3orch.ids import (
    CommandId,
    EventId,
    IdFactory,
)
from t3orch.projections.projector import apply, concerns
from t3orch.store.errors import (
    CommandRejected,
    SchemaTooNew,
    StoreCorrupt,
    StoreError,
    StoreFull,
)
from t3orch.store.interface import CommandReceipt, Outcome, Submission
from t3orch.store.kinds import Chunk, Row, fold_chunks, fold_item
from t3orch.store.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION, migrate, read_version

Synchronous = Literal["FULL", "NORMAL", "OFF"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_payload_decoder: msgspec.json.Decoder[EventPayload] = msgspec.json.Decoder(EventPayload)
_encoder = msgspec.json.Encoder()
_correlation_decoder = msgspec.json.Decoder(Correlation)
_encode = msgspec.json.encode
_EVENT_COLUMNS = (
    "sequence, event_id, type, occurred_at, thread_id, run_id, node_id, "
    "provider_session_id, command_id, correlation, payload"
)


def _blob(value: Any) -> bytearray:
    """``value`` as JSON in a bytearray, to bind as a BLOB.

    Python's sqlite3 binds str, int, float and bytearray directly; any other value,
    ``bytes`` and ``None`` included, first goes through the adapter lookup, which
    raises and clears an AttributeError each time: ~3,000 instructions a value,
    ~6 per event row (callgrind of the writer: 15% of its instructions).
    """
    buf = bytearray()
    _encoder.encode_into(value, buf)
    return buf


def _translate(exc: sqlite3.Error, path: str) -> StoreError:
    text = str(exc)
    if "full" in text:
        return StoreFull(f"{path}: {text}; the batch was not committed")
    if "not a database" in text or "malformed" in text:
        return StoreCorrupt(f"{path}: {text}")
    return StoreError(f"{path}: {text}")


_F = TypeVar("_F", bound=Callable[..., Any])


def _guarded(method: _F) -> _F:
    """Reads raise StoreError (naming the file), never a bare sqlite3 error."""

    @functools.wraps(method)
    def wrapper(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc

    return cast(_F, wrapper)


class SQLiteStore:
    """One SQLite file (WAL). Not thread-safe: the writer drives it from one thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        readonly: bool = False,
        clock: WallClock = system_clock,
        ids: IdFactory | None = None,
        wal_autocheckpoint: int | None = None,
    ) -> None:
        self.path = str(path)
        self.readonly = readonly
        self._clock = clock
        self._ids = ids or IdFactory()
        self._conn = self._connect(synchronous, wal_autocheckpoint)
        #: Row keys known to exist; see ``_TxnView.exists``. A rolled-back insert
        #: can leave a key here, so the batch that failed clears it (commit_batch).
        self._known: dict[tuple[str, str], None] = {}

    # -- opening ---------------------------------------------------------------

    def _connect(
        self, synchronous: Synchronous, wal_autocheckpoint: int | None
    ) -> sqlite3.Connection:
        memory = self.path == ":memory:"
        if not memory:
            _check_header(Path(self.path), readonly=self.readonly)
        try:
            if self.readonly:
                conn = sqlite3.connect(
                    f"file:{self.path}?mode=ro",
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 5000")
            self._check_identity(conn)
            if not self.readonly:
                if not memory:
                    conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {synchronous}")
                conn.execute("PRAGMA journal_size_limit = 33554432")
                # Deciding reads items and nodes back while the log grows: 16 MB of
                # page cache keeps them (the default 2 MB is mostly index pages).
                conn.execute("PRAGMA cache_size = -16384")
                if wal_autocheckpoint is not None and not memory:
                    # Raised when a WalCheckpointer checkpoints off the commit path:
                    # the mark then only bounds the WAL should that fall behind.
                    conn.execute(f"PRAGMA wal_autocheckpoint = {int(wal_autocheckpoint)}")
                migrate(conn)
            else:
                # Snapshots of long threads read many rows: give readers room.
                conn.execute("PRAGMA cache_size = -65536")
                conn.execute("PRAGMA mmap_size = 268435456")
            if self.readonly and read_version(conn) != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: store schema version {read_version(conn)} needs migrating "
                    f"to {SCHEMA_VERSION}; start the daemon once (it migrates), then retry"
                )
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        return conn

    def _check_identity(self, conn: sqlite3.Connection) -> None:
        (app_id,) = conn.execute("PRAGMA application_id").fetchone()
        version = read_version(conn)
        if app_id not in (0, APPLICATION_ID):
            raise StoreCorrupt(
                f"{self.path}: not a t3orch store (SQLite application_id {app_id:#x}); "
                "refusing to touch it"
            )
        if app_id == 0:
            tables = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
            ).fetchone()[0]
            if tables:
                raise StoreCorrupt(
                    f"{self.path}: a SQLite database of another application ({tables} tables, "
                    "no t3orch marker); refusing to touch it"
                )
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{self.path}: store schema version {version} was written by a newer t3orch "
                f"(this one supports up to {SCHEMA_VERSION}); upgrade t3orch — nothing was changed"
            )

    def close(self) -> None:
        self._conn.close()

    # -- writing ---------------------------------------------------------------

    def commit_batch(self, submissions: Sequence[Submission]) -> list[Outcome]:
        if self.readonly:
            raise StoreError(f"{self.path}: opened read-only")
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            # The single writer holds the write lock: it numbers events itself, so
            # the batch's events go in with one executemany at its end.
            view = _TxnView(conn, iso(self._clock()), self._known, self._head())
            outcomes = [self._run_one(view, sub) for sub in submissions]
            view.flush_events()
            if view.last_sequence:
                conn.execute(
                    "UPDATE projection_state SET last_sequence = ? WHERE name = 'rows'",
                    (view.last_sequence,),
                )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._known.clear()
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise _translate(exc, self.path) from exc
        except BaseException:
            self._known.clear()
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return outcomes

    def _run_one(self, view: _TxnView, sub: Submission) -> Outcome:
        if sub.command_id is not None:
            existing = self._receipt(sub.command_id)
            if existing is not None:
                return Outcome(
                    result=existing.result,
                    result_sequence=existing.result_sequence,
                    duplicate=True,
                )
        # Nothing a submission writes reaches SQLite before it is kept: events,
        # rows and its receipt are staged in the view, so a rejected submission
        # rolls back alone by dropping them (no savepoint per submission).
        view.begin()
        try:
            decision = sub.decide(view)
            command_id = sub.command_id
            envelopes = [
                self._append(view, draft.payload, draft.correlation, command_id)
                for draft in decision.events
            ]
        except sqlite3.Error:
            raise
        except Exception as exc:
            view.forget()
            if not isinstance(exc, CommandRejected):
                exc = CommandRejected("internal_error", f"{type(exc).__name__}: {exc}")
            return Outcome(error=exc)
        head = envelopes[-1].sequence if envelopes else view.next_sequence - 1
        receipt = None
        if sub.command_id is not None:
            receipt = CommandReceipt(
                sub.command_id, sub.command_type, view.now(), head, decision.result
            )
        view.keep(receipt)
        return Outcome(events=envelopes, result=decision.result, result_sequence=head)

    def _append(
        self,
        view: _TxnView,
        payload: EventPayload,
        correlation: Correlation,
        command_id: CommandId | None,
    ) -> EventEnvelope:
        c = concerns(payload)
        event_id = self._ids.new(EventId)
        kind = TYPE_OF[type(payload)]
        sequence = view.next_sequence
        view.next_sequence = sequence + 1
        now = view.now()
        thread_id = c.thread_id
        run_id = c.run_id
        node_id = c.node_id
        session_id = c.provider_session_id
        if run_id is None and node_id is None and session_id is None and command_id is None:
            # A streamed delta (most of a busy log) names only its thread: its row is
            # bound without the NULL columns (see _blob on what a bound NULL costs).
            view.events.append(
                (sequence, event_id, kind, now, thread_id, _blob(correlation), _blob(payload))
            )
        else:
            view.events.append(
                (
                    sequence,
                    event_id,
                    kind,
                    now,
                    thread_id,
                    run_id,
                    node_id,
                    session_id,
                    command_id,
                    _blob(correlation),
                    _blob(payload),
                )
            )
        env = EventEnvelope(
            sequence=sequence,
            event_id=event_id,
            type=kind,
            occurred_at=now,
            # Concerns holds the ids as plain str (one cast call each cost more).
            thread_id=thread_id,  # type: ignore[arg-type]
            run_id=run_id,  # type: ignore[arg-type]
            node_id=node_id,  # type: ignore[arg-type]
            provider_session_id=session_id,  # type: ignore[arg-type]
            command_id=command_id,
            correlation=correlation,
            payload=payload,
        )
        apply(env, view)
        return env

    # -- reading ---------------------------------------------------------------

    def _head(self) -> int:
        row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        return int(row[0]) if row else 0

    @_guarded
    def last_sequence(self) -> int:
        return self._head()

    @_guarded
    def projection_sequence(self) -> int:
        (seq,) = self._conn.execute(
            "SELECT last_sequence FROM projection_state WHERE name = 'rows'"
        ).fetchone()
        return int(seq)

    def _receipt(self, command_id: CommandId) -> CommandReceipt | None:
        row = self._conn.execute(
            "SELECT command_id, command_type, accepted_at, result_sequence, result "
            "FROM command_receipts WHERE command_id = ?",
            (command_id,),
        ).fetchone()
        if row is None:
            return None
        return CommandReceipt(
            CommandId(row[0]), row[1], row[2], row[3], msgspec.json.decode(row[4])
        )

    @_guarded
    def receipt(self, command_id: CommandId) -> CommandReceipt | None:
        return self._receipt(command_id)

    @_guarded
    def read_events(self, after: int = 0, limit: int = 1000) -> list[EventEnvelope]:
        rows = self._conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE sequence > ? ORDER BY sequence LIMIT ?",
            (after, limit),
        ).fetchall()
        return [_envelope(r) for r in rows]

    def iter_events(self, after: int = 0) -> Iterator[EventEnvelope]:
        while True:
            page = self.read_events(after, 2000)
            if not page:
                return
            yield from page
            after = page[-1].sequence

    @_guarded
    def read_thread_events(self, thread_id: str, after: int = 0) -> list[EventEnvelope]:
        rows = self._conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE thread_id = ? AND sequence > ? "
            "ORDER BY sequence",
            (thread_id, after),
        ).fetchall()
        return [_envelope(r) for r in rows]

    @_guarded
    def rows(self, kind: str, *, thread_id: str | None = None) -> list[Row]:
        return _rows(self._conn, kind, thread_id)

    @_guarded
    def rows_by_status(self, kind: str, statuses: Sequence[str]) -> list[Row]:
        return _rows_by_status(self._conn, kind, statuses)

    @_guarded
    def row(self, kind: str, id: str) -> Row | None:
        return _row(self._conn, kind, id)

    @_guarded
    def folded(self, row: Row) -> Row:
        """``row`` with pending streamed text folded in (turn items still streaming)."""
        return _folded(self._conn, row)

    @_guarded
    def all_chunks(self) -> list[Chunk]:
        """Every streamed delta not yet folded into its item's row (``t3orch check``)."""
        folded = dict(
            self._conn.execute("SELECT id, updated_seq FROM rows WHERE kind = 'turn_item'")
        )
        cur = self._conn.execute(
            "SELECT sequence, payload FROM events WHERE type = 'turn_item.delta' ORDER BY sequence"
        )
        chunks = (_chunk(seq, payload) for seq, payload in cur)
        return [c for c in chunks if c.seq > folded.get(c.item_id, 0)]

    @_guarded
    def rows_window(
        self, kind: str, thread_id: str, *, limit: int, before_position: int | None = None
    ) -> tuple[list[Row], int]:
        """The last ``limit`` rows of a thread (before a position), and how many it has."""
        before = before_position if before_position is not None else 2**62
        cur = self._conn.execute(
            f"SELECT {_ROW_COLUMNS} FROM rows WHERE kind = ? AND thread_id = ? AND position < ? "
            "ORDER BY position DESC, id DESC LIMIT ?",
            (kind, thread_id, before, limit),
        )
        rows = [Row(*r) for r in cur.fetchall()]
        rows.reverse()
        (total,) = self._conn.execute(
            "SELECT count(*) FROM rows WHERE kind = ? AND thread_id = ?", (kind, thread_id)
        ).fetchone()
        return rows, int(total)

    @_guarded
    def all_rows(self) -> list[Row]:
        cur = self._conn.execute(f"SELECT {_ROW_COLUMNS} FROM rows ORDER BY kind, id")
        return [Row(*r) for r in cur.fetchall()]

    @_guarded
    def integrity_problems(self) -> list[str]:
        rows = self._conn.execute("PRAGMA quick_check").fetchall()
        return [r[0] for r in rows if r[0] != "ok"]

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[SQLiteStore]:
        """A consistent read: every query inside sees one committed state."""
        try:
            self._conn.execute("BEGIN")
            try:
                yield self
            finally:
                self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc


def _envelope(r: tuple[Any, ...]) -> EventEnvelope:
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


def _check_header(path: Path, *, readonly: bool) -> None:
    if not path.exists():
        if readonly:
            raise StoreError(f"{path}: no store here (nothing to read)")
        return
    if not path.is_file():
        raise StoreCorrupt(f"{path}: not a regular file")
    with path.open("rb") as fh:
        head = fh.read(16)
    if head and head != _SQLITE_MAGIC:
        raise StoreCorrupt(f"{path}: not a SQLite database (bad header); refusing to touch it")


#: How many row keys a store remembers as existing (insertion-ordered, oldest dropped).
KNOWN_ROWS = 16_384


class _TxnView:
    """State view and row sink over the open transaction.

    What a submission writes is staged here and reaches SQLite when it is kept:
    its rows and receipt at once (later submissions read them), its events at the
    end of the batch in one executemany. Streamed text of kept submissions that is
    not in SQLite yet is indexed by item, so folding a streaming item reads it
    from memory.
    """

    def __init__(
        self, conn: sqlite3.Connection, now: str, known: dict[tuple[str, str], None], head: int
    ) -> None:
        self._known = known
        self._conn = conn
        self._now = now
        #: The log's head in SQLite: a row written after it has no stored deltas.
        self._stored_head = head
        #: The projection cursor: the last event of a kept submission.
        self.last_sequence = 0
        self.next_sequence = head + 1
        #: Event rows of the batch, inserted by ``flush_events``; a streamed delta's
        #: (no run, node, session or command) is the shorter tuple of _INSERT_STREAMED.
        self.events: list[tuple[Any, ...]] = []
        #: Where the current submission's events start, and its first sequence.
        self._mark = 0
        self._first_sequence = self.next_sequence
        #: The current submission's row upserts and streamed text, in order.
        self._rows: list[tuple[Any, ...]] = []
        self._chunks: list[Chunk] = []
        #: Kept streamed text of this batch, by item.
        self._batch_chunks: dict[str, list[Chunk]] = {}

    def now(self) -> str:
        return self._now

    # -- a submission's life ----------------------------------------------------

    def begin(self) -> None:
        self._mark = len(self.events)
        self._first_sequence = self.next_sequence

    def keep(self, receipt: CommandReceipt | None) -> None:
        if self._rows:
            self._conn.executemany(_UPSERT_ROW, self._rows)
            for r in self._rows:
                if r[0] == "turn_item":
                    self._remember(r[0], r[1])
            self._rows.clear()
        if self._chunks:
            for c in self._chunks:
                self._batch_chunks.setdefault(c.item_id, []).append(c)
            self._chunks.clear()
        if receipt is not None:
            self._conn.execute(
                "INSERT INTO command_receipts VALUES (?, ?, ?, ?, ?)",
                (
                    receipt.command_id,
                    receipt.command_type,
                    receipt.accepted_at,
                    receipt.result_sequence,
                    _encode(receipt.result),
                ),
            )
        if self.next_sequence > self._first_sequence:
            self.last_sequence = self.next_sequence - 1

    def forget(self) -> None:
        """The submission was rejected: drop what it staged, reuse its sequences."""
        del self.events[self._mark :]
        self._rows.clear()
        self._chunks.clear()
        self.next_sequence = self._first_sequence

    def flush_events(self) -> None:
        """Insert the batch's events (every submission is kept or forgotten by now)."""
        # In sequence order, one executemany per run of rows of one shape: inserted
        # out of order, the log's B-trees cost more than the extra calls.
        for width, rows in itertools.groupby(self.events, len):
            self._conn.executemany(
                _INSERT_EVENT if width == _EVENT_WIDTH else _INSERT_STREAMED, rows
            )

    # -- RowSink ------------------------------------------------------------------

    def put_row(self, row: Row) -> None:
        # ``row.position`` is the writing event's sequence: a new row keeps it as
        # its position (creation order), every write records it as updated_seq.
        self._rows.append(
            (
                row.kind,
                row.id,
                row.thread_id,
                row.position,
                row.status,
                bytearray(row.body),  # bound directly, see _blob
                row.position,
            )
        )

    def append_chunk(self, chunk: Chunk) -> None:
        # Nothing to write: the delta event is in the log, after the item's
        # updated_seq. Kept in memory for reads until the batch's events go in.
        self._chunks.append(chunk)

    def drop_chunks(self, item_id: str) -> None:
        """Nothing to write: the item's upsert moves its updated_seq past its deltas."""

    # -- StateView ------------------------------------------------------------------

    def exists(self, kind: str, id: str) -> bool:
        # Rows are never deleted, so a row seen once exists for good: every streamed
        # delta asks about its item, and a hit here saves a query per delta.
        if (kind, id) in self._known:
            return True
        hit = self._conn.execute(
            "SELECT 1 FROM rows WHERE kind = ? AND id = ?", (kind, id)
        ).fetchone()
        if hit is not None:
            self._remember(kind, id)
        return hit is not None

    def _remember(self, kind: str, id: str) -> None:
        if len(self._known) >= KNOWN_ROWS:
            self._known.pop(next(iter(self._known)))
        self._known[(kind, id)] = None

    def _decoded(self, row: Row) -> Any:
        """The row's value; a streaming item with its pending text folded in."""
        if not _streaming(row):
            return row.decode()
        stored = _chunks(self._conn, row) if row.updated_seq < self._stored_head else []
        pending = [c for c in self._batch_chunks.get(row.id, ()) if c.seq > row.updated_seq]
        chunks = stored + pending
        # Folded as a value: the decision wants the item, not its JSON.
        return fold_item(row.decode(), chunks) if chunks else row.decode()

    def get(self, kind: str, id: str) -> Any | None:
        row = _row(self._conn, kind, id)
        return None if row is None else self._decoded(row)

    def get_unfolded(self, kind: str, id: str) -> Any | None:
        row = _row(self._conn, kind, id)
        return None if row is None else row.decode()

    def select(self, kind: str, *, thread_id: str | None = None) -> list[Any]:
        return [self._decoded(r) for r in _rows(self._conn, kind, thread_id)]

    def select_by_status(
        self, kind: str, statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[Any]:
        rows = _rows_by_status(self._conn, kind, statuses, thread_id)
        return [self._decoded(r) for r in rows]


_INSERT_EVENT = f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_EVENT_WIDTH = 11
_INSERT_STREAMED = (
    "INSERT INTO events (sequence, event_id, type, occurred_at, thread_id, correlation, payload) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# An update keeps the row's first position: order is creation order.
_UPSERT_ROW = (
    "INSERT INTO rows (kind, id, thread_id, position, status, body, updated_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kind, id) DO UPDATE SET "
    "thread_id = excluded.thread_id, status = excluded.status, body = excluded.body, "
    "updated_seq = excluded.updated_seq"
)
_delta_decoder = msgspec.json.Decoder(TurnItemDelta)


def _chunk(seq: int, payload: bytes) -> Chunk:
    d = _delta_decoder.decode(payload)
    return Chunk(seq, d.item_id, d.field, d.replace, d.text)


_ROW_COLUMNS = "kind, id, thread_id, position, status, body, updated_seq"
_TERMINAL_ITEM = frozenset(TURN_ITEM_TERMINAL)


def _chunks(conn: sqlite3.Connection, row: Row) -> list[Chunk]:
    """The item's deltas after its last write: its thread's, filtered by item."""
    # instr() skips the thread's other items' deltas without decoding them.
    cur = conn.execute(
        "SELECT sequence, payload FROM events WHERE thread_id = ? AND sequence > ? "
        "AND type = 'turn_item.delta' AND instr(payload, ?) ORDER BY sequence",
        (row.thread_id, row.updated_seq, row.id.encode()),
    )
    chunks = (_chunk(seq, payload) for seq, payload in cur)
    return [c for c in chunks if c.item_id == row.id]


def _streaming(row: Row) -> bool:
    """A turn item that may have streamed text after its row (terminal ones ignore it)."""
    return row.kind == "turn_item" and row.status not in _TERMINAL_ITEM


def _folded(conn: sqlite3.Connection, row: Row) -> Row:
    """A turn item with the streamed text it has not folded in yet."""
    return fold_chunks(row, _chunks(conn, row)) if _streaming(row) else row


def _row(conn: sqlite3.Connection, kind: str, id: str) -> Row | None:
    r = conn.execute(
        f"SELECT {_ROW_COLUMNS} FROM rows WHERE kind = ? AND id = ?", (kind, id)
    ).fetchone()
    return Row(*r) if r else None


def _rows(conn: sqlite3.Connection, kind: str, thread_id: str | None) -> list[Row]:
    if thread_id is None:
        cur = conn.execute(
            f"SELECT {_ROW_COLUMNS} FROM rows WHERE kind = ? ORDER BY position, id", (kind,)
        )
    else:
        cur = conn.execute(
            f"SELECT {_ROW_COLUMNS} FROM rows WHERE kind = ? AND thread_id = ? "
            "ORDER BY position, id",
            (kind, thread_id),
        )
    return [Row(*r) for r in cur.fetchall()]


def _rows_by_status(
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
        f"SELECT {_ROW_COLUMNS} FROM rows INDEXED BY rows_status WHERE {where} "
        "ORDER BY position, id",
        args,
    )
    return [Row(*r) for r in cur.fetchall()]
