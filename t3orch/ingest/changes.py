"""A decision's working set: reads see this decision's own pending upserts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from t3orch.domain.turn_items import unbound_fields
from t3orch.events import (
    CheckpointScopeUpserted,
    CheckpointUpserted,
    ContextHandoffUpserted,
    ContextTransferUpserted,
    Correlation,
    EventDraft,
    EventPayload,
    NodeUpserted,
    PlanUpserted,
    ProviderSessionUpserted,
    ProviderThreadUpserted,
    ProviderTurnUpserted,
    RunAttemptUpserted,
    RuntimeRequestUpserted,
    RunUpserted,
    ThreadUpserted,
    TurnItemDelta,
    TurnItemUpserted,
)
from t3orch.ids import ThreadId, TurnItemId
from t3orch.projections.projector import apply_delta
from t3orch.store.interface import StateView
from t3orch.store.kinds import entity_of

_WRAP: dict[str, Any] = {
    "thread": lambda v: ThreadUpserted(thread=v),
    "run": lambda v: RunUpserted(run=v),
    "run_attempt": lambda v: RunAttemptUpserted(attempt=v),
    "node": lambda v: NodeUpserted(node=v),
    "provider_session": lambda v: ProviderSessionUpserted(session=v),
    "provider_thread": lambda v: ProviderThreadUpserted(provider_thread=v),
    "provider_turn": lambda v: ProviderTurnUpserted(turn=v),
    "runtime_request": lambda v: RuntimeRequestUpserted(request=v),
    "turn_item": lambda v: TurnItemUpserted(item=v),
    "plan": lambda v: PlanUpserted(plan=v),
    "checkpoint_scope": lambda v: CheckpointScopeUpserted(scope=v),
    "context_transfer": lambda v: ContextTransferUpserted(transfer=v),
    "context_handoff": lambda v: ContextHandoffUpserted(handoff=v),
    "checkpoint": lambda v: CheckpointUpserted(checkpoint=v),
}


class Changes:
    def __init__(self, view: StateView, correlation: Correlation | None = None) -> None:
        self.view = view
        self.correlation = correlation or Correlation()
        self._overlay: dict[tuple[str, str], Any] = {}
        self._read: dict[tuple[str, str], Any] = {}
        self._unfolded: dict[tuple[str, str], Any] = {}
        self._deltas: dict[str, list[tuple[str, str | None, bool]]] = {}
        #: Rows seen to exist (rows are never deleted): each delta asks for its item.
        self._existing: set[tuple[str, str]] = set()
        self.drafts: list[EventDraft] = []

    def now(self) -> str:
        return self.view.now()

    def exists(self, kind: str, id: str) -> bool:
        key = (kind, id)
        if key in self._existing:
            return True
        if (
            key in self._overlay
            or self._read.get(key) is not None
            or self.view.exists(entity_of(kind), id)
        ):
            self._existing.add(key)
            return True
        return False

    def get(self, kind: str, id: str) -> Any | None:
        key = (kind, id)
        pending = self._deltas.pop(id, None) if kind == "turn_item" else None
        if pending:
            item = self.get(kind, id)
            if item is not None:
                for text, field, replace in pending:
                    item = apply_delta(item, text, field, replace)
                self._overlay[key] = item
            return item
        hit = self._overlay.get(key)
        if hit is not None:
            return hit
        # Stored state cannot change under a decision except through its own puts.
        if key not in self._read:
            self._read[key] = self.view.get(entity_of(kind), id)
        return self._read[key]

    def get_unfolded(self, kind: str, id: str) -> Any | None:
        """What ``get`` returns, except text streamed into a turn item that neither
        this decision nor the stored row has folded in yet: for reads of the other
        fields, without the cost of folding (reading the item's deltas back)."""
        key = (kind, id)
        hit = self._overlay.get(key)
        if hit is not None:
            return hit
        if key in self._read:
            return self._read[key]
        if key not in self._unfolded:
            self._unfolded[key] = self.view.get_unfolded(entity_of(kind), id)
        return self._unfolded[key]

    def select(self, kind: str, *, thread_id: str) -> list[Any]:
        return self._with_overlay(
            kind, thread_id, self.view.select(entity_of(kind), thread_id=thread_id)
        )

    def select_by_status(self, kind: str, statuses: Sequence[str], *, thread_id: str) -> list[Any]:
        """A thread's rows with one of ``statuses``, as this decision sees them.

        Prefer it to ``select`` where only live rows matter: a long thread holds
        thousands of finished items, and reading them all at every turn's end made
        turn ends cost more the longer a thread grew.
        """
        stored = self.view.select_by_status(entity_of(kind), statuses, thread_id=thread_id)
        return self._with_overlay(kind, thread_id, stored, frozenset(statuses))

    def _with_overlay(
        self,
        kind: str,
        thread_id: str,
        stored: list[Any],
        statuses: frozenset[str] | None = None,
    ) -> list[Any]:
        """``stored`` as this decision sees it: its own puts replace, add or (when they
        left ``statuses``) drop rows; streamed text it holds is folded in first."""
        if kind == "turn_item":
            for item_id in list(self._deltas):
                self.get(kind, item_id)
        rows = {v.id: v for v in stored}
        for (k, id), v in self._overlay.items():
            if k == kind and getattr(v, "thread_id", None) == thread_id:
                if statuses is None or v.status in statuses:
                    rows[id] = v
                else:
                    rows.pop(id, None)
        return list(rows.values())

    def put(self, kind: str, value: Any) -> None:
        """Record an upsert unless the value is unchanged (no-op events are noise)."""
        if kind == "turn_item" and (missing := unbound_fields(value)):
            # An adapter's item leaves its refs unset: only a bound one is an entity.
            raise ValueError(f"turn item {value.id!r} is not bound: no {', '.join(missing)}")
        if not self._new_status(kind, value) and self.get(kind, value.id) == value:
            return
        self._overlay[(kind, value.id)] = value
        self.emit(_WRAP[kind](value))

    def _new_status(self, kind: str, value: Any) -> bool:
        """A turn item put with another status than it has is a change, whatever text
        streamed into it (deltas change text only): no need to fold that text just to
        compare (a completion carries its whole text). The put replaces the item, so
        this decision's own pending text for it is dropped, as ``get`` would have
        folded it into the value being replaced."""
        if kind != "turn_item":
            return False
        current = self.get_unfolded(kind, value.id)
        if current is not None and current.status == value.status:
            return False
        self._deltas.pop(value.id, None)
        return True

    def delta(
        self, item_id: TurnItemId, thread_id: ThreadId, text: str, field: str | None, replace: bool
    ) -> None:
        """Stream text into an item, keeping this decision's own view of it current.

        The item is not read for this: the text waits in ``_deltas`` until something
        in the same decision reads the item (most deltas are never read back).
        """
        pending = self._deltas.get(item_id)
        if pending is None:
            self._deltas[item_id] = [(text, field, replace)]
        else:
            pending.append((text, field, replace))
        # emit(), inlined: most events of a busy log pass here.
        payload = TurnItemDelta(
            item_id=item_id, thread_id=thread_id, text=text, field=field, replace=replace
        )
        self.drafts.append(EventDraft(payload=payload, correlation=self.correlation))

    def emit(self, payload: EventPayload) -> None:
        self.drafts.append(EventDraft(payload=payload, correlation=self.correlation))
