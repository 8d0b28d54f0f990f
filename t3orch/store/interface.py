"""The store contract. Every backend passes ``tests/store/contract.py``.

Two halves. :class:`EventStore` is the write side: ``commit_batch`` decides and
appends a batch of *submissions* atomically and returns each one's outcome (its
events with their sequences, or why it was rejected). A submission's ``decide``
reads current state through a :class:`StateView` and returns the events to
append; the backend runs each inside the batch's transaction (a rejected one
rolls back alone), applies the projector to the rows and records the command
receipt there too, so a duplicate command id is a pure lookup.

:class:`ReadModel` is the read side the API, the commands' callers and the
supervisor use: typed entities (``get(Run, id) -> Run | None``), rows as stored
(snapshots pass their JSON bodies through), windows of a thread's items, the
log. The single writer (``store/writer.py``) hands a backend one batch at a time,
in queue order, on its own thread; how a backend writes a batch is its own
business.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

import attrs
import msgspec

from t3orch.domain.request import RuntimeRequest
from t3orch.domain.turn_items import TurnItem
from t3orch.events import EventDraft, EventEnvelope
from t3orch.ids import CommandId, DaemonId
from t3orch.store.errors import CommandRejected
from t3orch.store.kinds import Chunk, Row

#: What a command returns and its receipt keeps: a JSON-able value (the API sends it
#: as it is; callers check its shape where they read it).
JsonValue = object

#: A stored entity type (``Run``, ``AppThread``, a turn item variant, …).
E = TypeVar("E")


class StateView(Protocol):
    """Projection state as of the submission being decided (earlier ones included),
    read by entity type: ``view.get(Run, id) -> Run | None`` (a turn item variant, or
    ``TurnItemBase`` for any turn item)."""

    def get(self, entity: type[E], id: str) -> E | None: ...

    def get_unfolded(self, entity: type[E], id: str) -> E | None:
        """The entity without streamed text not yet folded into it (a turn item
        still streaming): cheaper than ``get`` and the same outside the text fields."""

    def exists(self, entity: type, id: str) -> bool: ...

    def select(self, entity: type[E], *, thread_id: str | None = None) -> list[E]: ...

    def select_by_status(
        self, entity: type[E], statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[E]:
        """Entities whose status is one of ``statuses`` (of one thread, if given): an
        indexed read, unlike ``select`` of a whole thread's rows."""

    def count(self, entity: type, *, thread_id: str) -> int:
        """``len(select(entity, thread_id=...))`` without decoding the rows: a
        thread's history grows, and a turn that only counts it must not pay for it."""

    def now(self) -> str:
        """The batch's timestamp (ISO 8601, UTC): one clock read per transaction."""


class Decision(msgspec.Struct, frozen=True):
    """What a submission decided: one per submission, so a msgspec struct (several
    times cheaper to build than a frozen attrs class; the writer makes thousands)."""

    events: Sequence[EventDraft]
    #: A JSON-able result returned to the caller and stored in the receipt.
    result: JsonValue = None


Decide = Callable[[StateView], Decision]


class Submission(msgspec.Struct, frozen=True):
    decide: Decide
    command_id: CommandId | None = None
    command_type: str = "internal"


@attrs.frozen
class CommandReceipt:
    command_id: CommandId
    command_type: str
    accepted_at: str
    #: The last sequence the command committed (or the store's head if it wrote nothing).
    result_sequence: int
    result: JsonValue


class DaemonRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One daemon of the fleet, as it last registered: a row of the registry.

    Not an event: a heartbeat every few seconds would be most of the log. Times are
    epoch seconds of the writing daemon's clock (the fleet's hosts keep their clocks
    in step, as any shared database's clients must).
    """

    daemon_id: DaemonId
    #: The name ``threads`` shows (``daemon.host_name``, else the machine's).
    host: str
    version: str
    pid: int
    #: Where other daemons reach its API (``ws://HOST:PORT``); "" before it listens.
    api_url: str
    #: The bearer token of that API: access to the database already grants everything
    #: the token does, so the registry is where the fleet shares it.
    token: str
    started_at: float
    heartbeat_at: float
    #: Online until then (``heartbeat_at`` + its ``daemon.heartbeat_timeout_s``); a
    #: clean stop sets it to the stop's time.
    expires_at: float

    def online(self, now: float) -> bool:
        return now < self.expires_at


class DaemonRegistry(Protocol):
    """The fleet's daemons: a small table beside the log, outside its sequence."""

    def upsert_daemon(self, record: DaemonRecord) -> None:
        """Insert or replace the row of ``record.daemon_id``; blocking, committed on return."""

    def daemons(self) -> list[DaemonRecord]:
        """Every registered daemon (online or not), by id."""

    def close(self) -> None: ...


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What happened to one submission of a batch."""

    events: Sequence[EventEnvelope] = ()
    result: JsonValue = None
    #: The last sequence the submission committed (the head, if it wrote nothing).
    result_sequence: int = 0
    #: A repeated command id: nothing was written, ``result`` is the first result.
    duplicate: bool = False
    error: CommandRejected | None = None


class LogReads(Protocol):
    """The event log, read in sequence order."""

    def read_events(self, after: int = 0, limit: int = 1000) -> list[EventEnvelope]: ...

    def iter_events(self, after: int = 0) -> Iterator[EventEnvelope]: ...

    def last_sequence(self) -> int: ...

    def projection_sequence(self) -> int:
        """The last event the projection rows reflect (the head, once committed)."""

    def receipt(self, command_id: CommandId) -> CommandReceipt | None: ...


class EventStore(LogReads, Protocol):
    """The write side: one call commits a batch, atomically, and says what it did.

    A commit is *visible* once it survives a crash of this process (the OS has it)
    and every reader sees it, and *durable* once it survives a power loss. Where
    the two differ (``visible_first``), the writer lets the one caller that may act
    on a visible commit (a turn's ``turn/start``) go before the ``fsync``; everyone
    else is told only once it is durable.
    """

    #: ``commit_visible`` returns before the commit is durable (``make_durable`` then).
    visible_first: bool

    def commit_batch(self, submissions: Sequence[Submission]) -> list[Outcome]:
        """Decide and append every submission in one transaction, durably; blocking.
        A rejected submission leaves the others of its batch; a StoreError leaves
        nothing of the batch."""

    def commit_visible(self, submissions: Sequence[Submission]) -> list[Outcome]:
        """``commit_batch`` up to visible: durable only after ``make_durable``."""

    def make_durable(self) -> None:
        """Everything committed so far durable; blocking. Raises StoreNotDurable
        when it cannot say so (and every later commit is then refused)."""

    def close(self) -> None: ...


class ReadModel(LogReads, Protocol):
    """Typed reads of the projections and the log, for everything above the store.

    Call several reads inside ``with reads.snapshot():`` to see one committed state.
    """

    def snapshot(self) -> AbstractContextManager[object]: ...

    # -- entities ------------------------------------------------------------

    def get(self, entity: type[E], id: str) -> E | None:
        """The entity (a turn item with its streamed text), or None."""

    def select(self, entity: type[E], *, thread_id: str | None = None) -> list[E]:
        """Every entity of that type (of one thread), in creation order."""

    def select_by_status(
        self, entity: type[E], statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[E]: ...

    def recent(self, entity: type[E], *, thread_id: str, since_position: int = 0) -> Iterator[E]:
        """A thread's entities of that type newest first (creation order reversed), those
        created at or after ``since_position`` (a row's ``position``) only.

        Each is decoded as the caller iterates: one that stops at its answer reads no
        further, so a per-turn question about recent history costs the same at turn 300
        as at turn 3. Read in pages, each a query of its own that leaves nothing open:
        the caller may await between items, stop, or drop the iterator. Inside
        ``snapshot()`` every page sees that one state; outside it a page sees the state
        of its own read, like any two reads (a row created meanwhile is newer than the
        pages and not yielded; one updated meanwhile is as the page read it).
        """

    def turn_items(self, thread_id: str) -> list[TurnItem]:
        """A thread's items in order, each with its streamed text."""

    def pending_requests(self, thread_id: str | None = None) -> list[RuntimeRequest]:
        """Requests waiting for an answer (of one thread)."""

    # -- rows as stored (snapshots pass their JSON bodies through) -------------

    def row(self, kind: str, id: str) -> Row | None: ...

    def rows(self, kind: str, *, thread_id: str | None = None) -> list[Row]: ...

    def rows_by_status(self, kind: str, statuses: Sequence[str]) -> list[Row]: ...

    def rows_window(
        self, kind: str, thread_id: str, *, limit: int, before_position: int | None = None
    ) -> tuple[list[Row], int]:
        """The last ``limit`` rows of a thread (before a position), and how many it has."""

    def folded(self, row: Row) -> Row:
        """A turn item's row with its pending streamed text folded in."""

    def read_thread_events(self, thread_id: str, after: int = 0) -> list[EventEnvelope]: ...


class ReadStore(ReadModel, Protocol):
    """An open read-only store: the reads, what ``t3orch check`` compares, and close."""

    @property
    def location(self) -> str:
        """Where the store lives (a path), for messages."""

    def all_rows(self) -> list[Row]: ...

    def all_chunks(self) -> list[Chunk]:
        """Every streamed delta not yet folded into its item's row."""

    def integrity_problems(self) -> list[str]:
        """The backend's own consistency check, one line per problem."""

    def close(self) -> None: ...


class Store(EventStore, ReadStore, Protocol):
    """A backend as the contract tests it: the write side and the reads of one store."""
