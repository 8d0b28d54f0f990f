"""Binds canonical provider events to the app graph and decides the V2 events."""

from __future__ import annotations

import functools
import re
from typing import Any, Literal, NamedTuple

import msgspec

from t3orch.domain.base import ProviderRef
from t3orch.domain.node import ExecutionNode
from t3orch.domain.plan import PlanArtifact
from t3orch.domain.request import LiveCapability, RuntimeRequest
from t3orch.domain.turn_items import (
    ApprovalRequest,
    AssistantMessage,
    ItemContent,
    Plan,
    Subagent,
    TurnItem,
    UserMessage,
)
from t3orch.domain.vocab import (
    ATTEMPT_TERMINAL,
    NODE_TERMINAL,
    RUN_TERMINAL,
    TURN_TERMINAL,
    NodeKind,
    TurnItemStatus,
)
from t3orch.events import (
    Correlation,
    ProviderDiagnostic,
    ProviderJournalCommitted,
    ProviderUsage,
)
from t3orch.ids import MessageId, NodeId, PlanId, RuntimeRequestId, TurnItemId, derived_id
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.changes import Changes
from t3orch.ingest.settle import close_turn, release_session
from t3orch.ingest.subagents import (
    open_subagent,
    record_result,
    settle_subagent,
    subagent_owner,
)
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    JournalOffset,
    PlanUpdated,
    ProviderEvent,
    RequestCancelled,
    RequestOpened,
    RequestResolved,
    ResumeFailed,
    RuntimeExited,
    SessionReady,
    SubagentEnded,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
    UsageUpdated,
)
from t3orch.store.interface import Decision, StateView

_NODE_KIND: dict[str, NodeKind] = {
    "assistant_message": "assistant_message",
    "reasoning": "reasoning",
    "plan": "plan",
    "user_message": "system",
    "compaction": "system",
    "subagent": "subagent",
}


#: Delta channel → (item field, replaces rather than extends). Unknown channels
#: extend the item's main text; fields an item lacks are kept in the log only.
DELTA_CHANNELS: dict[str | None, tuple[str | None, bool]] = {
    None: (None, False),
    "summary": ("summary", False),
    "progress": (None, False),
    "stdin": (None, False),
    "patch": ("diff_str", True),
}


def item_ids(turn: TurnBinding, native_item_ref: str) -> tuple[TurnItemId, NodeId]:
    return _item_ids(turn.provider_turn_id, native_item_ref)


@functools.lru_cache(maxsize=4096)
def _item_ids(provider_turn_id: str, native_item_ref: str) -> tuple[TurnItemId, NodeId]:
    # Every streamed delta names its item: two hashes per delta showed in the
    # store's profile, and a streaming item's ids are asked for again and again.
    return (
        derived_id(TurnItemId, provider_turn_id, native_item_ref),
        derived_id(NodeId, provider_turn_id, native_item_ref),
    )


def request_id(turn: TurnBinding, native_request_ref: str) -> RuntimeRequestId:
    return derived_id(RuntimeRequestId, turn.provider_turn_id, "request", native_request_ref)


def ingest(view: StateView, b: SessionBinding, event: ProviderEvent) -> Decision:
    """Decide the V2 events for one canonical provider event (run inside the writer)."""
    corr = _correlation(b, event)
    ch = Changes(view, corr)
    _dispatch(ch, b, event)
    return Decision(events=ch.drafts)


def ingest_many(view: StateView, b: SessionBinding, events: list[ProviderEvent]) -> Decision:
    """One decision for a batch: later events see what earlier ones changed."""
    ch = Changes(view)
    for event in events:
        if type(event) is ItemDelta and not b.lingering:
            # Most events: no dispatch (a class pattern is an isinstance test) and the
            # correlation from the only refs a delta has.
            ch.correlation = Correlation(
                provider=b.provider,
                native_item_ref=event.native_item_ref,
                raw_event_id=event.raw_event_id,  # type: ignore[arg-type]
            )
            _item_delta(ch, b, event)
            continue
        ch.correlation = _correlation(b, event)
        _dispatch(ch, b, event)
    return Decision(events=ch.drafts)


