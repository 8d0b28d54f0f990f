"""Applies committed events to projection rows.

The projector is the single definition of what each event means for the read
models: the store runs it inside the append transaction, and ``t3orch check``
runs it again over the whole log in memory to prove the stored rows equal a
rebuild. It must therefore be a pure function of (rows, event).

What a streamed ``turn_item.delta`` does to its item is defined here too
(``apply_delta``, ``fold_item``): the store folds an item's pending text with it
on read, ingest folds its own decision's deltas with it, and the API's tracker of
streamed fields follows it, so all of them agree with the projection.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs
import msgspec

from t3orch.domain.message import ConversationMessage
from t3orch.domain.provider import JournalCommitted
from t3orch.domain.turn_items import AssistantMessage, TurnItem, TurnItemBase, UserMessage
from t3orch.domain.vocab import MessageRole
from t3orch.events import (
    CheckpointScopeUpserted,
    CheckpointUpserted,
    ContextHandoffUpserted,
    ContextTransferUpserted,
    EventEnvelope,
    EventPayload,
    NodeUpserted,
    PlanUpserted,
    ProviderDiagnostic,
    ProviderJournalCommitted,
    ProviderSessionUpserted,
    ProviderThreadUpserted,
    ProviderTurnUpserted,
    ProviderUsage,
    RunAttemptUpserted,
    RuntimeReconciled,
    RuntimeRequestUpserted,
    RunUpserted,
    ThreadUpserted,
    TurnItemDelta,
    TurnItemUpserted,
)
from t3orch.store.kinds import Chunk, Row

_encode = msgspec.json.encode

#: Which variant field a streamed delta appends to (its ``field`` when it names none).
DELTA_FIELD: dict[str, str] = {
    "assistant_message": "text",
    "reasoning": "text",
    "plan": "markdown",
    "command_execution": "output",
    "file_change": "diff_str",
    "file_search": "output",
    "web_search": "output",
}


def delta_target(item: TurnItemBase, field: str | None) -> str | None:
    """The text field a delta for ``field`` extends on ``item``, if it has one."""
    name = field or DELTA_FIELD.get(str(item.__struct_config__.tag))
    if name is None or name not in item.__struct_fields__:
        return None
    current = getattr(item, name)
    return name if current is None or isinstance(current, str) else None


def apply_delta(item: TurnItem, text: str, field: str | None, replace: bool) -> TurnItem:
    """``item`` with one streamed delta applied (fields it lacks keep the text in the log)."""
    name = delta_target(item, field)
    if name is None:
        return item
    value = text if replace else (getattr(item, name) or "") + text
    updated: TurnItem = msgspec.structs.replace(item, **{name: value})
    return updated


def fold_item(item: TurnItem, chunks: list[Chunk]) -> TurnItem:
    """``item`` with its pending streamed text applied: ``apply_delta`` of each chunk."""
    # Concatenate per field first: one struct copy, not one per chunk.
    parts: dict[str, list[str]] = {}
    for c in chunks:
        name = delta_target(item, c.field)
        if name is None:
            continue
        if c.replace or name not in parts:
            parts[name] = [c.text] if c.replace else [getattr(item, name) or "", c.text]
        else:
            parts[name].append(c.text)
    if parts:
        folded: TurnItem = msgspec.structs.replace(
            item, **{k: "".join(v) for k, v in parts.items()}
        )
        return folded
    return item


def fold_chunks(row: Row, chunks: list[Chunk]) -> Row:
    """A stored turn item row with its pending streamed text applied."""
    if not chunks:
        return row
    item = fold_item(row.decode(), chunks)
    folded: Row = attrs.evolve(row, body=_encode(item))
    return folded


class RowSink(Protocol):
    def append_chunk(self, chunk: Chunk) -> None:
        """Streamed text the item's row does not hold yet (the SQLite store keeps it in
        the log: the delta event is the chunk)."""

    def drop_chunks(self, item_id: str) -> None:
        """The item's row now holds all its text so far."""

    def put_row(self, row: Row) -> None:
        """Insert, or update everything but ``position`` (a row keeps its first one)."""


class Concerns(msgspec.Struct, frozen=True, kw_only=True):
    """The app ids an event concerns: indexed columns of the log (one per event)."""

    thread_id: str | None = None
    run_id: str | None = None
    node_id: str | None = None
    provider_session_id: str | None = None


