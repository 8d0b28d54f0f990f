"""The deterministic translator from Claude stream-json frames to canonical events.

Everything here is synchronous and depends only on its inputs, in order: the
frames the CLI wrote and the few things we did (a user frame sent, an interrupt
sent, a request answered, the process ended). No clocks, no randomness, no
process ids: the same inputs give the same events, which is what makes replay
tests exact.

Refs (the ingest layer scopes them by provider thread and turn):

* turns have no native id: ``TurnStarted(native_turn_ref=None)``, the core
  numbers them (ordinals scoped to the provider thread);
* text and thinking items are ``<message id>#<block index>``: the CLI writes one
  ``assistant`` frame per content block, all sharing the message id, so the
  block index is what tells them apart (see :class:`_MessageFold`);
* tool items are the ``tool_use`` id, which the permission request and the
  ``tool_result`` also carry;
* requests are the CLI's own control request id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, assert_never

import attrs
import msgspec

from adapters.claude import tools
from adapters.claude.frames import (
    AssistantFrame,
    Block,
    ControlCancelFrame,
    ControlRequestFrame,
    ControlResponseFrame,
    InboundFrame,
    KeptRawFrame,
    RateLimitFrame,
    ResultFrame,
    StreamEventFrame,
    SystemFrame,
    TranscriptMirrorFrame,
    UserFrame,
)
from adapters.claude.usage import turn_usage
from adapters.transport import ExitStatus
from t3orch.domain.provider import ProviderCapabilities
from t3orch.domain.turn_items import (
    AssistantMessage,
    Compaction,
    ItemContent,
    Reasoning,
    Subagent,
)
from t3orch.domain.vocab import ProviderTurnStatus, TurnItemStatus
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    PlanUpdated,
    ProviderEvent,
    RequestCancelled,
    RequestOpened,
    RequestResolved,
    RuntimeExited,
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
    UsageUpdated,
)

#: What Claude can and cannot do natively (explicit, lessons §1).
CLAUDE_CAPABILITIES = ProviderCapabilities(
    native_turn_ids=False,
    steer=False,
    fork=True,
    rollback=False,
    multiple_threads_per_process=False,
)

#: The decisions a permission prompt offers (accept = allow once,
#: acceptForSession = allow with the CLI's suggested rules, decline = deny,
#: cancel = deny and stop the turn). acceptForSession only where the CLI
#: suggested rules: without them it would be a plain accept under another name.
TOOL_DECISIONS = ["accept", "acceptForSession", "decline", "cancel"]
ONCE_DECISIONS = ["accept", "decline", "cancel"]
QUESTION_DECISIONS = ["accept", "decline", "cancel"]

_SYNTHETIC_MODEL = "<synthetic>"
_TEXT_FAMILY = {"text": "text", "thinking": "thinking", "redacted_thinking": "thinking"}


def _family(block_type: str) -> str:
    return _TEXT_FAMILY.get(block_type, block_type)


@attrs.define
class _MessageFold:
    """Which block index each ``assistant`` frame of one message is.

    With partial messages on, ``content_block_start`` names every block's index
    before its ``assistant`` frame arrives (just before ``content_block_stop``),
    so a frame takes the lowest started index of the same kind not yet taken.
    Without them (or if a start was missed) the next index after every one seen
    is used. Both rules depend only on frame order: deterministic.
    """

    started: dict[int, str] = attrs.field(factory=dict)
    taken: set[int] = attrs.field(factory=set)

    def start(self, index: int, block_type: str) -> None:
        self.started[index] = _family(block_type)

    def take(self, block_type: str) -> int:
        family = _family(block_type)
        for index in sorted(self.started):
            if index not in self.taken and self.started[index] == family:
                self.taken.add(index)
                return index
        index = max([*self.started, *self.taken], default=-1) + 1
        self.taken.add(index)
        return index


@attrs.define
class _Tool:
    name: str
    content: ItemContent | None  # None for plan tools (no item)
    parent: str | None


class ClaudeMapper:
    """Canonical events for one CLI process; feed it everything, in order."""

    def __init__(
        self,
        *,
        native_thread_ref: str | None = None,
        forked_from: str | None = None,
        head: str | None = None,
        full_access: bool = False,
    ) -> None:
        #: The session id; set from ``system/init`` (or known up front when resuming).
        self.session_id: str | None = None
        #: The uuid of the last real assistant message: the conversation head.
        self.head: str | None = head
        self._expected_session = native_thread_ref
        #: Permission prompts the runtime answers itself open no request.
        self._full_access = full_access
        self._forked_from = forked_from
        self._ready = False
        self._refs_sent: tuple[str, str | None] | None = None
        self.turn_active = False
        self._interrupt_requested = False
        self._turn_error: str | None = None
        self._messages: dict[str, _MessageFold] = {}
        self._stream_message: str | None = None
        #: Items started and not yet completed, in start order.
        self._open: dict[str, ItemContent] = {}
        self._done: set[str] = set()
        self._tools: dict[str, _Tool] = {}
        #: can_use_tool requests still waiting: request id -> tool_use id.
        self._requests: dict[str, str | None] = {}
        self._declined: set[str] = set()
        self._cancelled: set[str] = set()

    # -- things we did -----------------------------------------------------------

    def user_sent(self) -> list[ProviderEvent]:
        """We wrote a user frame: a turn starts (the CLI has no turn id to give us)."""
        if self.turn_active:
            return []
        return self._start_turn()

    def interrupt_sent(self) -> list[ProviderEvent]:
        """We asked for an interrupt: the coming error result means interrupted."""
        if self.turn_active:
            self._interrupt_requested = True
        return []

    def awaits_answer(self, request_id: str) -> bool:
        """Whether ``request_id`` opened a request that waits for the user's decision."""
        return request_id in self._requests

    def request_answered(self, request_id: str, decision: str) -> list[ProviderEvent]:
        tool_use_id = self._requests.pop(request_id, None)
        if tool_use_id is not None and decision in ("decline", "cancel"):
            self._declined.add(tool_use_id)
        return [RequestResolved(native_request_ref=request_id, decision=decision)]

    def exited(self, status: ExitStatus, stderr_tail: str = "") -> list[ProviderEvent]:
        """The process ended: close what is open, then say so."""
        events: list[ProviderEvent] = []
        if self.turn_active:
            turn_status: ProviderTurnStatus = (
                "interrupted" if self._interrupt_requested else "failed"
            )
            events += self._close_turn(turn_status, "runtime_exited")
            events.append(
                TurnCompleted(
                    native_turn_ref=None,
                    status=turn_status,
                    error=f"claude {status.describe()}",
                )
            )
        events.append(
            RuntimeExited(code=status.code, signal=status.signal, stderr_tail=stderr_tail)
        )
        return events

    # -- frames ------------------------------------------------------------------

    def frame(
        self, frame: InboundFrame | Diagnostic, raw_event_id: str | None
    ) -> list[ProviderEvent]:
        """Events for one decoded stdout line (a Diagnostic passes through)."""
        events = self._frame(frame)
        if raw_event_id is None:
            return events
        return [msgspec.structs.replace(e, raw_event_id=raw_event_id) for e in events]

    def _frame(self, frame: InboundFrame | Diagnostic) -> list[ProviderEvent]:
        match frame:
            case Diagnostic():
                return [frame]
            case StreamEventFrame():
                return self._stream(frame)
            case AssistantFrame():
                return self._assistant(frame)
            case UserFrame():
                return self._user(frame)
            case SystemFrame():
                return self._system(frame)
            case ResultFrame():
                return self._result(frame)
            case ControlRequestFrame():
                return self._control_request(frame)
            case ControlCancelFrame():
                return self._cancel(frame)
            case RateLimitFrame(rate_limit_info=info):
                return [
                    Diagnostic(
                        level="info",
                        code="claude.rate_limit",
                        message="rate limit status",
                        detail=info or {},
                    )
                ]
            case ControlResponseFrame() | KeptRawFrame() | TranscriptMirrorFrame():
                # The runtime resolves a control_response; conversation_reset and
                # transcript_mirror mean nothing canonical: the raw log keeps the bytes.
                return []
            case _:
                assert_never(frame)

    # system ----------------------------------------------------------------------

    def _system(self, frame: SystemFrame) -> list[ProviderEvent]:
        if frame.subtype == "init":
            return self._init(frame)
        if frame.subtype == "api_retry":
            return [
                Diagnostic(
                    level="warning",
                    code="claude.api_retry",
                    message=f"model request failed ({frame.error_status}); retry "
                    f"{frame.attempt} of {frame.max_retries}",
                    detail={
                        "attempt": frame.attempt,
                        "max_retries": frame.max_retries,
                        "retry_delay_ms": frame.retry_delay_ms,
                        "error_status": frame.error_status,
                        "error": frame.error,
                    },
                )
            ]
        if frame.subtype == "compact_boundary":
            ref = frame.uuid or "compact"
            mark = Compaction(title="Conversation compacted")
            return [
                ItemStarted(native_item_ref=ref, content=mark),
                ItemCompleted(native_item_ref=ref, content=mark),
            ]
        if frame.subtype in ("status", "session_state_changed"):
            # Progress signals with no canonical meaning; turns end on `result`.
            return []
        detail: dict[str, Any] = {"subtype": frame.subtype}
        if frame.task_id is not None:
            detail.update(task_id=frame.task_id, tool_use_id=frame.tool_use_id)
        if frame.subtype == "task_started":
            self._task_started(frame.tool_use_id, frame.task_id)
        return [
            Diagnostic(
                level="info",
                code="claude.system",
                message=f"system frame {frame.subtype!r}",
                detail=detail,
            )
        ]

    def _task_started(self, tool_use_id: str | None, task_id: str | None) -> None:
        """The CLI named the subagent an Agent/Task call runs: its child thread ref.

        It arrives after the tool use started, so the ref goes on the item's
        completion (the result, or the turn's end closing it), which is where
        ingest gives the child provider thread its ``nativeThreadRef``.
        """
        tool = self._tools.get(tool_use_id) if tool_use_id else None
        if tool is None or task_id is None or not isinstance(tool.content, Subagent):
            return
        tool.content = msgspec.structs.replace(tool.content, child_native_thread_ref=task_id)
        if tool_use_id in self._open:
            self._open[tool_use_id] = tool.content

    def _init(self, frame: SystemFrame) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        session = frame.session_id
        if session is None:
            return [Diagnostic(level="error", code="claude.init_without_session", message="init")]
        if not self.turn_active:
            # `init` comes after a user frame; one we did not send (queued input
            # replayed by the CLI) still opens a turn.
            events += self._start_turn()
        if not self._ready:
            self._ready = True
            events.append(
                SessionReady(
                    provider_version=frame.claude_code_version,
                    capabilities=CLAUDE_CAPABILITIES,
                    model=frame.model,
                    native_session_ref=session,
                )
            )
            if self._expected_session is not None and session != self._expected_session:
                events.append(
                    Diagnostic(
                        level="warning",
                        code="claude.session_id_mismatch",
                        message=f"asked for session {self._expected_session}, got {session}",
                    )
                )
        self.session_id = session
        events += self._refs()
        return events

    def _refs(self) -> list[ProviderEvent]:
        """ThreadRefsLearned whenever the session id or the head changed."""
        if self.session_id is None:
            return []
        refs = (self.session_id, self.head)
        if refs == self._refs_sent:
            return []
        forked = self._forked_from if self._refs_sent is None else None
        self._refs_sent = refs
        return [
            ThreadRefsLearned(
                native_thread_ref=self.session_id,
                native_conversation_head_ref=self.head,
                forked_from_native_thread_ref=forked,
            )
        ]

    # stream ----------------------------------------------------------------------

    def _stream(self, frame: StreamEventFrame) -> list[ProviderEvent]:
        event = frame.event
        if event.type == "message_start":
            message_id = (event.message or {}).get("id")
            self._stream_message = message_id if isinstance(message_id, str) else None
            return []
        message_id = frame.api_message_id or self._stream_message
        if message_id is None or event.index is None:
            return []
        ref = f"{message_id}#{event.index}"
        if event.type == "content_block_start":
            block_type = str((event.content_block or {}).get("type", ""))
            self._messages.setdefault(message_id, _MessageFold()).start(event.index, block_type)
            content: ItemContent | None = None
            if block_type == "text":
                content = AssistantMessage()
            elif block_type in ("thinking", "redacted_thinking"):
                content = Reasoning()
            if content is None or ref in self._open or ref in self._done:
                return []
            self._open[ref] = content
            return [
                ItemStarted(
                    native_item_ref=ref,
                    content=content,
                    parent_native_item_ref=frame.parent_tool_use_id,
                )
            ]
        if event.type == "content_block_delta" and event.delta is not None:
            text = event.delta.text if event.delta.type == "text_delta" else None
            if event.delta.type == "thinking_delta":
                text = event.delta.thinking
            # Deltas of a block already completed by its assistant frame are
            # stale: the completed text is authoritative.
            if text and ref in self._open:
                return [ItemDelta(native_item_ref=ref, text=text)]
        return []

    # assistant -------------------------------------------------------------------

    def _assistant(self, frame: AssistantFrame) -> list[ProviderEvent]:
        message = frame.message
        if frame.is_api_error_message or message.model == _SYNTHETIC_MODEL:
            # The CLI's stand-in reply when the backend failed: an error, not a
            # model message (the failed result follows).
            text = "\n".join(b.text for b in message.content if b.text)
            self._turn_error = text or frame.error
            return [
                Diagnostic(
                    level="error",
                    code="claude.api_error",
                    message=text or str(frame.error),
                    detail={"error": frame.error},
                )
            ]
        if frame.uuid is not None:
            self.head = frame.uuid
        fold = self._messages.setdefault(message.id, _MessageFold())
        # A reply cut off by an interrupt ends `interrupted`, as on Codex.
        status: TurnItemStatus = "interrupted" if frame.aborted else "completed"
        events: list[ProviderEvent] = []
        for block in message.content:
            index = fold.take(block.type)
            events += self._block(message.id, index, block, frame.parent_tool_use_id, status)
        return events

    def _block(
        self,
        message_id: str,
        index: int,
        block: Block,
        parent: str | None,
        status: TurnItemStatus = "completed",
    ) -> list[ProviderEvent]:
        if block.type == "text":
            content: ItemContent = AssistantMessage(text=block.text or "")
            return self._text_item(f"{message_id}#{index}", content, parent, status)
        if block.type in ("thinking", "redacted_thinking"):
            content = Reasoning(text=block.thinking or "")
            return self._text_item(f"{message_id}#{index}", content, parent, status)
        if block.type == "tool_use" and block.id is not None:
            return self._tool_use(block.id, block.name or "", block.input, parent)
        return [
            Diagnostic(
                level="info",
                code="claude.unmapped_block",
                message=f"assistant content block {block.type!r}",
                detail={"type": block.type, "message_id": message_id},
            )
        ]

    def _text_item(
        self,
        ref: str,
        content: ItemContent,
        parent: str | None,
        status: TurnItemStatus = "completed",
    ) -> list[ProviderEvent]:
        if ref in self._done:
            return []
        events: list[ProviderEvent] = []
        if ref not in self._open:
            events.append(
                ItemStarted(
                    native_item_ref=ref, content=_empty(content), parent_native_item_ref=parent
                )
            )
        self._open.pop(ref, None)
        self._done.add(ref)
        events.append(ItemCompleted(native_item_ref=ref, content=content, status=status))
        return events

    def _tool_use(
        self, tool_id: str, name: str, tool_input: Any, parent: str | None
    ) -> list[ProviderEvent]:
        if tool_id in self._tools:
            return []
        mapped = tools.tool_content(name, tool_input)
        if isinstance(mapped, tools.PlanTool):
            self._tools[tool_id] = _Tool(name, None, parent)
            kind: Literal["todo_list", "proposed_plan"] = (
                "todo_list" if mapped.kind == "todo_list" else "proposed_plan"
            )
            return [
                PlanUpdated(
                    kind=kind,
                    native_item_ref=tool_id,
                    steps=list(mapped.steps),
                    markdown=mapped.markdown,
                )
            ]
        self._tools[tool_id] = _Tool(name, mapped, parent)
        self._open[tool_id] = mapped
        return [ItemStarted(native_item_ref=tool_id, content=mapped, parent_native_item_ref=parent)]

    # user (tool results) -----------------------------------------------------------

    def _user(self, frame: UserFrame) -> list[ProviderEvent]:
        content = frame.message.content
        if isinstance(content, str):
            return []  # our own text echoed, or an interrupt marker
        events: list[ProviderEvent] = []
        for block in content:
            if block.type == "tool_result" and block.tool_use_id is not None:
                events += self._tool_result(block, frame.tool_use_result)
        return events

    def _tool_result(self, block: Block, tool_use_result: Any) -> list[ProviderEvent]:
        tool_id = block.tool_use_id
        assert tool_id is not None
        tool = self._tools.get(tool_id)
        if tool is None:
            return [
                Diagnostic(
                    level="warning",
                    code="claude.unknown_tool_result",
                    message=f"tool result for unknown tool use {tool_id}",
                    detail={"tool_use_id": tool_id},
                )
            ]
        if tool.content is None or tool_id not in self._open:
            return []  # a plan tool, or already closed
        del self._open[tool_id]
        self._done.add(tool_id)
        is_error = bool(block.is_error)
        text = tools.result_text(block.content)
        content = tools.completed_content(tool.content, text, is_error, tool_use_result)
        return [
            ItemCompleted(
                native_item_ref=tool_id,
                content=content,
                status=self._tool_status(tool_id, is_error, tool_use_result),
            )
        ]

    def _tool_status(self, tool_id: str, is_error: bool, tool_use_result: Any) -> TurnItemStatus:
        if tool_id in self._cancelled:
            return "interrupted"
        if tool_id in self._declined:
            return "declined"
        if isinstance(tool_use_result, dict) and tool_use_result.get("interrupted") is True:
            return "interrupted"
        return "failed" if is_error else "completed"

    # result ------------------------------------------------------------------------

    def _result(self, frame: ResultFrame) -> list[ProviderEvent]:
        if not self.turn_active:
            # E.g. the error result of a --resume of an unknown session, which
            # the CLI writes before any turn: the runtime reports ResumeFailed.
            return [
                Diagnostic(
                    level="error" if frame.is_error else "info",
                    code="claude.result_without_turn",
                    message="; ".join(frame.errors or []) or (frame.result or frame.subtype),
                    detail={"subtype": frame.subtype, "terminal_reason": frame.terminal_reason},
                )
            ]
        status = self._turn_status(frame)
        error: str | None = None
        if status == "failed":
            error = (
                "; ".join(frame.errors or [])
                or frame.result
                or self._turn_error
                or frame.terminal_reason
                or frame.subtype
            )
        usage = _usage(frame)
        events = self._close_turn(status, "turn_ended")
        events += self._refs()
        events.append(UsageUpdated(usage=usage))
        events.append(
            TurnCompleted(
                native_turn_ref=None,
                status=status,
                error=error,
                usage=usage,
                token_usage=turn_usage(frame),
            )
        )
        return events

    def _turn_status(self, frame: ResultFrame) -> ProviderTurnStatus:
        reason = frame.terminal_reason or ""
        if reason.startswith("aborted"):
            return "interrupted"
        if self._interrupt_requested and frame.subtype == "error_during_execution":
            return "interrupted"
        # `is_error` decides, never the subtype: a backend failure is
        # `subtype: success` with `is_error: true`.
        if frame.is_error or frame.subtype != "success":
            return "failed"
        return "completed"

    # control -----------------------------------------------------------------------

    def _control_request(self, frame: ControlRequestFrame) -> list[ProviderEvent]:
        body = frame.request
        if body.subtype != "can_use_tool":
            if body.subtype in ("hook_callback", "mcp_message"):
                return []  # answered by the runtime's handlers; no canonical meaning
            return [
                Diagnostic(
                    level="warning",
                    code="claude.unknown_control_request",
                    message=f"control request {body.subtype!r} we do not handle",
                    detail={"subtype": body.subtype, "request_id": frame.request_id},
                )
            ]
        name = body.tool_name or ""
        if tools.auto_allowed(self._full_access, name):
            return []
        self._requests[frame.request_id] = body.tool_use_id
        kind = tools.request_kind(name)
        is_question = kind == "user_input"
        detail: dict[str, Any] = {"toolName": name, "input": body.input}
        for key, value in (
            ("description", body.description),
            ("permissionSuggestions", body.permission_suggestions),
            ("blockedPath", body.blocked_path),
            ("decisionReason", body.decision_reason),
            ("agentId", body.agent_id),
        ):
            if value is not None:
                detail[key] = value
        return [
            RequestOpened(
                native_request_ref=frame.request_id,
                kind=kind,
                native_item_ref=body.tool_use_id,
                summary=tools.request_summary(name, body.input, body.description),
                detail=detail,
                available_decisions=list(
                    QUESTION_DECISIONS
                    if is_question
                    else TOOL_DECISIONS
                    if body.permission_suggestions
                    else ONCE_DECISIONS
                ),
                questions=tools.questions(body.input) if is_question else None,
            )
        ]

    def _cancel(self, frame: ControlCancelFrame) -> list[ProviderEvent]:
        if frame.request_id not in self._requests:
            return []  # a hook or MCP call withdrawn: nothing canonical was opened
        tool_use_id = self._requests.pop(frame.request_id)
        if tool_use_id is not None:
            self._cancelled.add(tool_use_id)
        return [
            RequestCancelled(native_request_ref=frame.request_id, reason="cancelled_by_provider")
        ]

    # turns -------------------------------------------------------------------------

    def _start_turn(self) -> list[ProviderEvent]:
        self.turn_active = True
        self._interrupt_requested = False
        self._turn_error = None
        return [TurnStarted(native_turn_ref=None)]

    def _close_turn(self, status: ProviderTurnStatus, reason: str) -> list[ProviderEvent]:
        """Close open items and requests; the caller appends TurnCompleted."""
        item_status: TurnItemStatus = (
            "interrupted"
            if status == "interrupted"
            else "failed"
            if status == "failed"
            else "completed"
        )
        events: list[ProviderEvent] = [
            ItemCompleted(native_item_ref=ref, content=content, status=item_status)
            for ref, content in self._open.items()
        ]
        events += [
            RequestCancelled(native_request_ref=request_id, reason=reason)
            for request_id in self._requests
        ]
        self.turn_active = False
        self._interrupt_requested = False
        self._turn_error = None
        self._open.clear()
        self._done.clear()
        self._tools.clear()
        self._requests.clear()
        self._declined.clear()
        self._cancelled.clear()
        self._messages.clear()
        self._stream_message = None
        return events


def _empty(content: ItemContent) -> ItemContent:
    match content:
        case AssistantMessage():
            return AssistantMessage()
        case Reasoning():
            return Reasoning()
        case _:
            return content


def _usage(frame: ResultFrame) -> dict[str, Any]:
    usage: dict[str, Any] = dict(frame.usage or {})
    extras: Iterable[tuple[str, Any]] = (
        ("total_cost_usd", frame.total_cost_usd),
        ("duration_ms", frame.duration_ms),
        ("duration_api_ms", frame.duration_api_ms),
        ("num_turns", frame.num_turns),
        ("model_usage", frame.model_usage),
    )
    for key, value in extras:
        if value is not None:
            usage[key] = value
    return usage


def strip_raw_ids(events: Sequence[ProviderEvent]) -> list[ProviderEvent]:
    """Events without their raw ids (which depend on the raw sink's numbering)."""
    return [msgspec.structs.replace(e, raw_event_id=None) for e in events]