class IngestBatch:
    """``ingest_many`` of one session's queued events, as a writer submission (a
    decide the writer calls on its thread; it holds the events it was given)."""

    __slots__ = ("binding", "events")

    def __init__(self, binding: SessionBinding, events: list[ProviderEvent]) -> None:
        self.binding = binding
        self.events = events

    def __call__(self, view: StateView) -> Decision:
        return ingest_many(view, self.binding, self.events)


def _correlation(b: SessionBinding, event: ProviderEvent) -> Correlation:
    return Correlation(
        provider=b.provider,
        native_turn_ref=getattr(event, "native_turn_ref", None),
        native_item_ref=getattr(event, "native_item_ref", None),
        native_request_ref=getattr(event, "native_request_ref", None),
        native_thread_ref=getattr(event, "native_thread_ref", None),
        raw_event_id=event.raw_event_id,  # type: ignore[arg-type]
    )


def _dispatch(ch: Changes, b: SessionBinding, event: ProviderEvent) -> None:
    if b.lingering:
        b = _bound(ch, b, event)
    match event:
        # Cases are tried in order: the streamed delta (most events) comes first.
        case ItemDelta():
            _item_delta(ch, b, event)
        case SessionReady():
            _session_ready(ch, b, event)
        case ThreadRefsLearned():
            _thread_refs(ch, b, event)
        case TurnStarted():
            _turn_started(ch, b, event)
        case ItemStarted():
            _item_started(ch, b, event)
        case ItemCompleted():
            _item_completed(ch, b, event)
        case SubagentEnded():
            _subagent_ended(ch, b, event)
        case RequestOpened():
            _request_opened(ch, b, event)
        case RequestResolved():
            _request_closed(ch, b, event.native_request_ref, "resolved", event.decision)
        case RequestCancelled():
            _request_closed(ch, b, event.native_request_ref, "cancelled", None)
        case PlanUpdated():
            _plan_updated(ch, b, event)
        case UsageUpdated():
            ch.emit(ProviderUsage(provider_session_id=b.provider_session_id, usage=event.usage))
        case JournalOffset(holder_id=holder, offset=offset):
            ch.emit(
                ProviderJournalCommitted(
                    provider_session_id=b.provider_session_id, holder_id=holder, offset=offset
                )
            )
        case Diagnostic():
            ch.emit(
                ProviderDiagnostic(
                    provider_session_id=b.provider_session_id,
                    level=event.level,
                    code=event.code,
                    message=event.message,
                    detail=event.detail,
                )
            )
        case ResumeFailed():
            ch.emit(
                ProviderDiagnostic(
                    provider_session_id=b.provider_session_id,
                    level="warning",
                    code=f"resume_failed.{event.reason}",
                    message=event.message,
                    detail={"nativeThreadRef": event.native_thread_ref},
                )
            )
        case TurnCompleted():
            if b.turn is not None:
                t = b.turn
                keep = frozenset(item_ids(t, ref)[1] for ref in event.continuing)
                close_turn(
                    ch,
                    b,
                    t,
                    event.status,
                    event.error,
                    event.native_turn_ref,
                    keep,
                    usage=event.token_usage,
                )
            if event.usage:
                ch.emit(ProviderUsage(provider_session_id=b.provider_session_id, usage=event.usage))
        case RuntimeExited():
            summary = describe_exit(event)
            release_session(
                ch,
                b,
                status=summary.status,
                # The run says why too, stderr included: `show` prints it.
                reason=summary.error or f"provider {summary.description}",
                last_error=summary.error,
                exit_description=summary.description,
            )


