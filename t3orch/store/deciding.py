"""Deciding one submission inside a batch: the same for every backend.

A backend stages what a submission writes in a view of its batch (``StagingView``)
and keeps it only once the decision stands, so a rejected submission rolls back
alone by dropping what it staged. What differs per backend is passed in: where a
stored receipt is read, how an event is appended, and which exceptions are the
database's own (those abort the whole batch instead of rejecting one submission).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from t3orch.events import Correlation, EventEnvelope, EventPayload
from t3orch.ids import CommandId, EventId
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import CommandReceipt, Outcome, StateView, Submission


class StagingView(StateView, Protocol):
    """A batch's state view that stages a submission's writes until they are kept."""

    next_sequence: int

    def receipt(self, command_id: str) -> CommandReceipt | None: ...

    def begin(self) -> None: ...

    def keep(self, receipt: CommandReceipt | None) -> None: ...

    def forget(self) -> None: ...


V = TypeVar("V", bound=StagingView)

#: Appends one event to the staged batch and returns its envelope.
Append = Callable[[V, EventId, EventPayload, Correlation, CommandId | None], EventEnvelope]


def decide_one(
    view: V,
    sub: Submission,
    *,
    stored_receipt: Callable[[CommandId], CommandReceipt | None],
    new_event_ids: Callable[[int], Sequence[EventId]],
    append: Append[V],
    database_error: type[Exception],
) -> Outcome:
    """Decide ``sub`` on ``view``: a repeated command id is its receipt's answer; a
    decide that raises rejects this submission only (its staged writes dropped)."""
    if sub.command_id is not None:
        existing = view.receipt(sub.command_id) or stored_receipt(sub.command_id)
        if existing is not None:
            return Outcome(
                result=existing.result,
                result_sequence=existing.result_sequence,
                duplicate=True,
            )
    view.begin()
    try:
        decision = sub.decide(view)
        drafts = decision.events
        envelopes = [
            append(view, event_id, draft.payload, draft.correlation, sub.command_id)
            for event_id, draft in zip(new_event_ids(len(drafts)), drafts, strict=True)
        ]
    except database_error:
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
