"""The store contract. Every backend passes ``tests/store/contract.py``.

Writes happen through *submissions*: a ``decide`` function that reads current
state through a :class:`StateView` and returns the events to append. The
backend runs each submission inside the batch's transaction (a rejected one
rolls back alone, leaving the others of its batch), applies the projections to the rows and
moves the projection cursor in that same transaction, and records the command
receipt there too. That makes a duplicate command id a pure lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import attrs
import msgspec

from t3orch.events import EventDraft, EventEnvelope
from t3orch.ids import CommandId
from t3orch.store.errors import CommandRejected
from t3orch.store.kinds import Row


class StateView(Protocol):
    """Projection state as of the submission being decided (earlier ones included)."""

    def get(self, kind: str, id: str) -> Any | None: ...

    def get_unfolded(self, kind: str, id: str) -> Any | None:
        """The row's value without streamed text not yet folded into it (a turn item
        still streaming): cheaper than ``get`` and the same outside the text fields."""

    def exists(self, kind: str, id: str) -> bool: ...

    def select(self, kind: str, *, thread_id: str | None = None) -> list[Any]: ...

    def select_by_status(
        self, kind: str, statuses: Sequence[str], *, thread_id: str | None = None
    ) -> list[Any]:
        """Rows whose status is one of ``statuses`` (of one thread, if given): an
        indexed read, unlike ``select`` of a whole thread's rows."""

    def now(self) -> str:
        """The batch's timestamp (ISO 8601, UTC): one clock read per transaction."""


class Decision(msgspec.Struct, frozen=True):
    """What a submission decided: one per submission, so a msgspec struct (several
    times cheaper to build than a frozen attrs class; the writer makes thousands)."""

    events: Sequence[EventDraft]
    #: A JSON-able result returned to the caller and stored in the receipt.
    result: Any = None


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
    result: Any


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What happened to one submission of a batch."""

    events: Sequence[EventEnvelope] = ()
    result: Any = None
    #: The last sequence the submission committed (the head, if it wrote nothing).
    result_sequence: int = 0
    #: A repeated command id: nothing was written, ``result`` is the first result.
    duplicate: bool = False
    error: CommandRejected | None = None


#: A batch decided and not yet written: opaque, only the store that made it reads it.
PreparedBatch = Any


class EventStore(Protocol):
    def commit_batch(self, submissions: Sequence[Submission]) -> list[Outcome]:
        """Decide and append every submission in one transaction; blocking.

        The same as ``prepare_batch``, ``write_batch`` and ``commit_written``."""

    @property
    def pipelined(self) -> bool:
        """Whether a batch may be prepared while the one it follows is being written."""

    def prepare_batch(
        self, submissions: Sequence[Submission], behind: PreparedBatch | None = None
    ) -> PreparedBatch:
        """Decide every submission on top of the committed state and of ``behind``, the
        batch to be written just before them; writes nothing. Blocking."""

    def write_batch(self, prepared: PreparedBatch) -> None:
        """Append a prepared batch in a transaction left open. Blocking."""

    def commit_written(self, prepared: PreparedBatch) -> list[Outcome]:
        """Commit what ``write_batch`` wrote; the batch's outcomes. Blocking."""

    def forget_prepared(self) -> None:
        """A prepared batch was not committed: drop what anything remembered of it
        (batches prepared on top of it are thrown away by the caller)."""

    def read_events(self, after: int = 0, limit: int = 1000) -> list[EventEnvelope]: ...

    def iter_events(self, after: int = 0) -> Iterator[EventEnvelope]: ...

    def last_sequence(self) -> int: ...

    def projection_sequence(self) -> int: ...

    def receipt(self, command_id: CommandId) -> CommandReceipt | None: ...

    def rows(self, kind: str, *, thread_id: str | None = None) -> list[Row]: ...

    def all_rows(self) -> list[Row]: ...

    def close(self) -> None: ...
