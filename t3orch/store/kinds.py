"""The projected entity kinds: how each is stored, keyed and decoded."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

from t3orch.domain.checkpoint import Checkpoint, CheckpointScope
from t3orch.domain.context import ContextHandoff, ContextTransfer
from t3orch.domain.message import ConversationMessage
from t3orch.domain.node import ExecutionNode
from t3orch.domain.plan import PlanArtifact
from t3orch.domain.provider import (
    JournalCommitted,
    ProviderSession,
    ProviderThread,
    ProviderTurn,
)
from t3orch.domain.request import RuntimeRequest
from t3orch.domain.run import Run, RunAttempt
from t3orch.domain.thread import AppThread
from t3orch.domain.turn_items import TurnItem, TurnItemBase


@attrs.frozen
class EntityKind:
    name: str
    type: Any
    decoder: msgspec.json.Decoder[Any]


def _kind(name: str, tp: Any) -> EntityKind:
    return EntityKind(name, tp, msgspec.json.Decoder(tp))


KINDS: dict[str, EntityKind] = {
    k.name: k
    for k in (
        _kind("thread", AppThread),
        _kind("run", Run),
        _kind("run_attempt", RunAttempt),
        _kind("node", ExecutionNode),
        _kind("provider_session", ProviderSession),
        _kind("provider_thread", ProviderThread),
        _kind("provider_turn", ProviderTurn),
        _kind("runtime_request", RuntimeRequest),
        _kind("turn_item", TurnItem),
        _kind("message", ConversationMessage),
        _kind("plan", PlanArtifact),
        _kind("checkpoint_scope", CheckpointScope),
        _kind("checkpoint", Checkpoint),
        _kind("context_transfer", ContextTransfer),
        _kind("context_handoff", ContextHandoff),
        _kind("usage", dict[str, Any]),
        _kind("journal", JournalCommitted),
    )
}


#: The entity type each kind holds, for typed reads (``ReadModel.get(Run, id)``).
_KIND_OF_TYPE: dict[type, str] = {
    k.type: k.name for k in KINDS.values() if isinstance(k.type, type) and k.name != "usage"
}


#: The type read for each kind's rows (any turn item variant is a ``TurnItemBase``).
_TYPE_OF_KIND: dict[str, type] = {
    **{name: tp for tp, name in _KIND_OF_TYPE.items()},
    "turn_item": TurnItemBase,
}


def entity_of(kind: str) -> type[Any]:
    """The entity type a kind's rows hold (for reads by kind name, such as
    ``Changes``'); ``usage`` and unknown names are programming errors."""
    tp = _TYPE_OF_KIND.get(kind)
    if tp is None:
        raise TypeError(f"{kind!r} is not a kind of entity")
    return tp


def kind_of(entity: type) -> str:
    """The kind that stores ``entity`` (a turn item variant, or ``TurnItemBase``, is a
    ``turn_item``); a type no kind stores is a programming error."""
    name = _KIND_OF_TYPE.get(entity)
    if name is None and issubclass(entity, TurnItemBase):
        return "turn_item"
    if name is None:
        raise TypeError(f"{entity.__name__} is not a stored entity")
    return name


@attrs.frozen
class Row:
    """One stored projection row; ``position`` orders rows within a thread.

    ``updated_seq`` is the sequence of the event that last wrote the row (0 for rows
    last written before schema v5): a turn item's streamed text after it is still
    in the log only. It is bookkeeping of the store, not of the projection, so rows
    compare equal without it.
    """

    kind: str
    id: str
    thread_id: str | None
    position: int
    status: str | None
    body: bytes
    updated_seq: int = attrs.field(default=0, eq=False)

    def decode(self) -> Any:
        return KINDS[self.kind].decoder.decode(self.body)


class Chunk(msgspec.Struct, frozen=True, gc=False):
    """Streamed text not yet folded into its item's row (``seq`` is its delta event's).

    A msgspec struct, not attrs: one is made per streamed delta in the writer.
    """

    seq: int
    item_id: str
    field: str | None
    replace: bool
    text: str
