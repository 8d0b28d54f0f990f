"""V2 events: the durable state-transition log.

Each payload is a tagged struct; its tag is the event ``type``. Entity changes
are whole-entity upserts (the new value, not a patch), so a projection applies an
event without reading history. Streamed text is the one exception: a
``turn_item.delta`` appends coalesced text to an item (see ``ingest/coalesce``).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from t3orch.domain.checkpoint import Checkpoint, CheckpointScope
from t3orch.domain.context import ContextHandoff, ContextTransfer
from t3orch.domain.node import ExecutionNode
from t3orch.domain.plan import PlanArtifact
from t3orch.domain.provider import ProviderSession, ProviderThread, ProviderTurn
from t3orch.domain.request import RuntimeRequest
from t3orch.domain.run import Run, RunAttempt
from t3orch.domain.thread import AppThread
from t3orch.domain.turn_items import TurnItem
from t3orch.domain.vocab import ProviderKind
from t3orch.ids import (
    CommandId,
    EventId,
    NodeId,
    ProviderSessionId,
    RawEventId,
    RunId,
    ThreadId,
    TurnItemId,
)


class Payload(msgspec.Struct, rename="camel", kw_only=True, tag_field="type"):
    """Base of every event payload."""


class ThreadUpserted(Payload, tag="thread.upserted"):
    thread: AppThread


class RunUpserted(Payload, tag="run.upserted"):
    run: Run


class RunAttemptUpserted(Payload, tag="run_attempt.upserted"):
    attempt: RunAttempt


class NodeUpserted(Payload, tag="node.upserted"):
    node: ExecutionNode


class ProviderSessionUpserted(Payload, tag="provider_session.upserted"):
    session: ProviderSession


class ProviderThreadUpserted(Payload, tag="provider_thread.upserted"):
    provider_thread: ProviderThread


class ProviderTurnUpserted(Payload, tag="provider_turn.upserted"):
    turn: ProviderTurn


class RuntimeRequestUpserted(Payload, tag="runtime_request.upserted"):
    request: RuntimeRequest


class TurnItemUpserted(Payload, tag="turn_item.upserted"):
    item: TurnItem


class TurnItemDelta(Payload, tag="turn_item.delta", gc=False):
    item_id: TurnItemId
    thread_id: ThreadId
    text: str
    #: The item field the text goes to (snake_case); ``None`` is the variant's main text.
    field: str | None = None
    #: True when ``text`` is a whole new value (a diff snapshot), not an extension.
    replace: bool = False


class PlanUpserted(Payload, tag="plan.upserted"):
    plan: PlanArtifact


class CheckpointScopeUpserted(Payload, tag="checkpoint_scope.upserted"):
    scope: CheckpointScope


class CheckpointUpserted(Payload, tag="checkpoint.upserted"):
    checkpoint: Checkpoint


class ContextTransferUpserted(Payload, tag="context_transfer.upserted"):
    transfer: ContextTransfer


class ContextHandoffUpserted(Payload, tag="context_handoff.upserted"):
    handoff: ContextHandoff


class ProviderUsage(Payload, tag="provider.usage"):
    """Token usage, rate limits and cost: session metadata, kept as the provider said it."""

    provider_session_id: ProviderSessionId
    usage: dict[str, Any]


class ProviderDiagnostic(Payload, tag="provider.diagnostic"):
    """A warning, error or unmapped frame that matters to a user: never dropped silently."""

    provider_session_id: ProviderSessionId | None
    level: Literal["info", "warning", "error"]
    code: str
    message: str
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


class ProviderJournalCommitted(Payload, tag="provider.journal"):
    """How far the log holds a held runtime's journal: everything its frames up to
    ``offset`` meant is committed with (or before) this event. A reattach replays
    the journal muted up to it (``supervisor/holder``)."""

    provider_session_id: ProviderSessionId
    holder_id: str
    offset: int


class RuntimeReconciled(Payload, tag="runtime.reconciled"):
    """Startup settled what a previous daemon left non-terminal (counts per entity kind)."""

    reason: str
    counts: dict[str, int]


EventPayload = (
    ThreadUpserted
    | RunUpserted
    | RunAttemptUpserted
    | NodeUpserted
    | ProviderSessionUpserted
    | ProviderThreadUpserted
    | ProviderTurnUpserted
    | RuntimeRequestUpserted
    | TurnItemUpserted
    | TurnItemDelta
    | PlanUpserted
    | CheckpointScopeUpserted
    | CheckpointUpserted
    | ContextTransferUpserted
    | ContextHandoffUpserted
    | ProviderUsage
    | ProviderDiagnostic
    | ProviderJournalCommitted
    | RuntimeReconciled
)

EVENT_TYPES: tuple[str, ...] = tuple(t.__struct_config__.tag for t in EventPayload.__args__)
#: Each payload class's event type (a dict lookup: the writer asks once per event).
TYPE_OF: dict[type, str] = dict(zip(EventPayload.__args__, EVENT_TYPES, strict=True))


class Correlation(
    msgspec.Struct, rename="camel", kw_only=True, frozen=True, omit_defaults=True, gc=False
):
    """Where an event came from on the provider side: refs, never app identity."""

    provider: ProviderKind | None = None
    native_session_ref: str | None = None
    native_thread_ref: str | None = None
    native_turn_ref: str | None = None
    native_item_ref: str | None = None
    native_request_ref: str | None = None
    raw_event_id: RawEventId | None = None


class EventDraft(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """An event before the store gives it a sequence."""

    payload: EventPayload
    correlation: Correlation = Correlation()


class EventEnvelope(msgspec.Struct, rename="camel", kw_only=True, frozen=True, gc=False):
    """A committed event: the store-assigned ``sequence`` is the stream cursor."""

    sequence: int
    event_id: EventId
    type: str
    occurred_at: str
    thread_id: ThreadId | None
    run_id: RunId | None
    node_id: NodeId | None
    provider_session_id: ProviderSessionId | None
    command_id: CommandId | None
    correlation: Correlation
    payload: EventPayload