def _bound(ch: Changes, b: SessionBinding, event: ProviderEvent) -> SessionBinding:
    """A lingering subagent's event belongs to the ended turn that spawned it.

    Its ids derive from that turn (``item_ids``), so it is found by the node or
    item it names; anything else stays with the active turn.
    """
    if not b.lingering:
        return b
    match event:
        case ItemStarted(parent_native_item_ref=str() as ref) | SubagentEnded(native_item_ref=ref):
            kind, index = "node", 1
        case ItemDelta(native_item_ref=ref) | ItemCompleted(native_item_ref=ref):
            kind, index = "turn_item", 0
        case _:
            return b
    for ended in b.lingering:
        if ch.exists(kind, item_ids(ended, ref)[index]):
            return b.with_turn(ended)
    return b


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ExitSummary(NamedTuple):
    """How a runtime ended, as the session row and the daemon's log say it."""

    #: The session's status after it.
    status: Literal["stopped", "error"]
    #: ``exited with code 1``, ``killed by signal 9``, ``did not start``.
    description: str
    #: The lastError: ``provider exited with code 1; stderr: fatal: no API key configured``
    #: (None for a clean exit).
    error: str | None
    #: The last lines of its stderr, joined with `` | `` ("" when it wrote none).
    stderr: str


def describe_exit(event: RuntimeExited) -> ExitSummary:
    """How ``event``'s runtime ended, with the last lines of its (redacted) stderr."""
    tail = _last_lines(event.stderr_tail)
    also = f"; stderr: {tail}" if tail else ""
    if event.error is not None:
        return ExitSummary("error", "did not start", event.error + also, tail)
    if event.code == 0 and event.signal is None:
        return ExitSummary("stopped", "exited with code 0", None, tail)
    desc = (
        f"killed by signal {event.signal}"
        if event.signal is not None
        else f"exited with code {event.code}"
    )
    return ExitSummary("error", desc, f"provider {desc}{also}", tail)


def _last_lines(stderr: str, lines: int = 3, limit: int = 500) -> str:
    """The end of a provider's stderr, without terminal colours, for a readable lastError."""
    clean = [ln.strip() for ln in _ANSI.sub("", stderr).splitlines() if ln.strip()]
    return " | ".join(clean[-lines:])[-limit:]


def _session_ready(ch: Changes, b: SessionBinding, ev: SessionReady) -> None:
    s = ch.get("provider_session", b.provider_session_id)
    if s is None:
        return
    status = "ready" if s.status in ("starting", "stopped", "error") else s.status
    ch.put(
        "provider_session",
        msgspec.structs.replace(
            s,
            status=status,
            capabilities=ev.capabilities,
            model=ev.model or s.model,
            updated_at=ch.now(),
            last_error=None if status == "ready" else s.last_error,
        ),
    )


def _thread_refs(ch: Changes, b: SessionBinding, ev: ThreadRefsLearned) -> None:
    if b.provider_thread_id is None:
        return
    pt = ch.get("provider_thread", b.provider_thread_id)
    if pt is None:
        return
    head = (
        ProviderRef(value=ev.native_conversation_head_ref)
        if ev.native_conversation_head_ref
        else pt.native_conversation_head_ref
    )
    changed_thread = pt.native_thread_ref != ev.native_thread_ref
    ch.put(
        "provider_thread",
        msgspec.structs.replace(
            pt,
            native_thread_ref=ev.native_thread_ref,
            native_conversation_head_ref=head,
            provider_session_id=b.provider_session_id,
            # A new native thread must earn trust again by completing a turn.
            resume_ref_confirmed=False if changed_thread else pt.resume_ref_confirmed,
            updated_at=ch.now(),
        ),
    )


