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


class TokenUsage(Wire):
    """Tokens a provider reported for a turn (or summed over runs), and their cost.

    The seed names no usage fields; these are the common ground of both providers.
    ``input_tokens`` counts every input token, cached ones included
    (``cached_input_tokens`` is the part read from a cache); ``total_tokens`` is
    input plus output. ``cost_usd`` is None when the provider reports no cost
    (Codex does not).
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None

    def __add__(self, other: TokenUsage) -> TokenUsage:
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_output_tokens=self.reasoning_output_tokens + other.reasoning_output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cost_usd=sum(costs) if costs else None,
        )


def add_usage(a: TokenUsage | None, b: TokenUsage | None) -> TokenUsage | None:
    if a is None:
        return b
    return a if b is None else a + b


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
    #: What the provider reported for the run's turns (every attempt), when it did.
    usage: TokenUsage | None = None


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
