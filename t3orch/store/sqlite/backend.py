"""SQLite implementation of the :class:`~t3orch.store.interface.EventStore` contract."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar, cast
from urllib.parse import quote

import msgspec

from t3orch.clock import WallClock, iso, system_clock
from t3orch.domain.request import RuntimeRequest
from t3orch.domain.turn_items import TurnItem, TurnItemBase
from t3orch.events import TYPE_OF, Correlation, EventEnvelope, EventPayload, TurnItemDelta
from t3orch.ids import (
    CommandId,
    EventId,
    IdFactory,
)
from t3orch.projections.projector import apply, concerns, fold_item
from t3orch.store.deciding import decide_one
from t3orch.store.encoding import EVENT_COLUMNS, chunk_of, envelope, receipt_row, streaming
from t3orch.store.errors import (
    SchemaTooNew,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreNotDurable,
)
from t3orch.store.interface import CommandReceipt, Outcome, Submission
from t3orch.store.kinds import Chunk, Row, kind_of
from t3orch.store.paging import Cursor, entities_newest_first
from t3orch.store.sqlite.rows import (
    ROW_COLUMNS,
    UPSERT_ROW,
    count_rows,
    folded,
    read_chunks,
    read_recent_page,
    read_row,
    read_rows,
    read_rows_by_status,
)
from t3orch.store.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION, migrate, read_version
from t3orch.store.sqlite.staging import DecideView
from t3orch.store.staging import StagedBatch

Synchronous = Literal["FULL", "NORMAL", "OFF"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
#: A writable open first runs SQLite's page check (``PRAGMA quick_check``) on the
#: file: a store with damaged pages is refused before anything writes to it. It
#: reads every page: 1 GB costs 0.5 s from the page cache, 15 s from this VM's disk
#: (bench/store_open.py, docs/performance.md; the decision: docs/decisions.md).
VERIFY_PAGES_AT_OPEN = True
_encoder = msgspec.json.Encoder()


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
    if "disk I/O error" in text and _no_room(path):
        # SQLite says only "disk I/O error" when the -wal or -shm cannot grow.
        return StoreFull(f"{path}: {text} (its filesystem has no room left)")
    if _corrupt(text):
        return StoreCorrupt(f"{path}: {text}")
    return StoreError(f"{path}: {text}")


def _corrupt(text: str) -> bool:
    """SQLite's words for a file that is not a whole database."""
    return "not a database" in text or "malformed" in text


def _no_room(path: str) -> bool:
    try:
        return os.statvfs(os.path.dirname(os.path.abspath(path))).f_bavail == 0
    except OSError:
        return False


