from __future__ import annotations

from t3orch.domain.base import Wire
from t3orch.domain.vocab import CheckpointScopeKind, CheckpointStatus
from t3orch.ids import (
    CheckpointId,
    CheckpointScopeId,
    NodeId,
    ProviderThreadId,
    RunId,
    ThreadId,
)


class CheckpointScope(Wire):
    id: CheckpointScopeId
    thread_id: ThreadId
    run_id: RunId | None
    node_id: NodeId
    parent_scope_id: CheckpointScopeId | None
    provider_thread_id: ProviderThreadId | None
    kind: CheckpointScopeKind
    ordinal_within_parent: int
    advances_app_run_count: bool
    cwd: str
    created_at: str


class CheckpointFileSummary(Wire):
    path: str
    additions: int
    deletions: int


class Checkpoint(Wire):
    id: CheckpointId
    thread_id: ThreadId
    scope_id: CheckpointScopeId
    run_id: RunId | None
    node_id: NodeId
    parent_checkpoint_id: CheckpointId | None
    ordinal_within_scope: int
    app_run_ordinal: int | None
    ref: str
    status: CheckpointStatus
    files: list[CheckpointFileSummary]
    captured_at: str
