from __future__ import annotations

from t3orch.domain.base import Wire
from t3orch.domain.vocab import (
    ContextHandoffStatus,
    ContextHandoffStrategy,
    ContextTransferStatus,
    ContextTransferType,
    CreatedBy,
    ProviderKind,
)
from t3orch.ids import (
    CheckpointId,
    ContextHandoffId,
    ContextTransferId,
    MessageId,
    ProviderThreadId,
    RunId,
    ThreadId,
    TurnItemId,
)


class ContextSourcePoint(Wire):
    thread_id: ThreadId
    run_id: RunId | None
    checkpoint_id: CheckpointId | None
    turn_item_id: TurnItemId | None
    provider_thread_ref: str | None
    provider_turn_ref: str | None


class NativeForkResolution(Wire, tag_field="strategy", tag="native_fork"):
    provider_thread_ref: str


class PortableContextResolution(Wire, tag_field="strategy", tag="portable_context"):
    context_handoff_id: ContextHandoffId


class DeltaContextResolution(Wire, tag_field="strategy", tag="delta_context"):
    context_handoff_id: ContextHandoffId


class CheckpointContextResolution(Wire, tag_field="strategy", tag="checkpoint_context"):
    context_handoff_id: ContextHandoffId


ContextTransferResolution = (
    NativeForkResolution
    | PortableContextResolution
    | DeltaContextResolution
    | CheckpointContextResolution
)


class ContextTransfer(Wire):
    id: ContextTransferId
    type: ContextTransferType
    source_thread_id: ThreadId
    target_thread_id: ThreadId
    source_point: ContextSourcePoint
    base_point: ContextSourcePoint | None
    source_provider: ProviderKind | None
    target_provider: ProviderKind | None
    status: ContextTransferStatus
    resolution: ContextTransferResolution | None
    created_by: CreatedBy
    created_at: str
    consumed_at: str | None = None


class RunOrdinalRange(Wire, rename={"from_": "from"}):
    # `from` is a Python keyword; the wire keeps the seed's spelling.
    from_: int
    to: int


class ContextHandoff(Wire):
    id: ContextHandoffId
    transfer_id: ContextTransferId
    thread_id: ThreadId
    target_run_id: RunId
    from_provider_thread_ids: list[ProviderThreadId]
    to_provider_thread_id: ProviderThreadId
    covered_run_ordinals: RunOrdinalRange
    strategy: ContextHandoffStrategy
    status: ContextHandoffStatus
    summary_message_id: MessageId | None
    summary_text: str
    created_by_provider: ProviderKind | None
    created_at: str
    updated_at: str
