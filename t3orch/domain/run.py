from __future__ import annotations

from t3orch.domain.base import Wire
from t3orch.domain.vocab import ProviderKind, RunAttemptReason, RunAttemptStatus, RunStatus
from t3orch.ids import (
    CheckpointId,
    ContextHandoffId,
    MessageId,
    NodeId,
    PlanId,
    ProviderThreadId,
    ProviderTurnId,
    RunAttemptId,
    RunId,
    ThreadId,
)


class SourcePlanRef(Wire):
    thread_id: ThreadId
    plan_id: PlanId


class Run(Wire):
    """A counted user-visible turn on an app thread."""

    id: RunId
    thread_id: ThreadId
    ordinal: int
    provider: ProviderKind
    provider_thread_id: ProviderThreadId | None
    user_message_id: MessageId
    root_node_id: NodeId | None
    active_attempt_id: RunAttemptId | None
    status: RunStatus
    requested_at: str
    started_at: str | None = None
    completed_at: str | None = None
    checkpoint_id: CheckpointId | None = None
    context_handoff_id: ContextHandoffId | None = None
    source_plan_ref: SourcePlanRef | None = None
    counts_for_conversation: bool = True
    last_error: str | None = None


class RunAttempt(Wire):
    """One provider execution attempt for a run."""

    id: RunAttemptId
    run_id: RunId
    thread_id: ThreadId
    attempt_ordinal: int
    root_node_id: NodeId
    provider: ProviderKind
    provider_thread_id: ProviderThreadId
    provider_turn_id: ProviderTurnId | None
    reason: RunAttemptReason
    status: RunAttemptStatus
    started_at: str | None = None
    completed_at: str | None = None
