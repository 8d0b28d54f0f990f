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


class EventStore(Protocol):
    def commit_batch(self, submissions: Sequence[Submission]) -> list[Outcome]:
        """Decide and append every submission in one transaction; blocking."""

    def read_events(self, after: int = 0, limit: int = 1000) -> list[EventEnvelope]: ...

    def iter_events(self, after: int = 0) -> Iterator[EventEnvelope]: ...

    def last_sequence(self) -> int: ...

    def projection_sequence(self) -> int: ...

    def receipt(self, command_id: CommandId) -> CommandReceipt | None: ...

    def rows(self, kind: str, *, thread_id: str | None = None) -> list[Row]: ...

    def all_rows(self) -> list[Row]: ...

    def close(self) -> None: ...