def _turn_started(ch: Changes, b: SessionBinding, ev: TurnStarted) -> None:
    t = b.turn
    if t is None:
        return
    now = ch.now()
    turn = ch.get("provider_turn", t.provider_turn_id)
    if turn is not None and turn.status not in TURN_TERMINAL:
        ch.put(
            "provider_turn",
            msgspec.structs.replace(
                turn,
                status="running",
                native_turn_ref=ev.native_turn_ref or turn.native_turn_ref,
                started_at=turn.started_at or now,
            ),
        )
    att = ch.get("run_attempt", t.attempt_id)
    if att is not None and att.status not in ATTEMPT_TERMINAL:
        ch.put(
            "run_attempt",
            msgspec.structs.replace(att, status="running", started_at=att.started_at or now),
        )
    run = ch.get("run", t.run_id)
    if run is not None and run.status in ("queued", "starting"):
        ch.put(
            "run", msgspec.structs.replace(run, status="running", started_at=run.started_at or now)
        )
    node = ch.get("node", t.root_node_id)
    if node is not None and node.status not in NODE_TERMINAL:
        ch.put(
            "node",
            msgspec.structs.replace(node, status="running", started_at=node.started_at or now),
        )
    if b.provider_thread_id is not None:
        pt = ch.get("provider_thread", b.provider_thread_id)
        if pt is not None and pt.status != "active":
            ch.put("provider_thread", msgspec.structs.replace(pt, status="active", updated_at=now))
    _session_status(ch, b, "running")


def _session_status(ch: Changes, b: SessionBinding, status: str) -> None:
    s = ch.get("provider_session", b.provider_session_id)
    if s is not None and s.status != status and s.status not in ("stopped", "error"):
        ch.put(
            "provider_session",
            msgspec.structs.replace(
                s, status=status, updated_at=ch.now(), last_activity_at=ch.now()
            ),
        )


def _bind_item(
    ch: Changes,
    b: SessionBinding,
    t: TurnBinding,
    ref: str,
    content: ItemContent,
    status: TurnItemStatus,
    hidden: bool = False,
) -> ItemContent:
    """The adapter's item bound to the app graph: the same variant, with its refs set."""
    item_id, node_id = item_ids(t, ref)
    own: dict[str, MessageId | PlanId] = {}
    tp = type(content)
    if tp is UserMessage or tp is AssistantMessage:
        own["message_id"] = derived_id(MessageId, item_id)
    elif tp is Plan:
        own["plan_id"] = derived_id(PlanId, item_id)
    now = ch.now()
    return msgspec.structs.replace(
        content,
        id=item_id,
        thread_id=b.thread_id,
        run_id=t.run_id,
        node_id=node_id,
        provider_turn_id=t.provider_turn_id,
        native_item_ref=ProviderRef(value=ref, strength="scoped"),
        status=status,
        created_at=now,
        updated_at=now,
        # The provider's echo of our input: the app's own user_message item is canonical.
        hidden=hidden or tp is UserMessage,
        **own,
    )


def _item_started(ch: Changes, b: SessionBinding, ev: ItemStarted) -> None:
    t = b.turn
    if t is None or b.thread_id is None:
        _orphan(ch, b, "item_outside_turn", f"item {ev.native_item_ref} started outside a turn")
        return
    item_id, node_id = item_ids(t, ev.native_item_ref)
    parent = t.root_node_id
    if ev.parent_native_item_ref:
        parent = item_ids(t, ev.parent_native_item_ref)[1]
    # Work under a subagent is the subagent's: hidden, on its provider thread.
    owner = subagent_owner(ch, parent) if parent != t.root_node_id else None
    if ch.get("node", node_id) is None:
        provider_thread_id = owner.provider_thread_id if owner else b.provider_thread_id
        scope_id = None
        if isinstance(ev.content, Subagent):
            provider_thread_id, scope_id = open_subagent(
                ch, b, t, node_id, item_id, ev.content, owner
            )
        ch.put(
            "node",
            ExecutionNode(
                id=node_id,
                thread_id=b.thread_id,
                run_id=t.run_id,
                parent_node_id=parent,
                root_node_id=t.root_node_id,
                kind=_NODE_KIND.get(
                    ev.content.__struct_config__.tag,  # type: ignore[arg-type]
                    "tool_call",
                ),
                status="running",
                counts_for_run=False,
                provider_thread_id=provider_thread_id,
                provider_turn_id=t.provider_turn_id,
                native_item_ref=ProviderRef(value=ev.native_item_ref, strength="scoped"),
                runtime_request_id=None,
                checkpoint_scope_id=scope_id,
                started_at=ch.now(),
            ),
        )
    if ch.get("turn_item", item_id) is None:
        ch.put(
            "turn_item",
            _bind_item(
                ch, b, t, ev.native_item_ref, ev.content, "running", hidden=owner is not None
            ),
        )


