from __future__ import annotations

from t3orch.domain.base import ProviderRef, Wire
from t3orch.domain.vocab import NodeKind, NodeStatus
from t3orch.ids import (
    CheckpointScopeId,
    NodeId,
    ProviderThreadId,
    ProviderTurnId,
    RunId,
    RuntimeRequestId,
    ThreadId,
)


class ExecutionNode(Wire):
    """A unit of provider/runtime work; only a run's root node completes the run."""

    id: NodeId
    thread_id: ThreadId
    run_id: RunId | None
    parent_node_id: NodeId | None
    root_node_id: NodeId
    kind: NodeKind
    status: NodeStatus
    counts_for_run: bool
    provider_thread_id: ProviderThreadId | None
    provider_turn_id: ProviderTurnId | None
    native_item_ref: ProviderRef | None
    runtime_request_id: RuntimeRequestId | None
    checkpoint_scope_id: CheckpointScopeId | None
    started_at: str | None = None
    completed_at: str | None = None
