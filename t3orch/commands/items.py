"""The refs of a turn item a command writes itself (an orchestration item, not a provider's)."""

from __future__ import annotations

from typing import Literal, TypedDict

from t3orch.domain.base import ProviderRef
from t3orch.ids import NodeId, ProviderTurnId, RunId, ThreadId


class OrchestrationRefs(TypedDict):
    """The :class:`~t3orch.domain.turn_items.TurnItemBase` refs of such an item."""

    thread_id: ThreadId
    run_id: RunId
    node_id: NodeId | None
    provider_turn_id: ProviderTurnId | None
    native_item_ref: ProviderRef | None
    status: Literal["completed"]
    created_at: str
    updated_at: str


def orchestration_refs(
    thread_id: ThreadId,
    run_id: RunId,
    node_id: NodeId | None,
    now: str,
    provider_turn_id: ProviderTurnId | None = None,
) -> OrchestrationRefs:
    """An item of the run's root node, complete when written: no provider turn made it
    (``provider_turn_id``: the turn whose input it went with, a handoff's)."""
    return OrchestrationRefs(
        thread_id=thread_id,
        run_id=run_id,
        node_id=node_id,
        provider_turn_id=provider_turn_id,
        native_item_ref=None,
        status="completed",
        created_at=now,
        updated_at=now,
    )
