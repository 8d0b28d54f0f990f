"""Status and kind vocabularies, exactly as the seed spells them."""

from __future__ import annotations

from typing import Literal

ProviderKind = Literal["codex", "claude", "standin"]
RuntimeMode = Literal["full-access", "approval-required"]
InteractionMode = Literal["default", "plan"]

RunStatus = Literal[
    "queued",
    "starting",
    "running",
    "waiting",
    "completed",
    "interrupted",
    "failed",
    "cancelled",
    "rolled_back",
]
RUN_TERMINAL: frozenset[str] = frozenset(
    {"completed", "interrupted", "failed", "cancelled", "rolled_back"}
)

RunAttemptReason = Literal["initial", "steering_restart", "retry", "provider_recovery"]
RunAttemptStatus = Literal[
    "pending", "running", "completed", "interrupted", "failed", "cancelled", "superseded"
]
ATTEMPT_TERMINAL: frozenset[str] = frozenset(
    {"completed", "interrupted", "failed", "cancelled", "superseded"}
)

NodeKind = Literal[
    "root_turn",
    "assistant_message",
    "reasoning",
    "plan",
    "todo_list",
    "tool_call",
    "approval_request",
    "user_input_request",
    "subagent",
    "hook",
    "system",
]
NodeStatus = Literal[
    "pending",
    "running",
    "waiting",
    "completed",
    "interrupted",
    "failed",
    "cancelled",
    "rolled_back",
]
NODE_TERMINAL: frozenset[str] = frozenset(
    {"completed", "interrupted", "failed", "cancelled", "rolled_back"}
)

ProviderSessionStatus = Literal["starting", "ready", "running", "waiting", "stopped", "error"]
ProviderThreadStatus = Literal["not_loaded", "idle", "active", "archived", "closed", "error"]
#: Provider threads that are not resumed any more (a replaced, rolled-back or closed one).
PROVIDER_THREAD_DEAD: frozenset[str] = frozenset({"error", "closed", "archived"})
ProviderTurnStatus = Literal[
    "pending", "running", "completed", "interrupted", "failed", "cancelled"
]
TURN_TERMINAL: frozenset[str] = frozenset({"completed", "interrupted", "failed", "cancelled"})

RuntimeRequestKind = Literal[
    "command", "file-read", "file-change", "dynamic_tool_call", "user_input", "auth_refresh"
]
RuntimeRequestStatus = Literal["pending", "resolved", "expired", "cancelled"]

MessageRole = Literal["user", "assistant", "system"]

PlanKind = Literal["proposed_plan", "todo_list", "questions"]
PlanStatus = Literal["draft", "active", "completed", "superseded"]
PlanStepStatus = Literal["pending", "running", "completed"]

CheckpointScopeKind = Literal["root_run", "subagent", "tool", "provider_thread", "manual"]
CheckpointStatus = Literal["ready", "missing", "error", "stale"]

ContextTransferType = Literal[
    "fork", "provider_handoff", "merge_back", "subagent_spawn", "subagent_result"
]
ContextTransferStatus = Literal[
    "pending", "resolved_native", "resolved_portable", "failed", "consumed", "superseded"
]
ContextHandoffStrategy = Literal[
    "delta_since_target_last_seen", "full_thread_summary", "checkpoint_summary", "manual_context"
]
ContextHandoffStatus = Literal["pending", "ready", "failed", "superseded"]
CreatedBy = Literal["user", "agent", "system"]

TurnItemStatus = Literal[
    "pending", "running", "waiting", "completed", "failed", "declined", "interrupted", "cancelled"
]
TURN_ITEM_TERMINAL: frozenset[str] = frozenset(
    {"completed", "failed", "declined", "interrupted", "cancelled"}
)
TURN_ITEM_OPEN: tuple[str, ...] = ("pending", "running", "waiting")

#: How strongly a native ref binds to an app entity (lessons §1).
BindingStrength = Literal["exact", "scoped", "ordinal", "fingerprint", "synthetic"]