_F = TypeVar("_F", bound=Callable[..., Any])
_E = TypeVar("_E")


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
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.path = str(path)
        self.readonly = readonly
        self._clock = clock
        self._ids = ids or IdFactory()
        #: ``FULL`` on a file: the connection runs ``NORMAL`` and ``make_durable``
        #: fsyncs the ``-wal`` after each commit, what ``FULL`` does inside COMMIT
        #: (the WAL header of a restarted log is synced by SQLite in both). COMMIT
        #: then returns with the commit in the OS page cache: *visible* (it survives
        #: a crash of the daemon), durable after the fsync (docs/decisions.md).
        self.visible_first = not readonly and self.path != ":memory:" and synchronous == "FULL"
        self._fsync = fsync
        #: The ``-wal`` file fsynced (opened at the first commit), and its identity.
        self._wal_fd: int | None = None
        self._wal_id: tuple[int, int] = (0, 0)
        #: A failed fsync: nothing is written after it (see StoreNotDurable).
        self._not_durable: StoreNotDurable | None = None
        self._conn = self._connect(
            "NORMAL" if self.visible_first else synchronous, wal_autocheckpoint
        )
        #: Row keys known to exist; see ``DecideView.exists``. A batch that fails to
        #: commit may have made keys known, so it clears them.
        self._known: dict[tuple[str, str], None] = {}
        self._next_sequence = self._head() + 1

    # -- opening ---------------------------------------------------------------

    def _connect(
        self, synchronous: Synchronous, wal_autocheckpoint: int | None
    ) -> sqlite3.Connection:
        memory = self.path == ":memory:"
        if not memory:
            _check_header(Path(self.path), readonly=self.readonly)
            if not self.readonly and VERIFY_PAGES_AT_OPEN:
                _verify_pages(Path(self.path))
        try:
            if self.readonly:
                conn = _connect_readonly(Path(self.path))
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
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None

    # -- writing ---------------------------------------------------------------

    @property
    def location(self) -> str:
        return self.path

    def commit_batch(self, submissions: Sequence[Submission]) -> list[Outcome]:
        outcomes = self.commit_visible(submissions)
        self.make_durable()
        return outcomes

    def commit_visible(self, submissions: Sequence[Submission]) -> list[Outcome]:
        """Decide the batch inside its write transaction (one snapshot, the single
        writer's), then write what it staged and commit."""
        if self.readonly:
            raise StoreError(f"{self.path}: opened read-only")
        if self._not_durable is not None:
            raise self._not_durable
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            batch = self._decided(submissions)
            self._write(batch)
            conn.execute("COMMIT")
        except BaseException as exc:
            # What the batch made known may not exist (see DecideView.exists).
            self._known.clear()
            self._rollback(exc)
        self._next_sequence = batch.next_sequence
        return batch.outcomes

    def make_durable(self) -> None:
        if not self.visible_first:
            return
        if self._not_durable is not None:
            raise self._not_durable
        wal = f"{self.path}-wal"
        try:
            self._fsync(self._wal_file(wal))
        except OSError as exc:
            # Never retried: after a failed fsync the kernel may have dropped the
            # pages it could not write, and a later fsync would succeed without them.
            self._not_durable = StoreNotDurable(
                f"{wal}: fsync failed ({exc}); the last commit may not be on disk, so "
                "nothing more is written: restart the daemon (it reads back what the disk kept)"
            )
            raise self._not_durable from exc

    def _wal_file(self, wal: str) -> int:
        """A descriptor of the ``-wal`` SQLite writes now (the same inode across its
        resets and truncations; reopened should it ever be another file)."""
        st = os.stat(wal)
        if self._wal_fd is not None and (st.st_dev, st.st_ino) == self._wal_id:
            return self._wal_fd
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        fd = os.open(wal, os.O_RDONLY | os.O_CLOEXEC)
        opened = os.fstat(fd)
        self._wal_fd, self._wal_id = fd, (opened.st_dev, opened.st_ino)
        # The file's directory entry, once (SQLite syncs a new journal's directory).
        parent = os.open(os.path.dirname(os.path.abspath(wal)), os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._fsync(parent)
        finally:
            os.close(parent)
        return fd

    def _decided(self, submissions: Sequence[Submission]) -> StagedBatch:
        """Each submission decided on the stored state and the ones before it. Writes nothing."""
        view = DecideView(
            self._conn, iso(self._clock()), self._known, next_sequence=self._next_sequence
        )
        view.batch.outcomes.extend([self._run_one(view, sub) for sub in submissions])
        return view.batch

    def _write(self, batch: StagedBatch) -> None:
        """A decided batch's rows, receipts and events, into the open transaction."""
        conn = self._conn
        if batch.rows:
            conn.executemany(
                UPSERT_ROW,
                [
                    # bytearray is bound directly: bytes go through the adapter lookup.
                    (
                        r.kind,
                        r.id,
                        r.thread_id,
                        r.position,
                        r.status,
                        bytearray(r.body),
                        r.updated_seq,
                    )
                    for r in batch.rows.values()
                ],
            )
        if batch.receipts:
            conn.executemany(_INSERT_RECEIPT, [receipt_row(r) for r in batch.receipts.values()])
        # In sequence order, one executemany per run of rows of one shape: inserted
        # out of order, the log's B-trees cost more than the extra calls.
        for width, rows in itertools.groupby(batch.events, len):
            conn.executemany(_INSERT_EVENT if width == _EVENT_WIDTH else _INSERT_STREAMED, rows)
        if batch.last_sequence:
            conn.execute(
                "UPDATE projection_state SET last_sequence = ? WHERE name = 'rows'",
                (batch.last_sequence,),
            )

    def _rollback(self, exc: BaseException) -> NoReturn:
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise _translate(exc, self.path) from exc
        raise exc

    def _run_one(self, view: DecideView, sub: Submission) -> Outcome:
        # Nothing a submission writes reaches SQLite before it is kept: events,
        # rows and its receipt are staged in the view (t3orch/store/deciding.py).
        return decide_one(
            view,
            sub,
            stored_receipt=self._receipt,
            new_event_ids=lambda n: self._ids.new_many(EventId, n),
            append=self._append,
            database_error=sqlite3.Error,
        )

    def _append(
        self,
        view: DecideView,
        event_id: EventId,
        payload: EventPayload,
        correlation: Correlation,
        command_id: CommandId | None,
    ) -> EventEnvelope:
        sequence = view.next_sequence
        view.next_sequence = sequence + 1
        now = view.now()
        if type(payload) is TurnItemDelta and command_id is None:
            # A streamed delta (most of a busy log) names only its thread: its row is
            # bound without the NULL columns (see _blob on what a bound NULL costs),
            # and its projection is its chunk (projector.apply, inlined).
            view.batch.events.append(
                (
                    sequence,
                    event_id,
                    "turn_item.delta",
                    now,
                    payload.thread_id,
                    _blob(correlation),
                    _blob(payload),
                )
            )
            view.append_chunk(
                Chunk(sequence, payload.item_id, payload.field, payload.replace, payload.text)
            )
            return EventEnvelope(
                sequence=sequence,
                event_id=event_id,
                type="turn_item.delta",
                occurred_at=now,
                thread_id=payload.thread_id,
                run_id=None,
                node_id=None,
                provider_session_id=None,
                command_id=None,
                correlation=correlation,
                payload=payload,
            )
        c = concerns(payload)
        kind = TYPE_OF[type(payload)]
        thread_id = c.thread_id
        run_id = c.run_id
        node_id = c.node_id
        session_id = c.provider_session_id
        view.batch.events.append(
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
            f"SELECT {EVENT_COLUMNS} FROM events WHERE sequence > ? ORDER BY sequence LIMIT ?",
            (after, limit),
        ).fetchall()
        return [envelope(r) for r in rows]

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
            f"SELECT {EVENT_COLUMNS} FROM events WHERE thread_id = ? AND sequence > ? "
            "ORDER BY sequence",
            (thread_id, after),
        ).fetchall()
        return [envelope(r) for r in rows]

    @_guarded
    def rows(self, kind: str, *, thread_id: str | None = None) -> list[Row]:
        return read_rows(self._conn, kind, thread_id)

    @_guarded
    def rows_by_status(self, kind: str, statuses: Sequence[str]) -> list[Row]:
        return read_rows_by_status(self._conn, kind, statuses)

    @_guarded
    def row(self, kind: str, id: str) -> Row | None:
        return read_row(self._conn, kind, id)

    @_guarded
    def folded(self, row: Row) -> Row:
        """``row`` with pending streamed text folded in (turn items still streaming)."""
        return folded(self._conn, row)

    @_guarded
    def all_chunks(self) -> list[Chunk]:
        """Every streamed delta not yet folded into its item's row (``t3orch check``)."""
        folded = dict(
            self._conn.execute("SELECT id, updated_seq FROM rows WHERE kind = 'turn_item'")
        )
        cur = self._conn.execute(
            "SELECT sequence, payload FROM events WHERE type = 'turn_item.delta' ORDER BY sequence"
        )
        chunks = (chunk_of(seq, payload) for seq, payload in cur)
        return [c for c in chunks if c.seq > folded.get(c.item_id, 0)]

    @_guarded
    def rows_window(
        self, kind: str, thread_id: str, *, limit: int, before_position: int | None = None
    ) -> tuple[list[Row], int]:
        """The last ``limit`` rows of a thread (before a position), and how many it has."""
        before = before_position if before_position is not None else 2**62
        cur = self._conn.execute(
            f"SELECT {ROW_COLUMNS} FROM rows WHERE kind = ? AND thread_id = ? AND position < ? "
            "ORDER BY position DESC, id DESC LIMIT ?",
            (kind, thread_id, before, limit),
        )
        rows = [Row(*r) for r in cur.fetchall()]
        rows.reverse()
        return rows, count_rows(self._conn, kind, thread_id)

    # -- typed reads (ReadModel) -----------------------------------------------

    def _value(self, row: Row) -> Any:
        """The row's entity; a streaming turn item with its pending text folded in."""
        value = row.decode()
        if streaming(row):
            chunks = read_chunks(self._conn, row)
            if chunks:
                value = fold_item(value, chunks)
        return value

    @_guarded
    def get(self, entity: type[_E], id: str) -> _E | None:
        row = read_row(self._conn, kind_of(entity), id)
        value = None if row is None else self._value(row)
        return value if isinstance(value, entity) else None

    @_guarded
    def select(self, entity: type[_E], *, thread_id: str | None = None) -> list[_E]:
        rows = read_rows(self._conn, kind_of(entity), thread_id)
        return [v for r in rows if isinstance(v := self._value(r), entity)]

    @_guarded
    def select_by_status(
        self, entity: type[_E], statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[_E]:
        rows = read_rows_by_status(self._conn, kind_of(entity), statuses, thread_id)
        return [v for r in rows if isinstance(v := self._value(r), entity)]

    def recent(self, entity: type[_E], *, thread_id: str, since_position: int = 0) -> Iterator[_E]:
        page = functools.partial(self._recent_page, kind_of(entity), thread_id, since_position)
        return entities_newest_first(entity, page, self._read_value)

    @_guarded
    def _recent_page(
        self, kind: str, thread_id: str, since: int, before: Cursor, limit: int
    ) -> list[Row]:
        return read_recent_page(self._conn, kind, thread_id, since, before, limit)

    @_guarded
    def _read_value(self, row: Row) -> Any:
        return self._value(row)

    def turn_items(self, thread_id: str) -> list[TurnItem]:
        # Every turn_item row decodes to a TurnItem variant: the base is the union here.
        return cast(list[TurnItem], self.select(TurnItemBase, thread_id=thread_id))

    def pending_requests(self, thread_id: str | None = None) -> list[RuntimeRequest]:
        return self.select_by_status(RuntimeRequest, ("pending",), thread_id=thread_id)

    @_guarded
    def all_rows(self) -> list[Row]:
        cur = self._conn.execute(f"SELECT {ROW_COLUMNS} FROM rows ORDER BY kind, id")
        return [Row(*r) for r in cur.fetchall()]

    @_guarded
    def integrity_problems(self) -> list[str]:
        rows = self._conn.execute("PRAGMA quick_check").fetchall()
        return _problems([str(r[0]) for r in rows])

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


def readonly_uri(path: Path) -> str:
    """The URI of a read-only open that creates and changes no file.

    ``mode=ro`` alone still creates an empty ``-wal`` and a ``-shm`` beside a WAL
    store. With no ``-wal`` (a clean stop removes it) the database file is the whole
    store: ``immutable=1`` reads it with no ``-shm`` and no locks, so nothing else is
    touched. Such a connection never sees later writes: a reader that waits for
    them reopens when the store changes (see ``t3orch events --follow``). With a
    ``-wal`` (a live daemon, or an unclean stop) the committed pages in it are
    needed, and reading them needs the ``-shm`` index: SQLite opens it (creating it
    when an unclean stop left none, rebuilding it when stale) and marks its reads in
    it; the database file and the ``-wal`` are never written.
    """
    wal = Path(f"{path}-wal")
    return f"file:{quote(str(path))}?mode=ro" + ("" if wal.exists() else "&immutable=1")


def _connect_readonly(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(
        readonly_uri(path), uri=True, isolation_level=None, check_same_thread=False
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


def _problems(found: list[str]) -> list[str]:
    """SQLite's check answers as one-line problems ("ok" is none; a result may hold
    several lines under a ``*** in database main ***`` heading)."""
    if found == ["ok"]:
        return []
    lines = [ln.strip() for f in found for ln in f.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("***")] or ["check failed"]


def _verify_pages(path: Path) -> None:
    """Refuse a store whose pages are damaged, before any connection can write to it.

    The header check alone lets a file with a valid header and damaged pages be
    opened and written to. The check runs on a read-only connection; with no
    ``-wal`` beside the file (a clean shutdown deletes it) the file is the whole
    store and is read as ``immutable``, so not even a ``-wal``/``-shm`` is created.
    After an unclean shutdown the ``-wal`` holds committed pages the file alone
    lacks (a checkpoint may have stopped halfway): the check then reads both, and
    SQLite rebuilds its ``-shm`` index (no data lives there); the file and the
    ``-wal`` keep their bytes.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    wal = Path(f"{path}-wal")
    uri = f"file:{quote(str(path))}?mode=ro" + ("" if wal.exists() else "&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        try:
            found = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)").fetchall()]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if not _corrupt(str(exc)):
            # The check could not run (a full disk: SQLite cannot rebuild the -shm after
            # an unclean stop); that says nothing of the pages, and moving a store aside
            # on it would be the wrong advice.
            room = " (its filesystem has no room left)" if _no_room(str(path)) else ""
            raise StoreError(
                f"{path}: its pages could not be checked: {exc}{room}; nothing was changed"
            ) from exc
        found = [str(exc)]
    problems = _problems(found)
    if not problems:
        return
    raise StoreCorrupt(
        f"{path}: damaged pages ({'; '.join(problems[:3])}); "
        "refusing to open it: move it aside or restore it from a backup (nothing was changed)"
    )


_INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_EVENT_WIDTH = 11
_INSERT_STREAMED = (
    "INSERT INTO events (sequence, event_id, type, occurred_at, thread_id, correlation, payload) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_RECEIPT = "INSERT INTO command_receipts VALUES (?, ?, ?, ?, ?)"