def _item_delta(ch: Changes, b: SessionBinding, ev: ItemDelta) -> None:
    t = b.turn
    if t is None or b.thread_id is None:
        _orphan(ch, b, "delta_outside_turn", f"delta for {ev.native_item_ref} outside a turn")
        return
    item_id, _ = item_ids(t, ev.native_item_ref)
    if not ch.exists("turn_item", item_id):
        _orphan(
            ch,
            b,
            "delta_before_start",
            f"delta for item {ev.native_item_ref} that never started; text kept in detail",
            {"text": ev.text[:4096]},
        )
        return
    field, replace = DELTA_CHANNELS.get(ev.channel, (None, False))
    ch.delta(item_id, b.thread_id, ev.text, field, replace)


def _item_completed(ch: Changes, b: SessionBinding, ev: ItemCompleted) -> None:
    t = b.turn
    if t is None or b.thread_id is None:
        _orphan(ch, b, "item_outside_turn", f"item {ev.native_item_ref} completed outside a turn")
        return
    item_id, node_id = item_ids(t, ev.native_item_ref)
    if ch.get("node", node_id) is None:
        _item_started(ch, b, ItemStarted(native_item_ref=ev.native_item_ref, content=ev.content))
    existing = ch.get_unfolded("turn_item", item_id)
    done = _bind_item(ch, b, t, ev.native_item_ref, ev.content, ev.status)
    if existing is not None:
        if _lacks_text(existing, done):
            # Only then is the text that streamed needed (folded from the log): a
            # completion carrying its text supersedes it.
            existing = ch.get("turn_item", item_id) or existing
        done = msgspec.structs.replace(
            done,
            created_at=existing.created_at,
            hidden=existing.hidden,
            **_keep_streamed_text(existing, done),
        )
    # Deltas stream into the stored row; the completed value supersedes them.
    ch.put("turn_item", done)
    node = ch.get("node", node_id)
    if node is not None and node.status not in NODE_TERMINAL:
        node_status = {
            "completed": "completed",
            "failed": "failed",
            "declined": "cancelled",
            "interrupted": "interrupted",
            "cancelled": "cancelled",
        }.get(ev.status, "completed")
        if ev.child_continues and node.kind == "subagent" and node_status == "completed":
            # The call returned, the child works on: the node ends with SubagentEnded.
            settle_subagent(ch, node, _subagent_content(ev), ended=False)
            return
        ch.put("node", msgspec.structs.replace(node, status=node_status, completed_at=ch.now()))
        # A subagent ending ends only itself: never its parent, never the run.
        settle_subagent(ch, node, ev.content if isinstance(ev.content, Subagent) else None)
        if node.kind == "subagent" and node_status == "completed":
            record_result(ch, b, t, node, item_id)


def _subagent_content(ev: ItemCompleted) -> Subagent | None:
    return ev.content if isinstance(ev.content, Subagent) else None


def _subagent_ended(ch: Changes, b: SessionBinding, ev: SubagentEnded) -> None:
    t = b.turn
    if t is None or b.thread_id is None:
        _orphan(ch, b, "subagent_end_outside_turn", f"subagent {ev.native_item_ref} ended")
        return
    item_id, node_id = item_ids(t, ev.native_item_ref)
    node = ch.get("node", node_id)
    if node is None or node.kind != "subagent" or node.status in NODE_TERMINAL:
        # Already settled: its parent's turn was interrupted, or the runtime exited.
        return
    ended = msgspec.structs.replace(node, status=ev.status, completed_at=ch.now())
    ch.put("node", ended)
    settle_subagent(ch, ended)
    if ev.status == "completed":
        record_result(ch, b, t, ended, item_id)


