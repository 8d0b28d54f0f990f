"""The canonical adapter vocabulary: what every provider adapter yields.

Adapters are deterministic translators from native frames to these events; they
carry native refs only, never app ids. The core's ingest layer
(``t3orch.ingest``) binds them to app entities, allocates or derives ids, and
appends V2 events. What an item is (``ItemContent``) is a variant of the one turn
item union (``t3orch.domain.turn_items``), unbound: ingest binds that value itself.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from t3orch.domain.plan import PlanStep, UserInputQuestion
from t3orch.domain.provider import ProviderCapabilities
from t3orch.domain.run import TokenUsage
from t3orch.domain.turn_items import ItemContent
from t3orch.domain.vocab import ProviderTurnStatus, RuntimeRequestKind, TurnItemStatus


class AdapterEvent(msgspec.Struct, rename="camel", kw_only=True, tag_field="type"):
    #: The raw-diagnostics id of the frame this came from, when there is one.
    raw_event_id: str | None = None


class SessionReady(AdapterEvent, tag="session.ready"):
    provider_version: str | None
    capabilities: ProviderCapabilities
    model: str | None = None
    native_session_ref: str | None = None


class ThreadRefsLearned(AdapterEvent, tag="thread.refs"):
    """The resume refs: persist them the moment they are known."""

    native_thread_ref: str
    native_conversation_head_ref: str | None = None
    forked_from_native_thread_ref: str | None = None


class ResumeFailed(AdapterEvent, tag="resume.failed"):
    """The native thread could not be resumed (gone, unknown, owned elsewhere)."""

    native_thread_ref: str
    reason: Literal["not_found", "owned_elsewhere", "error"]
    message: str


class TurnStarted(AdapterEvent, tag="turn.started"):
    native_turn_ref: str | None


class TurnCompleted(AdapterEvent, tag="turn.completed"):
    """Authoritative end of a turn; items still open are closed by the adapter first."""

    native_turn_ref: str | None
    status: ProviderTurnStatus
    error: str | None = None
    usage: dict[str, Any] | None = None
    #: ``usage`` in the canonical form, for this turn alone (the run adds it up).
    token_usage: TokenUsage | None = None
    #: Subagent items (native refs) whose child the provider keeps running past this
    #: turn's end: their nodes stay open until a ``SubagentEnded`` names them.
    continuing: list[str] = msgspec.field(default_factory=list)


class ItemStarted(AdapterEvent, tag="item.started"):
    native_item_ref: str
    content: ItemContent
    parent_native_item_ref: str | None = None


class ItemDelta(AdapterEvent, tag="item.delta", gc=False):
    native_item_ref: str
    text: str
    #: Which part of the item the text extends: ``None`` is its main text (message,
    #: reasoning text, plan, command output); ``"summary"`` a reasoning summary;
    #: ``"progress"``/``"stdin"`` tool progress or terminal input; ``"patch"`` a
    #: *replacing* snapshot of a file change's diff.
    channel: str | None = None


class ItemCompleted(AdapterEvent, tag="item.completed"):
    native_item_ref: str
    content: ItemContent
    status: TurnItemStatus = "completed"
    #: A subagent call that returned while its child still works (Codex's spawn
    #: completes before the child's turn): the item is done, its node stays open
    #: until a ``SubagentEnded`` names it.
    child_continues: bool = False


class SubagentEnded(AdapterEvent, tag="subagent.ended"):
    """A subagent whose call already returned finished its work (its child's turn ended)."""

    native_item_ref: str
    status: Literal["completed", "failed", "interrupted"]
    child_native_thread_ref: str | None = None


class RequestOpened(AdapterEvent, tag="request.opened"):
    native_request_ref: str
    kind: RuntimeRequestKind
    native_item_ref: str | None = None
    summary: str = ""
    detail: dict[str, Any] = msgspec.field(default_factory=dict)
    available_decisions: list[str] = msgspec.field(default_factory=list)
    questions: list[UserInputQuestion] | None = None


class RequestResolved(AdapterEvent, tag="request.resolved"):
    native_request_ref: str
    decision: str | None = None


class RequestCancelled(AdapterEvent, tag="request.cancelled"):
    """The provider abandoned the request (e.g. Claude ``control_cancel_request``)."""

    native_request_ref: str
    reason: str


class PlanUpdated(AdapterEvent, tag="plan.updated"):
    kind: Literal["todo_list", "proposed_plan"]
    native_item_ref: str | None = None
    steps: list[PlanStep] = msgspec.field(default_factory=list)
    markdown: str | None = None


class UsageUpdated(AdapterEvent, tag="usage.updated"):
    usage: dict[str, Any]


class Diagnostic(AdapterEvent, tag="diagnostic"):
    """Native traffic with no canonical meaning, warnings and errors: kept, never fatal."""

    level: Literal["info", "warning", "error"]
    code: str
    message: str
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


class RuntimeExited(AdapterEvent, tag="runtime.exited"):
    code: int | None
    signal: int | None
    #: The end of the provider's stderr, redacted by whoever read it.
    stderr_tail: str = ""
    #: Why the runtime is gone when no exit status says it: it never started
    #: (``cannot run /usr/bin/codex: No such file or directory``).
    error: str | None = None


class JournalOffset(AdapterEvent, tag="journal.offset"):
    """Every event of the held provider's frames up to ``offset`` of its holder's journal
    is queued before this one (not an adapter's: the held transport puts it)."""

    holder_id: str
    offset: int


ProviderEvent = (
    SessionReady
    | ThreadRefsLearned
    | ResumeFailed
    | TurnStarted
    | TurnCompleted
    | ItemStarted
    | ItemDelta
    | ItemCompleted
    | SubagentEnded
    | RequestOpened
    | RequestResolved
    | RequestCancelled
    | PlanUpdated
    | UsageUpdated
    | Diagnostic
    | RuntimeExited
    | JournalOffset
)
