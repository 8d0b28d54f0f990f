"""Codex frames -> canonical :mod:`t3orch.provider_events`: a deterministic translator.

The same frames in give the same events out: no wall clock, no ids invented
here (every ref is a Codex id, stringified). The state kept is only what
closing a turn needs: the items still open (with the text streamed into them,
so an interrupted message keeps what was said), the server requests still
waiting, and the latest token usage of each turn.

Notifications are dispatched by one ``match`` on their method
(:meth:`CodexMapper.notification`); every method it handles is in
:data:`MAPPED_NOTIFICATIONS` (what :mod:`adapters.codex.coverage` counts as
*mapped*, held to the ``match`` by a test); anything else becomes a
``Diagnostic`` with code ``unmapped``.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import msgspec

from adapters.codex.frames import RpcError, decode_params
from adapters.codex.items import MAPPED_ITEM_TYPES, item_content, item_status
from adapters.codex.server_requests import ATTESTATION, request_kind, request_opened
from adapters.codex.usage import TurnUsage
from t3orch.domain.plan import PlanStep
from t3orch.domain.provider import ProviderCapabilities
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    FileChange,
    ItemContent,
    Plan,
    Reasoning,
    Subagent,
)
from t3orch.domain.vocab import PlanStepStatus, ProviderTurnStatus
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    PlanUpdated,
    ProviderEvent,
    RequestCancelled,
    RequestResolved,
    ResumeFailed,
    SessionReady,
    SubagentEnded,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
    UsageUpdated,
)

#: What Codex can do natively (0.169.0).
CODEX_CAPABILITIES = ProviderCapabilities(
    native_turn_ids=True, steer=True, fork=True, rollback=True, multiple_threads_per_process=True
)

_VERSION = re.compile(r"/(\d+\.\d+\.\d+[^\s()]*)")


class _Delta(msgspec.Struct, rename="camel"):
    item_id: str
    delta: str = ""


class _Tagged(msgspec.Struct, rename="camel"):
    item_id: str
    message: str = ""
    stdin: str = ""


_delta_decoder = msgspec.json.Decoder(_Delta)
_tagged_decoder = msgspec.json.Decoder(_Tagged)


@attrs.define
class _OpenItem:
    turn_id: str | None
    content: ItemContent
    # Streamed text, joined only when the item must be closed by us.
    text: list[str] = attrs.field(factory=list)
    summary: list[str] = attrs.field(factory=list)


@attrs.define
class OpenRequest:
    """A server request that has not been resolved yet."""

    request_id: int | str
    method: str
    params: dict[str, Any]
    turn_id: str | None
    answered: str | None = None


_FINISHED_KEPT = 64

_TURN_STATUS: dict[str, ProviderTurnStatus] = {
    "completed": "completed",
    "interrupted": "interrupted",
    "failed": "failed",
}
_STEP_STATUS: dict[str, PlanStepStatus] = {
    "pending": "pending",
    "inProgress": "running",
    "completed": "completed",
}

#: Diagnostics-level notifications: method -> (level, code).
DIAGNOSTIC_NOTIFICATIONS: dict[str, tuple[str, str]] = {
    "warning": ("warning", "provider_warning"),
    "guardianWarning": ("warning", "guardian_warning"),
    "configWarning": ("warning", "config_warning"),
    "deprecationNotice": ("info", "deprecation"),
    "model/rerouted": ("info", "model_rerouted"),
}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class CodexMapper:
    """Stateful translator; one per provider process."""

    def __init__(self, *, model: str | None = None) -> None:
        self.model = model
        self._items: dict[str, _OpenItem] = {}
        self._requests: dict[str, OpenRequest] = {}
        self._turns: set[str] = set()
        self._usage: dict[str, dict[str, Any]] = {}
        self._tokens = TurnUsage()
        self._threads: set[str] = set()
        # Recently completed turns (bounded): lets the runtime tell a finished turn
        # from one whose turn/started has not arrived yet.
        self._finished: dict[str, None] = {}
        #: thread ref -> its turn in progress, from turn/started until turn/completed.
        self.active_turns: dict[str, str] = {}
        #: Subagent threads (collab spawnAgent): child thread ref -> the spawn item ref.
        self._children: dict[str, str | None] = {}
        #: Spawn items whose child thread is not known yet, oldest first.
        self._unassigned_spawns: list[str] = []
        #: Turns of subagent threads: never the app's turn, so never a TurnCompleted.
        self._child_turns: set[str] = set()
        #: Spawn item ref -> the app turn it belongs to (a child's spawn: its parent's).
        self._spawn_turn: dict[str, str | None] = {}
        #: Child thread -> its spawn item, for spawns that returned before the child
        #: ended a turn: the subagent's work goes on until that turn ends.
        self._deferred: dict[str, str] = {}
        #: Child threads that ended a turn.
        self._child_done: set[str] = set()

    # --- queries used by the runtime ------------------------------------------

    def open_request(self, ref: str) -> OpenRequest | None:
        request = self._requests.get(ref)
        return request if request is not None and request.answered is None else None

    def answered(self, ref: str, decision: str) -> None:
        """We sent our answer to ``ref`` (RequestResolved follows from the provider)."""
        request = self._requests.get(ref)
        if request is not None:
            request.answered = decision

    def turn_finished(self, turn_id: str) -> bool:
        return turn_id in self._finished

    def open_item_refs(self) -> list[str]:
        return list(self._items)

    # --- inbound -------------------------------------------------------------

    def notification(
        self, method: str, params: msgspec.Raw, raw_id: str | None
    ) -> list[ProviderEvent]:
        # The streamed methods come first; the typed fast path (frames.Delta,
        # ItemFrame) takes most of them before they get here.
        match method:
            case (
                "item/agentMessage/delta"
                | "item/commandExecution/outputDelta"
                | "item/reasoning/textDelta"
                | "item/plan/delta"
                # Deprecated (no longer emitted): legacy apply_patch output as plain text.
                | "item/fileChange/outputDelta"
            ):
                return self._on_text_delta(params, raw_id)
            case "item/started":
                return self._on_item_started(params, raw_id)
            case "item/completed":
                return self._on_item_completed(params, raw_id)
            case "item/reasoning/summaryTextDelta":
                return self._on_summary_delta(params, raw_id)
            case "item/reasoning/summaryPartAdded":
                return self._on_summary_part(params, raw_id)
            case "item/commandExecution/terminalInteraction":
                return self._on_terminal_input(params, raw_id)
            case "item/fileChange/patchUpdated":
                return self._on_patch_updated(params, raw_id)
            case "item/mcpToolCall/progress":
                return self._on_progress(params, raw_id)
            case "thread/started":
                return self._on_thread_started(params, raw_id)
            case "turn/started":
                return self._on_turn_started(params, raw_id)
            case "turn/completed":
                return self._on_turn_completed(params, raw_id)
            case "turn/plan/updated":
                return self._on_plan_updated(params, raw_id)
            case "serverRequest/resolved":
                return self._on_request_resolved(params, raw_id)
            case "thread/tokenUsage/updated":
                return self._on_token_usage(params, raw_id)
            case "account/rateLimits/updated":
                return self._on_rate_limits(params, raw_id)
            case "error":
                return self._on_error(params, raw_id)
            case _ if method in DIAGNOSTIC_NOTIFICATIONS:
                level, code = DIAGNOSTIC_NOTIFICATIONS[method]
                return [self._diagnostic(method, params, raw_id, level, code)]
            case _:
                return [
                    Diagnostic(
                        raw_event_id=raw_id,
                        level="info",
                        code="unmapped",
                        message=f"unmapped codex notification {method}",
                        detail={"method": method},
                    )
                ]

    def server_request(
        self, request_id: int | str, method: str, params: msgspec.Raw, raw_id: str | None
    ) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        if method == ATTESTATION:
            return [
                Diagnostic(
                    raw_event_id=raw_id,
                    level="warning",
                    code="attestation_refused",
                    message="codex asked for a client attestation; answered with an error",
                    detail={"method": method, "requestId": request_id},
                )
            ]
        kind = request_kind(method, body)
        if kind is None:
            return [
                Diagnostic(
                    raw_event_id=raw_id,
                    level="warning",
                    code="unmapped_request",
                    message=f"unmapped codex server request {method}; answered with an error",
                    detail={"method": method, "requestId": request_id},
                )
            ]
        ref = str(request_id)
        turn_id = _opt_str(body.get("turnId"))
        if turn_id is None:
            thread = _opt_str(body.get("threadId")) or _opt_str(body.get("conversationId"))
            turn_id = self.active_turns.get(thread) if thread else None
        self._requests[ref] = OpenRequest(request_id, method, body, turn_id)
        return [request_opened(ref, method, body, kind, raw_id)]

    def response(
        self,
        method: str,
        request_params: dict[str, Any],
        result: Any,
        error: RpcError | None,
        raw_id: str | None,
    ) -> list[ProviderEvent]:
        """Events implied by the answer to one of our requests."""
        if method == "initialize" and error is None:
            agent = _opt_str(_dict(result).get("userAgent")) or ""
            match = _VERSION.search(agent)
            return [
                SessionReady(
                    raw_event_id=raw_id,
                    provider_version=match.group(1) if match else None,
                    capabilities=CODEX_CAPABILITIES,
                    model=self.model,
                )
            ]
        if method in ("thread/start", "thread/resume", "thread/fork"):
            if error is not None:
                if method != "thread/resume":
                    return []
                ref = str(request_params.get("threadId", ""))
                return [
                    ResumeFailed(
                        raw_event_id=raw_id,
                        native_thread_ref=ref,
                        reason=resume_failure_reason(error.message),
                        message=error.message,
                    )
                ]
            return self._thread_refs(_dict(_dict(result).get("thread")), raw_id)
        return []

    def bad_line(
        self, code: str, reason: str, head: str, length: int, raw_id: str | None
    ) -> list[ProviderEvent]:
        return [
            Diagnostic(
                raw_event_id=raw_id,
                level="error",
                code=code,
                message=f"codex wrote an unusable stdout line: {reason}",
                detail={"head": head, "length": length},
            )
        ]

    def unexpected_response(self, request_id: Any, raw_id: str | None) -> list[ProviderEvent]:
        return [
            Diagnostic(
                raw_event_id=raw_id,
                level="warning",
                code="unexpected_response",
                message=f"a response to request {request_id!r}, which is not pending",
                detail={"id": request_id},
            )
        ]

    # --- notification handlers (see NOTIFICATION_HANDLERS) --------------------

    def _on_thread_started(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        thread = _dict(_dict(decode_params(params)).get("thread"))
        ref = _opt_str(thread.get("id"))
        parent = _opt_str(thread.get("parentThreadId"))
        if ref is not None and (parent is not None or ref in self._children):
            # A spawned subagent's own thread: not a resume ref of ours.
            if ref not in self._children:
                spawn = self._unassigned_spawns.pop(0) if self._unassigned_spawns else None
                self._children[ref] = spawn
            return [
                Diagnostic(
                    raw_event_id=raw_id,
                    level="info",
                    code="subagent_thread_started",
                    message=f"codex subagent thread {ref} started",
                    detail={
                        "threadId": ref,
                        "parentThreadId": parent,
                        "spawnItemId": self._children[ref],
                        "agentNickname": thread.get("agentNickname"),
                        "agentRole": thread.get("agentRole"),
                    },
                )
            ]
        return self._thread_refs(thread, raw_id)

    def _spawned(self, ref: str, content: ItemContent) -> None:
        """Remember which spawn item a child thread belongs to."""
        if not isinstance(content, Subagent):
            return
        child = content.child_native_thread_ref
        if child is None:
            if ref not in self._unassigned_spawns:
                self._unassigned_spawns.append(ref)
            return
        if ref in self._unassigned_spawns:
            self._unassigned_spawns.remove(ref)
        if self._children.get(child) is None:
            self._children[child] = ref

    def _app_turn(self, body: dict[str, Any]) -> str | None:
        """The app turn a frame's work belongs to: a child thread's is its spawn's."""
        thread = _opt_str(body.get("threadId"))
        if thread is not None and thread in self._children:
            spawn = self._children[thread]
            return self._spawn_turn.get(spawn) if spawn is not None else None
        return _opt_str(body.get("turnId"))

    def _child_turn(self, thread: str | None, turn_id: str | None) -> bool:
        if turn_id is not None and turn_id in self._child_turns:
            return True
        if thread is not None and thread in self._children:
            if turn_id is not None:
                self._child_turns.add(turn_id)
            return True
        return False

    def _on_turn_started(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        turn_id = _opt_str(_dict(body.get("turn")).get("id"))
        thread = _opt_str(body.get("threadId"))
        if self._child_turn(thread, turn_id):
            return []
        if thread is not None and turn_id is not None:
            self.active_turns[thread] = turn_id
        if turn_id is not None:
            if turn_id in self._turns:
                return []
            self._turns.add(turn_id)
        return [TurnStarted(raw_event_id=raw_id, native_turn_ref=turn_id)]

    def _on_turn_completed(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        turn = _dict(body.get("turn"))
        turn_id = _opt_str(turn.get("id"))
        thread = _opt_str(body.get("threadId"))
        if self._child_turn(thread, turn_id):
            return self._child_turn_completed(turn, turn_id, thread, raw_id)
        if thread is not None and self.active_turns.get(thread) == turn_id:
            del self.active_turns[thread]
        status = _TURN_STATUS.get(str(turn.get("status")), "failed")
        # Children still working when their parent's turn completes go on (spawn
        # without wait); an interrupted or failed parent turn takes them with it.
        mine = [c for c, spawn in self._deferred.items() if self._spawn_turn.get(spawn) == turn_id]
        continuing = [self._deferred[c] for c in mine] if status == "completed" else []
        if status != "completed":
            for child in mine:
                del self._deferred[child]
        events: list[ProviderEvent] = []
        # Requests first (they hang off items), then the items the turn left open,
        # and only then the authoritative end of the turn.
        for ref, request in list(self._requests.items()):
            if request.turn_id != turn_id:
                continue
            del self._requests[ref]
            if request.answered is not None:
                events.append(
                    RequestResolved(
                        raw_event_id=raw_id, native_request_ref=ref, decision=request.answered
                    )
                )
            else:
                events.append(
                    RequestCancelled(
                        raw_event_id=raw_id, native_request_ref=ref, reason="turn_ended"
                    )
                )
        for ref, item in list(self._items.items()):
            if item.turn_id != turn_id:
                continue
            del self._items[ref]
            events.append(
                ItemCompleted(
                    raw_event_id=raw_id,
                    native_item_ref=ref,
                    content=_streamed(item),
                    status="interrupted",
                )
            )
        error = _dict(turn.get("error")).get("message")
        if turn_id is not None:
            self._turns.discard(turn_id)
            self._finished[turn_id] = None
            if len(self._finished) > _FINISHED_KEPT:
                del self._finished[next(iter(self._finished))]
        events.append(
            TurnCompleted(
                raw_event_id=raw_id,
                native_turn_ref=turn_id,
                status=status,
                error=error if isinstance(error, str) else None,
                usage=self._usage.pop(turn_id, None) if turn_id else None,
                token_usage=self._tokens.finish(turn_id),
                continuing=continuing,
            )
        )
        return events

    def _child_turn_completed(
        self, turn: dict[str, Any], turn_id: str | None, thread: str | None, raw_id: str | None
    ) -> list[ProviderEvent]:
        """A subagent thread's turn ended: close its items, never the app's turn."""
        events: list[ProviderEvent] = []
        for ref, item in list(self._items.items()):
            if turn_id is None or item.turn_id != turn_id:
                continue
            del self._items[ref]
            events.append(
                ItemCompleted(
                    raw_event_id=raw_id,
                    native_item_ref=ref,
                    content=_streamed(item),
                    status="interrupted",
                )
            )
        if turn_id is not None:
            self._child_turns.discard(turn_id)
            self._usage.pop(turn_id, None)
        spawn = self._deferred.pop(thread, None) if thread is not None else None
        if thread is not None:
            self._child_done.add(thread)
        if spawn is not None:
            ended = turn.get("status")
            events.append(
                SubagentEnded(
                    raw_event_id=raw_id,
                    native_item_ref=spawn,
                    status=(
                        "completed"
                        if ended == "completed"
                        else "interrupted"
                        if ended == "interrupted"
                        else "failed"
                    ),
                    child_native_thread_ref=thread,
                )
            )
        events.append(
            Diagnostic(
                raw_event_id=raw_id,
                level="info",
                code="subagent_turn_completed",
                message=f"codex subagent thread {thread} ended a turn ({turn.get('status')})",
                detail={"threadId": thread, "turnId": turn_id, "status": turn.get("status")},
            )
        )
        return events

    def _parent_of(self, body: dict[str, Any]) -> str | None:
        thread = _opt_str(body.get("threadId"))
        return self._children.get(thread) if thread is not None else None

    def _on_item_started(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        return self.item_started(_dict(decode_params(params)), raw_id)

    def item_started(self, body: dict[str, Any], raw_id: str | None) -> list[ProviderEvent]:
        """``item/started`` with its params decoded (the frame decoder's one-pass path)."""
        item = _dict(body.get("item"))
        ref = str(item.get("id", ""))
        content = item_content(item)
        if content is None:
            return [self._unmapped_item("item/started", item, raw_id)]
        self._items[ref] = _OpenItem(turn_id=_opt_str(body.get("turnId")), content=content)
        if isinstance(content, Subagent):
            self._spawn_turn.setdefault(ref, self._app_turn(body))
        self._spawned(ref, content)
        return [
            ItemStarted(
                raw_event_id=raw_id,
                native_item_ref=ref,
                content=content,
                parent_native_item_ref=self._parent_of(body),
            )
        ]

    def _on_item_completed(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        return self.item_completed(_dict(decode_params(params)), raw_id)

    def item_completed(self, body: dict[str, Any], raw_id: str | None) -> list[ProviderEvent]:
        """``item/completed`` with its params decoded (the frame decoder's one-pass path)."""
        item = _dict(body.get("item"))
        ref = str(item.get("id", ""))
        content = item_content(item)
        if content is None:
            return [self._unmapped_item("item/completed", item, raw_id)]
        self._items.pop(ref, None)
        self._spawned(ref, content)
        status = item_status(item)
        child = content.child_native_thread_ref if isinstance(content, Subagent) else None
        # Codex completes the spawn call once the agent exists, before its turn: the
        # subagent's work ends with the child's turn, not with this call.
        continues = status == "completed" and child is not None and child not in self._child_done
        if continues and child is not None:
            self._spawn_turn.setdefault(ref, self._app_turn(body))
            self._deferred[child] = ref
        return [
            ItemCompleted(
                raw_event_id=raw_id,
                native_item_ref=ref,
                content=content,
                status=status,
                child_continues=continues,
            )
        ]

    def _on_text_delta(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        try:
            delta = _delta_decoder.decode(params)
        except msgspec.DecodeError:
            return [self._bad_params("delta", params, raw_id)]
        return [self.delta(delta.item_id, delta.delta, raw_id)]

    def delta(self, item_id: str, text: str, raw_id: str | None) -> ItemDelta:
        """The hot path: agent message, plan, command output and reasoning text deltas."""
        item = self._items.get(item_id)
        if item is not None:
            item.text.append(text)
        return ItemDelta(raw_event_id=raw_id, native_item_ref=item_id, text=text)

    def _on_summary_delta(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        try:
            delta = _delta_decoder.decode(params)
        except msgspec.DecodeError:
            return [self._bad_params("summary delta", params, raw_id)]
        item = self._items.get(delta.item_id)
        if item is not None:
            item.summary.append(delta.delta)
        return [
            ItemDelta(
                raw_event_id=raw_id,
                native_item_ref=delta.item_id,
                text=delta.delta,
                channel="summary",
            )
        ]

    def _on_summary_part(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        # A new summary section starts: separate it from the previous one.
        try:
            part = _delta_decoder.decode(params)
        except msgspec.DecodeError:
            return [self._bad_params("summary part", params, raw_id)]
        item = self._items.get(part.item_id)
        if item is None or not item.summary:
            return []
        item.summary.append("\n\n")
        return [
            ItemDelta(
                raw_event_id=raw_id, native_item_ref=part.item_id, text="\n\n", channel="summary"
            )
        ]

    def _on_progress(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        try:
            body = _tagged_decoder.decode(params)
        except msgspec.DecodeError:
            return [self._bad_params("progress", params, raw_id)]
        return [
            ItemDelta(
                raw_event_id=raw_id,
                native_item_ref=body.item_id,
                text=body.message,
                channel="progress",
            )
        ]

    def _on_terminal_input(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        try:
            body = _tagged_decoder.decode(params)
        except msgspec.DecodeError:
            return [self._bad_params("terminal input", params, raw_id)]
        return [
            ItemDelta(
                raw_event_id=raw_id, native_item_ref=body.item_id, text=body.stdin, channel="stdin"
            )
        ]

    def _on_patch_updated(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        ref = str(body.get("itemId", ""))
        content = item_content({"type": "fileChange", "changes": body.get("changes")})
        assert isinstance(content, FileChange)
        item = self._items.get(ref)
        if item is not None:
            item.content = content
        return [
            ItemDelta(
                raw_event_id=raw_id,
                native_item_ref=ref,
                text=content.diff_str or "",
                channel="patch",
            )
        ]

    def _on_plan_updated(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        steps = []
        plan = body.get("plan")
        for index, step in enumerate(plan if isinstance(plan, list) else []):
            step = _dict(step)
            steps.append(
                PlanStep(
                    id=str(index + 1),
                    text=str(step.get("step", "")),
                    status=_STEP_STATUS.get(str(step.get("status")), "pending"),
                )
            )
        explanation = body.get("explanation")
        return [
            PlanUpdated(
                raw_event_id=raw_id,
                kind="todo_list",
                steps=steps,
                markdown=explanation if isinstance(explanation, str) else None,
            )
        ]

    def _on_request_resolved(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        ref = str(body.get("requestId"))
        request = self._requests.pop(ref, None)
        return [
            RequestResolved(
                raw_event_id=raw_id,
                native_request_ref=ref,
                decision=request.answered if request is not None else None,
            )
        ]

    def _on_token_usage(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        usage = _dict(body.get("tokenUsage"))
        turn_id = _opt_str(body.get("turnId"))
        if turn_id is not None and turn_id in self._turns:
            self._usage[turn_id] = usage
        self._tokens.seen(_opt_str(body.get("threadId")), turn_id, usage, turn_id in self._turns)
        return [UsageUpdated(raw_event_id=raw_id, usage={"tokenUsage": usage, "turnId": turn_id})]

    def _on_rate_limits(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        return [UsageUpdated(raw_event_id=raw_id, usage={"rateLimits": body.get("rateLimits")})]

    def _on_error(self, params: msgspec.Raw, raw_id: str | None) -> list[ProviderEvent]:
        body = _dict(decode_params(params))
        error = _dict(body.get("error"))
        retry = body.get("willRetry") is True
        return [
            Diagnostic(
                raw_event_id=raw_id,
                level="warning" if retry else "error",
                code="provider_error",
                message=str(error.get("message", "codex reported an error")),
                detail=body,
            )
        ]

    # --- helpers -------------------------------------------------------------

    def _thread_refs(self, thread: dict[str, Any], raw_id: str | None) -> list[ProviderEvent]:
        ref = _opt_str(thread.get("id"))
        if ref is None or ref in self._threads:
            return []
        self._threads.add(ref)
        return [
            ThreadRefsLearned(
                raw_event_id=raw_id,
                native_thread_ref=ref,
                forked_from_native_thread_ref=_opt_str(thread.get("forkedFromId")),
            )
        ]

    def _diagnostic(
        self, method: str, params: msgspec.Raw, raw_id: str | None, level: Any, code: str
    ) -> Diagnostic:
        body = _dict(decode_params(params))
        message = body.get("message") or body.get("summary") or method
        return Diagnostic(
            raw_event_id=raw_id, level=level, code=code, message=str(message), detail=body
        )

    def _unmapped_item(self, method: str, item: dict[str, Any], raw_id: str | None) -> Diagnostic:
        kind = str(item.get("type"))
        return Diagnostic(
            raw_event_id=raw_id,
            level="info",
            code="unmapped_item",
            message=f"{method}: codex item type {kind} has no canonical content",
            detail={"method": method, "itemType": kind, "itemId": item.get("id")},
        )

    def _bad_params(self, what: str, params: msgspec.Raw, raw_id: str | None) -> Diagnostic:
        return Diagnostic(
            raw_event_id=raw_id,
            level="error",
            code="malformed_params",
            message=f"codex {what} notification with unusable params",
            detail={"head": bytes(params)[:200].decode("utf-8", "replace")},
        )


def _streamed(item: _OpenItem) -> ItemContent:
    """The content of an item we close ourselves: what was started plus what streamed."""
    content = item.content
    text = "".join(item.text)
    match content:
        case AssistantMessage():
            return AssistantMessage(text=content.text + text)
        case Reasoning():
            return Reasoning(
                text=content.text + text, summary=content.summary + "".join(item.summary)
            )
        case CommandExecution():
            return CommandExecution(
                input=content.input,
                output=content.output + text,
                exit_code=content.exit_code,
                cwd=content.cwd,
            )
        case Plan():
            return Plan(markdown=content.markdown + text)
        case _:
            return content


def resume_failure_reason(message: str) -> Any:
    """Classify a ``thread/resume`` error: owned_elsewhere, not_found or error."""
    text = message.lower()
    if "active writer" in text:
        return "owned_elsewhere"
    if any(
        marker in text
        for marker in (
            "not found",
            "no rollout",
            "does not exist",
            "unknown thread",
            "no such",
            "invalid thread id",
            "invalid session id",
        )
    ):
        return "not_found"
    return "error"


#: The methods ``CodexMapper.notification`` maps (its ``match``), diagnostics aside.
HANDLED_NOTIFICATIONS = frozenset(
    {
        "thread/started",
        "turn/started",
        "turn/completed",
        "turn/plan/updated",
        "item/started",
        "item/completed",
        "item/agentMessage/delta",
        "item/plan/delta",
        "item/reasoning/textDelta",
        "item/reasoning/summaryTextDelta",
        "item/reasoning/summaryPartAdded",
        "item/commandExecution/outputDelta",
        "item/commandExecution/terminalInteraction",
        "item/fileChange/outputDelta",
        "item/fileChange/patchUpdated",
        "item/mcpToolCall/progress",
        "serverRequest/resolved",
        "thread/tokenUsage/updated",
        "account/rateLimits/updated",
        "error",
    }
)

#: Everything the mapper turns into events (diagnostic ones included).
MAPPED_NOTIFICATIONS = HANDLED_NOTIFICATIONS | frozenset(DIAGNOSTIC_NOTIFICATIONS)
__all__ = [
    "CODEX_CAPABILITIES",
    "MAPPED_ITEM_TYPES",
    "MAPPED_NOTIFICATIONS",
    "CodexMapper",
    "OpenRequest",
]