def concerns(payload: EventPayload) -> Concerns:
    # Cases are tried in order: the streamed kinds (most of a busy log) come first.
    match payload:
        case TurnItemDelta(thread_id=t):
            return Concerns(thread_id=t)
        case TurnItemUpserted(item=i):
            return Concerns(thread_id=i.thread_id, run_id=i.run_id, node_id=i.node_id)
        case ThreadUpserted(thread=t):
            return Concerns(thread_id=t.id)
        case RunUpserted(run=r):
            return Concerns(thread_id=r.thread_id, run_id=r.id, node_id=r.root_node_id)
        case RunAttemptUpserted(attempt=a):
            return Concerns(thread_id=a.thread_id, run_id=a.run_id, node_id=a.root_node_id)
        case NodeUpserted(node=n):
            return Concerns(thread_id=n.thread_id, run_id=n.run_id, node_id=n.id)
        case ProviderSessionUpserted(session=s):
            return Concerns(provider_session_id=s.id)
        case ProviderThreadUpserted(provider_thread=p):
            return Concerns(thread_id=p.app_thread_id, provider_session_id=p.provider_session_id)
        case ProviderTurnUpserted(turn=t):
            return Concerns(node_id=t.node_id)
        case RuntimeRequestUpserted(request=r):
            return Concerns(thread_id=r.thread_id, node_id=r.node_id)
        case PlanUpserted(plan=p):
            return Concerns(thread_id=p.thread_id, run_id=p.run_id, node_id=p.node_id)
        case CheckpointScopeUpserted(scope=s):
            return Concerns(thread_id=s.thread_id, run_id=s.run_id, node_id=s.node_id)
        case CheckpointUpserted(checkpoint=c):
            return Concerns(thread_id=c.thread_id, run_id=c.run_id, node_id=c.node_id)
        case ContextTransferUpserted(transfer=t):
            return Concerns(thread_id=t.target_thread_id)
        case ContextHandoffUpserted(handoff=h):
            return Concerns(thread_id=h.thread_id, run_id=h.target_run_id)
        case ProviderUsage(provider_session_id=s) | ProviderJournalCommitted(provider_session_id=s):
            return Concerns(provider_session_id=s)
        case ProviderDiagnostic(provider_session_id=s):
            return Concerns(provider_session_id=s)
        case RuntimeReconciled():
            return Concerns()
    raise AssertionError(f"unhandled payload {type(payload).__name__}")


def _upsert(
    sink: RowSink, seq: int, kind: str, id: str, thread_id: str | None, status: str | None, v: Any
) -> None:
    # ``seq`` is the position only on first insert: the sink keeps a row's first
    # position. The row is written by ``seq``: its updated_seq, as the store keeps it.
    sink.put_row(Row(kind, id, thread_id, seq, status, _encode(v), seq))


def _project_message(sink: RowSink, seq: int, item: TurnItem) -> None:
    # Messages are derived from message turn items: one source of streamed text.
    if not isinstance(item, (UserMessage, AssistantMessage)):
        return
    role: MessageRole = "user" if isinstance(item, UserMessage) else "assistant"
    message = ConversationMessage(
        id=item.message_id,
        thread_id=item.thread_id,
        run_id=item.run_id,
        node_id=item.node_id,
        role=role,
        text=item.text,
        attachments=[],
        streaming=item.status in ("pending", "running"),
        created_at=item.created_at,
        updated_at=item.updated_at,
    )
    if not item.hidden:
        _upsert(sink, seq, "message", message.id, message.thread_id, role, message)


def apply(env: EventEnvelope, sink: RowSink) -> None:
    seq = env.sequence
    match env.payload:
        case TurnItemDelta(item_id=item_id, text=text, field=field, replace=replace):
            # Appended, not folded: readers fold pending chunks into the item (see
            # fold_item); the item's next upsert carries the text.
            sink.append_chunk(Chunk(seq, item_id, field, replace, text))
        case TurnItemUpserted(item=i):
            # Ingest builds every upsert from the folded item: its chunks are in it.
            _upsert(sink, seq, "turn_item", i.id, i.thread_id, i.status, i)
            sink.drop_chunks(i.id)
            _project_message(sink, seq, i)
        case ThreadUpserted(thread=t):
            status = "deleted" if t.deleted_at else "archived" if t.archived_at else "active"
            _upsert(sink, seq, "thread", t.id, t.id, status, t)
        case RunUpserted(run=r):
            _upsert(sink, seq, "run", r.id, r.thread_id, r.status, r)
        case RunAttemptUpserted(attempt=a):
            _upsert(sink, seq, "run_attempt", a.id, a.thread_id, a.status, a)
        case NodeUpserted(node=n):
            _upsert(sink, seq, "node", n.id, n.thread_id, n.status, n)
        case ProviderSessionUpserted(session=s):
            _upsert(sink, seq, "provider_session", s.id, None, s.status, s)
        case ProviderThreadUpserted(provider_thread=p):
            _upsert(sink, seq, "provider_thread", p.id, p.app_thread_id, p.status, p)
        case ProviderTurnUpserted(turn=t):
            _upsert(sink, seq, "provider_turn", t.id, None, t.status, t)
        case RuntimeRequestUpserted(request=r):
            _upsert(sink, seq, "runtime_request", r.id, r.thread_id, r.status, r)
        case PlanUpserted(plan=p):
            _upsert(sink, seq, "plan", p.id, p.thread_id, p.status, p)
        case CheckpointScopeUpserted(scope=s):
            _upsert(sink, seq, "checkpoint_scope", s.id, s.thread_id, s.kind, s)
        case CheckpointUpserted(checkpoint=c):
            _upsert(sink, seq, "checkpoint", c.id, c.thread_id, c.status, c)
        case ContextTransferUpserted(transfer=t):
            _upsert(sink, seq, "context_transfer", t.id, t.target_thread_id, t.status, t)
        case ContextHandoffUpserted(handoff=h):
            _upsert(sink, seq, "context_handoff", h.id, h.thread_id, h.status, h)
        case ProviderUsage(provider_session_id=s, usage=u):
            _upsert(sink, seq, "usage", s, None, None, u)
        case ProviderJournalCommitted(provider_session_id=s, holder_id=h, offset=o):
            _upsert(sink, seq, "journal", s, None, None, JournalCommitted(holder_id=h, offset=o))
        case ProviderDiagnostic() | RuntimeReconciled():
            pass