_STREAMED_TEXT = ("text", "output")


def _lacks_text(existing: TurnItem, done: TurnItem) -> bool:
    """``done`` has no value for a text field ``existing`` has (see _keep_streamed_text)."""
    fields = existing.__struct_fields__
    return any(f in fields and not getattr(done, f, None) for f in _STREAMED_TEXT)


def _keep_streamed_text(existing: TurnItem, done: TurnItem) -> dict[str, Any]:
    """A completion without text keeps what streamed (Claude folds blocks per frame)."""
    out: dict[str, Any] = {}
    for field in _STREAMED_TEXT:
        old = getattr(existing, field, None)
        new = getattr(done, field, None)
        if isinstance(old, str) and old and not new:
            out[field] = old
    return out


def _request_opened(ch: Changes, b: SessionBinding, ev: RequestOpened) -> None:
    t = b.turn
    if t is None or b.thread_id is None:
        _orphan(
            ch,
            b,
            "request_outside_turn",
            f"{ev.kind} request {ev.native_request_ref} arrived outside a turn",
        )
        return
    rid = request_id(t, ev.native_request_ref)
    if ch.get("runtime_request", rid) is not None:
        return
    node_id = derived_id(NodeId, rid)
    parent = item_ids(t, ev.native_item_ref)[1] if ev.native_item_ref else t.root_node_id
    if ch.get("node", parent) is None:
        parent = t.root_node_id
    now = ch.now()
    kind: NodeKind = "user_input_request" if ev.kind == "user_input" else "approval_request"
    ch.put(
        "node",
        ExecutionNode(
            id=node_id,
            thread_id=b.thread_id,
            run_id=t.run_id,
            parent_node_id=parent,
            root_node_id=t.root_node_id,
            kind=kind,
            status="waiting",
            counts_for_run=False,
            provider_thread_id=b.provider_thread_id,
            provider_turn_id=t.provider_turn_id,
            native_item_ref=None,
            runtime_request_id=rid,
            checkpoint_scope_id=None,
            started_at=now,
        ),
    )
    # The adapter's one-line summary (the command, the path) is what a list of pending
    # requests shows; the native detail keeps it nested (``params.command``, ``input``).
    detail = {"summary": ev.summary, **ev.detail} if ev.summary else dict(ev.detail)
    if ev.questions:
        detail["questions"] = msgspec.to_builtins(ev.questions)
    ch.put(
        "runtime_request",
        RuntimeRequest(
            id=rid,
            node_id=node_id,
            thread_id=b.thread_id,
            provider_turn_id=t.provider_turn_id,
            native_request_ref=ev.native_request_ref,
            kind=ev.kind,
            status="pending",
            response_capability=LiveCapability(provider_session_id=b.provider_session_id),
            created_at=now,
            detail=detail,
            available_decisions=list(ev.available_decisions),
        ),
    )
    ch.put(
        "turn_item",
        ApprovalRequest(
            id=derived_id(TurnItemId, rid),
            thread_id=b.thread_id,
            run_id=t.run_id,
            node_id=node_id,
            provider_turn_id=t.provider_turn_id,
            native_item_ref=None,
            status="waiting",
            created_at=now,
            updated_at=now,
            request_id=rid,
            request_kind=ev.kind,
            summary=ev.summary or ev.kind,
        ),
    )
    run = ch.get("run", t.run_id)
    if run is not None and run.status not in RUN_TERMINAL:
        ch.put("run", msgspec.structs.replace(run, status="waiting"))
    _session_status(ch, b, "waiting")


