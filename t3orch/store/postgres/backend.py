"""PostgreSQL implementation of the store contract (``EventStore`` + ``ReadStore``).

psycopg 3's sync API on the writer's thread and on worker threads: psycopg's
async side is asyncio's, and trio runs blocking calls on threads anyway
(``trio.to_thread``), so a connection pool of plain connections serves every
thread. Several daemons may commit to one database at once:

* **One committer at a time.** A batch's transaction first locks the one
  ``log_head`` row (``SELECT … FOR UPDATE``); the next sequence is allocated under
  that lock, the batch is decided on the state every earlier commit left, and its
  events, projection rows, receipts and the new head are written in the same
  transaction. Sequences are therefore gap-free and strictly increasing across
  daemons, and a commit's events are contiguous.
* **A commit wakes the others.** The transaction also sends ``NOTIFY t3orch_log``
  with its last sequence (delivered at commit): see ``follow.py``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec
import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from t3orch.clock import WallClock, iso, system_clock
from t3orch.domain.request import RuntimeRequest
from t3orch.domain.turn_items import TurnItem, TurnItemBase
from t3orch.events import TYPE_OF, Correlation, EventEnvelope, EventPayload, TurnItemDelta
from t3orch.ids import CommandId, EventId, IdFactory
from t3orch.projections.projector import apply, concerns, fold_item
from t3orch.store.deciding import decide_one
from t3orch.store.encoding import EVENT_COLUMNS, chunk_of, envelope, receipt_row, streaming
from t3orch.store.errors import SchemaTooNew, StoreError, StoreFull, StoreUnavailable
from t3orch.store.interface import CommandReceipt, Outcome, Submission
from t3orch.store.kinds import Chunk, Row, kind_of
from t3orch.store.paging import Cursor, entities_newest_first
from t3orch.store.postgres.reads import (
    ROW_COLUMNS,
    Conn,
    folded,
    read_chunks,
    read_recent_page,
    read_row,
    read_rows,
    read_rows_window,
)
from t3orch.store.postgres.schema import SCHEMA_VERSION, migrate, read_version
from t3orch.store.postgres.staging import BatchView
from t3orch.store.staging import Key

#: The NOTIFY channel every commit signals, with its last sequence as the payload.
CHANNEL = "t3orch_log"
#: How long opening waits for the server before saying it is unreachable.
CONNECT_TIMEOUT_S = 5
_encode = msgspec.json.encode

_F = TypeVar("_F", bound=Callable[..., Any])
_E = TypeVar("_E")


def is_postgres_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def redacted(url: str) -> str:
    """The URL without its password (in the user part or the query), for messages."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not even a URL: nothing in it can be told apart
        return "the store URL"
    if parts.password is not None:
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" + (f":{port}" if port else "")
        parts = parts._replace(netloc=netloc)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k == "password" for k, _ in query):
        hidden = [(k, "***" if k == "password" else v) for k, v in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    return urlunsplit(parts)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def translate(exc: psycopg.Error, where: str) -> StoreError:
    """A psycopg error as a StoreError naming the store, on one line."""
    text = _one_line(exc)
    if exc.sqlstate in ("53100", "53200"):  # disk_full, out_of_memory
        return StoreFull(f"{where}: {text}; the batch was not committed")
    return StoreError(f"{where}: {text}")


def _guarded(method: _F) -> _F:
    """Reads raise StoreError (naming the store), never a bare psycopg error. A read
    whose pooled connection the server had ended (a restart) is tried once more on a
    checked pool: reads repeat harmlessly (not inside a snapshot: its state is gone)."""

    @functools.wraps(method)
    def wrapper(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if self._in_snapshot():
                raise translate(exc, self.location) from exc
            first = exc
        except psycopg.Error as exc:
            raise translate(exc, self.location) from exc
        try:
            self._pool.check()
            return method(self, *args, **kwargs)
        except psycopg.Error as exc:
            raise translate(exc, self.location) from first

    return cast(_F, wrapper)


def connect(url: str) -> Conn:
    """One autocommit connection, or a StoreError saying why there is none."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise translate(exc, f"{redacted(url)}: cannot connect") from exc
    except ValueError as exc:  # a URL libpq cannot parse is a ProgrammingError or this
        raise StoreError(f"{redacted(url)}: not a PostgreSQL URL: {exc}") from exc


#: A session of ours left idle inside a transaction this long (a client that hung
#: mid-commit, holding the head row) is ended by the server, so other daemons go on.
IDLE_IN_TRANSACTION_S = 60


def _configure(conn: Conn) -> None:
    conn.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'")


def open_pool(url: str, *, max_size: int = 4) -> ConnectionPool[Conn]:
    """A pool of autocommit connections (transactions are explicit). Waiting for a
    connection is bounded like connecting: a server gone is a StoreError, not a hang.

    Each connection is checked as it is handed out (one empty query, a round trip): after
    a server restart every idle one is dead, and a snapshot begun on one fails with
    nothing read to try again from — the API's first calls answered a healthy server's
    restart with errors."""
    pool: ConnectionPool[Conn] = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
        configure=_configure,
        check=ConnectionPool.check_connection,
        timeout=CONNECT_TIMEOUT_S * 2,
        open=True,
        name="t3orch",
    )
    return pool


def prepare(url: str, *, readonly: bool) -> None:
    """Check the server and the schema version; a writable open migrates."""
    conn = connect(url)
    where = redacted(url)
    try:
        version = read_version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{where}: store schema version {version} was written by a newer t3orch "
                f"(this one supports up to {SCHEMA_VERSION}); upgrade t3orch — nothing was changed"
            )
        if readonly and version == 0:
            raise StoreError(f"{where}: no t3orch store in this database (nothing to read)")
        if readonly and version != SCHEMA_VERSION:
            raise StoreError(
                f"{where}: store schema version {version} needs migrating to {SCHEMA_VERSION}; "
                "start the daemon once (it migrates), then retry"
            )
        if not readonly:
            migrate(conn)
    except psycopg.Error as exc:
        raise translate(exc, where) from exc
    finally:
        conn.close()


class PostgresStore:
    """A t3orch store in a PostgreSQL database. Safe to use from several threads;
    a ``snapshot`` belongs to the thread that opened it."""

    def __init__(
        self,
        url: str,
        *,
        readonly: bool = False,
        clock: WallClock = system_clock,
        ids: IdFactory | None = None,
        pool: ConnectionPool[Conn] | None = None,
    ) -> None:
        self.url = url
        self.readonly = readonly
        self._where = redacted(url)
        self._clock = clock
        self._ids = ids or IdFactory()
        if pool is None:
            prepare(url, readonly=readonly)
        self._own_pool = pool is None
        self._pool = pool if pool is not None else open_pool(url)
        #: Row keys known to exist (rows are never deleted): a streamed delta asks
        #: about its item; cleared when a batch fails (it may have made keys known).
        self._known: set[Key] = set()
        self._local = threading.local()

    @property
    def location(self) -> str:
        return self._where

    @property
    def pool(self) -> ConnectionPool[Conn]:
        return self._pool

    def close(self) -> None:
        if self._own_pool:
            self._pool.close()

    def _in_snapshot(self) -> bool:
        return getattr(self._local, "snapshot", None) is not None

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Conn]:
        held: Conn | None = getattr(self._local, "snapshot", None)
        if held is not None:
            yield held
            return
        with self._pool.connection() as conn:
            yield conn

    # -- writing ---------------------------------------------------------------

    #: Its COMMIT returns once the server made it durable (``synchronous_commit``).
    visible_first = False

    def commit_visible(self, submissions: Sequence[Submission]) -> list[Outcome]:
        return self.commit_batch(submissions)

    def make_durable(self) -> None:
        """Its commits are durable when they return."""

    def commit_batch(self, submissions: Sequence[Submission]) -> list[Outcome]:
        if self.readonly:
            raise StoreError(f"{self._where}: opened read-only")
        try:
            return self._commit(submissions)
        except _ConnectionLost:
            # Gone before its COMMIT was sent: nothing was written. Decided again on a
            # checked pool (deciding is a function of the view: it may run twice).
            self._pool.check()
            try:
                return self._commit(submissions)
            except _ConnectionLost as lost:
                # The server is away (a restart, a failover): the writer waits for it.
                raise StoreUnavailable(
                    f"{self._where}: {_one_line(lost.error)}; the batch was not committed"
                ) from lost.error

    def _commit(self, submissions: Sequence[Submission]) -> list[Outcome]:
        committing = False
        try:
            with self._pool.connection() as conn:
                try:
                    with conn.transaction():
                        # The serialization point of every daemon's commits (module doc).
                        row = conn.execute(
                            "SELECT last_sequence FROM t3orch.log_head FOR UPDATE"
                        ).fetchone()
                        head = int(row[0]) if row else 0
                        view = BatchView(conn, iso(self._clock()), head, self._known)
                        view.batch.outcomes.extend(
                            [self._run_one(conn, view, s) for s in submissions]
                        )
                        self._write(conn, view)
                        committing = True
                except psycopg.OperationalError as exc:
                    if conn.broken and not committing:
                        raise _ConnectionLost(exc) from exc
                    raise
        except _ConnectionLost:
            self._known.clear()
            raise
        except PoolTimeout as exc:
            # No connection within the pool's timeout (its server is down, none could be
            # made): nothing was sent. The writer waits for the server.
            self._known.clear()
            raise StoreUnavailable(
                f"{self._where}: {_one_line(exc)}; the batch was not committed"
            ) from exc
        except psycopg.Error as exc:
            self._known.clear()
            raise translate(exc, self._where) from exc
        except BaseException:
            self._known.clear()
            raise
        return view.batch.outcomes

    def _write(self, conn: Conn, view: BatchView) -> None:
        batch = view.batch
        with conn.cursor() as cur:
            if batch.events:
                with cur.copy(f"COPY t3orch.events ({_WRITE_COLUMNS}) FROM STDIN") as copy:
                    for event in batch.events:
                        copy.write_row(event)
            if batch.rows:
                cur.executemany(
                    _UPSERT_ROW,
                    [
                        (r.kind, r.id, r.thread_id, r.position, r.status, r.body, r.updated_seq)
                        for r in batch.rows.values()
                    ],
                )
            if batch.receipts:
                cur.executemany(_INSERT_RECEIPT, [receipt_row(r) for r in batch.receipts.values()])
            if batch.last_sequence:
                cur.execute("UPDATE t3orch.log_head SET last_sequence = %s", (batch.last_sequence,))
                cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(batch.last_sequence)))

    def _run_one(self, conn: Conn, view: BatchView, sub: Submission) -> Outcome:
        return decide_one(
            view,
            sub,
            stored_receipt=lambda command_id: _receipt(conn, command_id),
            new_event_ids=lambda n: self._ids.new_many(EventId, n),
            append=self._append,
            database_error=psycopg.Error,
        )

    def _append(
        self,
        view: BatchView,
        event_id: EventId,
        payload: EventPayload,
        correlation: Correlation,
        command_id: CommandId | None,
    ) -> EventEnvelope:
        sequence = view.next_sequence
        view.next_sequence = sequence + 1
        kind = TYPE_OF[type(payload)]
        c = concerns(payload)
        item_id = payload.item_id if type(payload) is TurnItemDelta else None
        env = EventEnvelope(
            sequence=sequence,
            event_id=event_id,
            type=kind,
            occurred_at=view.now(),
            thread_id=c.thread_id,  # type: ignore[arg-type]
            run_id=c.run_id,  # type: ignore[arg-type]
            node_id=c.node_id,  # type: ignore[arg-type]
            provider_session_id=c.provider_session_id,  # type: ignore[arg-type]
            command_id=command_id,
            correlation=correlation,
            payload=payload,
        )
        view.batch.events.append(
            (
                sequence,
                event_id,
                kind,
                env.occurred_at,
                c.thread_id,
                c.run_id,
                c.node_id,
                c.provider_session_id,
                command_id,
                item_id,
                _encode(correlation),
                _encode(payload),
            )
        )
        apply(env, view)
        return env

    # -- the log -----------------------------------------------------------------

    @_guarded
    def last_sequence(self) -> int:
        with self._conn() as conn:
            row = conn.execute("SELECT coalesce(max(sequence), 0) FROM t3orch.events").fetchone()
        return int(row[0]) if row else 0

    @_guarded
    def projection_sequence(self) -> int:
        with self._conn() as conn:
            row = conn.execute("SELECT last_sequence FROM t3orch.log_head").fetchone()
        return int(row[0]) if row else 0

    @_guarded
    def receipt(self, command_id: CommandId) -> CommandReceipt | None:
        with self._conn() as conn:
            return _receipt(conn, command_id)

    @_guarded
    def read_events(self, after: int = 0, limit: int = 1000) -> list[EventEnvelope]:
        with self._conn() as conn:
            cur = conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM t3orch.events WHERE sequence > %s "
                "ORDER BY sequence LIMIT %s",
                (after, limit),
            )
            return [envelope(r) for r in cur]

    def iter_events(self, after: int = 0) -> Iterator[EventEnvelope]:
        while True:
            page = self.read_events(after, 2000)
            if not page:
                return
            yield from page
            after = page[-1].sequence

    @_guarded
    def read_thread_events(self, thread_id: str, after: int = 0) -> list[EventEnvelope]:
        with self._conn() as conn:
            cur = conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM t3orch.events WHERE thread_id = %s "
                "AND sequence > %s ORDER BY sequence",
                (thread_id, after),
            )
            return [envelope(r) for r in cur]

    # -- rows as stored ----------------------------------------------------------

    @_guarded
    def row(self, kind: str, id: str) -> Row | None:
        with self._conn() as conn:
            return read_row(conn, kind, id)

    @_guarded
    def rows(self, kind: str, *, thread_id: str | None = None) -> list[Row]:
        with self._conn() as conn:
            return read_rows(conn, kind, thread_id)

    @_guarded
    def rows_by_status(self, kind: str, statuses: Sequence[str]) -> list[Row]:
        with self._conn() as conn:
            return read_rows(conn, kind, None, statuses=statuses)

    @_guarded
    def rows_window(
        self, kind: str, thread_id: str, *, limit: int, before_position: int | None = None
    ) -> tuple[list[Row], int]:
        before = before_position if before_position is not None else 2**62
        with self._conn() as conn:
            return read_rows_window(conn, kind, thread_id, limit, before)

    @_guarded
    def folded(self, row: Row) -> Row:
        with self._conn() as conn:
            return folded(conn, row)

    @_guarded
    def all_rows(self) -> list[Row]:
        with self._conn() as conn:
            cur = conn.execute(f"SELECT {ROW_COLUMNS} FROM t3orch.rows ORDER BY kind, id")
            return [Row(r[0], r[1], r[2], r[3], r[4], bytes(r[5]), r[6]) for r in cur]

    @_guarded
    def all_chunks(self) -> list[Chunk]:
        with self._conn() as conn:
            upto = dict(
                conn.execute("SELECT id, updated_seq FROM t3orch.rows WHERE kind = 'turn_item'")
            )
            cur = conn.execute(
                "SELECT sequence, payload FROM t3orch.events WHERE item_id IS NOT NULL "
                "ORDER BY sequence"
            )
            chunks = [chunk_of(seq, payload) for seq, payload in cur]
        return [c for c in chunks if c.seq > upto.get(c.item_id, 0)]

    @_guarded
    def integrity_problems(self) -> list[str]:
        """The log's own bookkeeping: sequences 1..N without gaps, the head at N."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT count(*), coalesce(min(sequence), 1), coalesce(max(sequence), 0), "
                "(SELECT last_sequence FROM t3orch.log_head) FROM t3orch.events"
            ).fetchone()
        assert row is not None
        count, first, last, head = (int(v) for v in row)
        problems = []
        if count and (first != 1 or last != count):
            problems.append(f"the log has {count} events but its sequences run {first}..{last}")
        if head != last:
            problems.append(f"the log's head row says {head} but its last event is {last}")
        return problems

    # -- typed reads (ReadModel) -----------------------------------------------

    def _value(self, conn: Conn, row: Row) -> Any:
        value = row.decode()
        if streaming(row):
            chunks = read_chunks(conn, row)
            if chunks:
                value = fold_item(value, chunks)
        return value

    @_guarded
    def get(self, entity: type[_E], id: str) -> _E | None:
        with self._conn() as conn:
            row = read_row(conn, kind_of(entity), id)
            value = None if row is None else self._value(conn, row)
        return value if isinstance(value, entity) else None

    @_guarded
    def select(self, entity: type[_E], *, thread_id: str | None = None) -> list[_E]:
        with self._conn() as conn:
            rows = read_rows(conn, kind_of(entity), thread_id)
            return [v for r in rows if isinstance(v := self._value(conn, r), entity)]

    @_guarded
    def select_by_status(
        self, entity: type[_E], statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[_E]:
        with self._conn() as conn:
            rows = read_rows(conn, kind_of(entity), thread_id, statuses=statuses)
            return [v for r in rows if isinstance(v := self._value(conn, r), entity)]

    def recent(self, entity: type[_E], *, thread_id: str, since_position: int = 0) -> Iterator[_E]:
        page = functools.partial(self._recent_page, kind_of(entity), thread_id, since_position)
        return entities_newest_first(entity, page, self._read_value)

    @_guarded
    def _recent_page(
        self, kind: str, thread_id: str, since: int, before: Cursor, limit: int
    ) -> list[Row]:
        with self._conn() as conn:
            return read_recent_page(conn, kind, thread_id, since, before, limit)

    @_guarded
    def _read_value(self, row: Row) -> Any:
        if not streaming(row):
            return row.decode()
        with self._conn() as conn:
            return self._value(conn, row)

    def turn_items(self, thread_id: str) -> list[TurnItem]:
        return cast(list[TurnItem], self.select(TurnItemBase, thread_id=thread_id))

    def pending_requests(self, thread_id: str | None = None) -> list[RuntimeRequest]:
        return self.select_by_status(RuntimeRequest, ("pending",), thread_id=thread_id)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PostgresStore]:
        """A consistent read: every query inside (on this thread) sees one committed state."""
        if getattr(self._local, "snapshot", None) is not None:
            yield self  # nested: the outer snapshot is the state
            return
        try:
            with self._pool.connection() as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                self._local.snapshot = conn
                try:
                    yield self
                finally:
                    self._local.snapshot = None
                    conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise translate(exc, self._where) from exc


class _ConnectionLost(Exception):
    """The server ended the connection before the batch's COMMIT was sent."""

    def __init__(self, error: psycopg.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


def _receipt(conn: Conn, command_id: str) -> CommandReceipt | None:
    row = conn.execute(
        "SELECT command_id, command_type, accepted_at, result_sequence, result "
        "FROM t3orch.command_receipts WHERE command_id = %s",
        (command_id,),
    ).fetchone()
    if row is None:
        return None
    return CommandReceipt(CommandId(row[0]), row[1], row[2], row[3], msgspec.json.decode(row[4]))


_WRITE_COLUMNS = (
    "sequence, event_id, type, occurred_at, thread_id, run_id, node_id, "
    "provider_session_id, command_id, item_id, correlation, payload"
)
# An update keeps the row's first position: order is creation order.
_UPSERT_ROW = (
    f"INSERT INTO t3orch.rows ({ROW_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (kind, id) DO UPDATE SET thread_id = excluded.thread_id, "
    "status = excluded.status, body = excluded.body, updated_seq = excluded.updated_seq"
)
_INSERT_RECEIPT = "INSERT INTO t3orch.command_receipts VALUES (%s, %s, %s, %s, %s)"