def _request_closed(
    ch: Changes, b: SessionBinding, native_ref: str, status: str, decision: str | None
) -> None:
    t = b.turn
    if t is None:
        return
    rid = request_id(t, native_ref)
    req = ch.get("runtime_request", rid)
    if req is None or req.status != "pending":
        return
    now = ch.now()
    ch.put(
        "runtime_request",
        msgspec.structs.replace(
            req, status=status, resolved_at=now, decision=decision or req.decision
        ),
    )
    item = ch.get("turn_item", derived_id(TurnItemId, rid))
    if item is not None:
        item_status = (
            "cancelled"
            if status == "cancelled"
            else (
                "declined"
                if (decision or req.decision or "").startswith(("decline", "deny", "cancel"))
                else "completed"
            )
        )
        ch.put(
            "turn_item",
            msgspec.structs.replace(
                item, status=item_status, decision=decision or req.decision, updated_at=now
            ),
        )
    node = ch.get("node", req.node_id)
    if node is not None and node.status not in NODE_TERMINAL:
        ch.put(
            "node",
            msgspec.structs.replace(
                node, status="cancelled" if status == "cancelled" else "completed", completed_at=now
            ),
        )
    if b.thread_id is not None:
        still_pending = [
            r
            for r in ch.select_by_status("runtime_request", ("pending",), thread_id=b.thread_id)
            if r.provider_turn_id == t.provider_turn_id
        ]
        run = ch.get("run", t.run_id)
        if not still_pending and run is not None and run.status == "waiting":
            ch.put("run", msgspec.structs.replace(run, status="running"))
            _session_status(ch, b, "running")


def _plan_updated(ch: Changes, b: SessionBinding, ev: PlanUpdated) -> None:
    t = b.turn
    if t is None or b.thread_id is None:
        _orphan(ch, b, "plan_outside_turn", "plan update outside a turn")
        return
    key = ev.native_item_ref or ev.kind
    plan_id = derived_id(PlanId, t.provider_turn_id, key)
    item_id, node_id = item_ids(t, f"plan:{key}")
    now = ch.now()
    if ch.get("node", node_id) is None:
        ch.put(
            "node",
            ExecutionNode(
                id=node_id,
                thread_id=b.thread_id,
                run_id=t.run_id,
                parent_node_id=t.root_node_id,
                root_node_id=t.root_node_id,
                kind="todo_list" if ev.kind == "todo_list" else "plan",
                status="running",
                counts_for_run=False,
                provider_thread_id=b.provider_thread_id,
                provider_turn_id=t.provider_turn_id,
                native_item_ref=None,
                runtime_request_id=None,
                checkpoint_scope_id=None,
                started_at=now,
            ),
        )
    done = bool(ev.steps) and all(s.status == "completed" for s in ev.steps)
    ch.put(
        "plan",
        PlanArtifact(
            id=plan_id,
            thread_id=b.thread_id,
            run_id=t.run_id,
            node_id=node_id,
            kind=ev.kind,
            status="completed" if done else "active",
            markdown=ev.markdown,
            steps=list(ev.steps),
        ),
    )
    markdown = ev.markdown or "\n".join(
        f"- [{'x' if s.status == 'completed' else ' '}] {s.text}" for s in ev.steps
    )
    existing = ch.get("turn_item", item_id)
    ch.put(
        "turn_item",
        Plan(
            id=item_id,
            thread_id=b.thread_id,
            run_id=t.run_id,
            node_id=node_id,
            provider_turn_id=t.provider_turn_id,
            native_item_ref=None,
            status="completed" if done else "running",
            created_at=existing.created_at if existing else now,
            updated_at=now,
            plan_id=plan_id,
            markdown=markdown,
        ),
    )


def _orphan(
    ch: Changes, b: SessionBinding, code: str, message: str, detail: dict[str, Any] | None = None
) -> None:
    ch.emit(
        ProviderDiagnostic(
            provider_session_id=b.provider_session_id,
            level="warning",
            code=code,
            message=message,
            detail=detail or {},
        )
    )


__all__ = ["IngestBatch", "ingest", "ingest_many", "item_ids", "request_id"]
