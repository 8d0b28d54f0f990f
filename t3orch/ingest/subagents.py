"""Subagents: a provider's delegated work as a nested part of the run's graph.

A ``Subagent`` item becomes an ``ExecutionNode`` of kind ``subagent`` (it never
counts for the run), a child ``ProviderThread`` owned by that node (``ownerNodeId``;
``appThreadId`` is the app thread, so the thread's execution graph lists it) and
a child ``CheckpointScope`` (kind ``subagent``, ``advancesAppRunCount`` false,
nested under the run's root scope once the run is checkpointed, or under the
enclosing subagent's scope). Every item produced under the subagent node (the
``parent_native_item_ref`` chain) is ``hidden``: kept in ``turnItems`` and the
graph, left out of messages and ``visibleTurnItems``. The context that went in
and came out is recorded as ``subagent_spawn`` / ``subagent_result``
``ContextTransfer`` rows, ``consumed`` at once: the provider carried it natively
(the prompt in, the report out), so there is nothing to materialize.

Completion: a subagent finishing only ends its own node and makes its provider
thread idle; the root node alone completes the run. A subagent call that returns
while its child still works (Codex's spawn) leaves the node open until the
adapter's ``SubagentEnded``. The parent's turn ending closes a subagent still
open as ``interrupted`` (``settle``), unless the adapter says the provider keeps
that child running (``TurnCompleted.continuing``): then the node stays open past
the run's completion, the child's later events are bound to the ended turn
(``SessionBinding.lingering``), and its end, or the runtime's exit, settles it.
"""

from __future__ import annotations

import msgspec

from t3orch.domain.checkpoint import CheckpointScope
from t3orch.domain.context import ContextSourcePoint, ContextTransfer
from t3orch.domain.node import ExecutionNode
from t3orch.domain.provider import ProviderThread
from t3orch.domain.turn_items import Subagent
from t3orch.ids import (
    CheckpointScopeId,
    ContextTransferId,
    NodeId,
    ProviderThreadId,
    ThreadId,
    TurnItemId,
    derived_id,
)
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.changes import Changes

_MAX_DEPTH = 64


def subagent_owner(ch: Changes, node_id: NodeId | None) -> ExecutionNode | None:
    """The nearest ``subagent`` node at or above ``node_id``, if any."""
    seen = 0
    while node_id is not None and seen < _MAX_DEPTH:
        node = ch.get("node", node_id)
        if node is None:
            return None
        if node.kind == "subagent":
            return node  # type: ignore[no-any-return]
        if node.parent_node_id == node.id:
            return None
        node_id = node.parent_node_id
        seen += 1
    return None


def within(ch: Changes, node_id: NodeId | None, ancestors: frozenset[NodeId]) -> bool:
    """Whether ``node_id`` is one of ``ancestors`` or below one of them."""
    seen = 0
    while node_id is not None and seen < _MAX_DEPTH:
        if node_id in ancestors:
            return True
        node = ch.get("node", node_id)
        if node is None or node.parent_node_id == node.id:
            return False
        node_id = node.parent_node_id
        seen += 1
    return False


def child_ids(node_id: NodeId) -> tuple[ProviderThreadId, CheckpointScopeId]:
    return (
        derived_id(ProviderThreadId, node_id, "subagent"),
        derived_id(CheckpointScopeId, node_id, "subagent"),
    )


def root_scope_id(run_id: str) -> CheckpointScopeId:
    """The id ``commands.checkpoints.record_checkpoint`` gives a run's root scope."""
    return derived_id(CheckpointScopeId, run_id, "root_run")


def open_subagent(
    ch: Changes,
    b: SessionBinding,
    t: TurnBinding,
    node_id: NodeId,
    item_id: TurnItemId,
    content: Subagent,
    owner: ExecutionNode | None,
) -> tuple[ProviderThreadId, CheckpointScopeId]:
    """The child provider thread and checkpoint scope of a new subagent node."""
    assert b.thread_id is not None
    pt_id, scope_id = child_ids(node_id)
    now = ch.now()
    if ch.get("provider_thread", pt_id) is None:
        ch.put(
            "provider_thread",
            ProviderThread(
                id=pt_id,
                provider=b.provider,
                provider_session_id=b.provider_session_id,
                app_thread_id=b.thread_id,
                owner_node_id=node_id,
                native_thread_ref=content.child_native_thread_ref,
                native_conversation_head_ref=None,
                status="active",
                first_run_ordinal=None,
                last_run_ordinal=None,
                handoff_ids=[],
                forked_from=None,
                created_at=now,
                updated_at=now,
            ),
        )
    if ch.get("checkpoint_scope", scope_id) is None:
        parent_scope: CheckpointScopeId | None = None
        if owner is not None:
            parent_scope = child_ids(owner.id)[1]
        elif ch.get("checkpoint_scope", root_scope_id(t.run_id)) is not None:
            parent_scope = root_scope_id(t.run_id)
        siblings = [
            s
            for s in ch.select("checkpoint_scope", thread_id=b.thread_id)
            if s.run_id == t.run_id and s.kind == "subagent" and s.parent_scope_id == parent_scope
        ]
        session = ch.get("provider_session", b.provider_session_id)
        thread = ch.get("thread", b.thread_id)
        cwd = thread.cwd if thread is not None else (session.cwd if session else "")
        ch.put(
            "checkpoint_scope",
            CheckpointScope(
                id=scope_id,
                thread_id=ThreadId(b.thread_id),
                run_id=t.run_id,
                node_id=node_id,
                parent_scope_id=parent_scope,
                provider_thread_id=pt_id,
                kind="subagent",
                ordinal_within_parent=len(siblings) + 1,
                advances_app_run_count=False,
                cwd=cwd,
                created_at=now,
            ),
        )
    _transfer(ch, b, t, node_id, item_id, "subagent_spawn", source_pt=b.provider_thread_id)
    return pt_id, scope_id


def record_result(
    ch: Changes, b: SessionBinding, t: TurnBinding, node: ExecutionNode, item_id: TurnItemId
) -> None:
    """A subagent completed: its report went back to the parent (``subagent_result``)."""
    _transfer(ch, b, t, node.id, item_id, "subagent_result", source_pt=node.provider_thread_id)


def _transfer(
    ch: Changes,
    b: SessionBinding,
    t: TurnBinding,
    node_id: NodeId,
    item_id: TurnItemId,
    kind: str,
    source_pt: ProviderThreadId | None,
) -> None:
    assert b.thread_id is not None
    transfer_id = derived_id(ContextTransferId, node_id, kind)
    if ch.get("context_transfer", transfer_id) is not None:
        return
    pt = ch.get("provider_thread", source_pt) if source_pt else None
    now = ch.now()
    thread_id = ThreadId(b.thread_id)
    ch.put(
        "context_transfer",
        ContextTransfer(
            id=transfer_id,
            type="subagent_spawn" if kind == "subagent_spawn" else "subagent_result",
            source_thread_id=thread_id,
            target_thread_id=thread_id,
            source_point=ContextSourcePoint(
                thread_id=thread_id,
                run_id=t.run_id,
                checkpoint_id=None,
                turn_item_id=item_id,
                provider_thread_ref=pt.native_thread_ref if pt is not None else None,
                provider_turn_ref=None,
            ),
            base_point=None,
            source_provider=b.provider,
            target_provider=b.provider,
            status="consumed",
            resolution=None,
            created_by="agent",
            created_at=now,
            consumed_at=now,
        ),
    )


def settle_subagent(
    ch: Changes, node: ExecutionNode, content: Subagent | None = None, *, ended: bool = True
) -> None:
    """A subagent node ended: its provider thread goes idle (and learns its native ref).

    ``ended`` false: the call returned but the child works on; only the ref is learned
    (so the child's checkpoints and its ``subagent_result`` can name it).
    """
    if node.kind != "subagent" or node.provider_thread_id is None:
        return
    pt = ch.get("provider_thread", node.provider_thread_id)
    if pt is None or pt.owner_node_id != node.id:
        return
    ref = (content.child_native_thread_ref if content else None) or pt.native_thread_ref
    ch.put(
        "provider_thread",
        msgspec.structs.replace(
            pt,
            status="idle" if ended and pt.status == "active" else pt.status,
            native_thread_ref=ref,
            updated_at=ch.now(),
        ),
    )


def adopt_child_scopes(ch: Changes, thread_id: str, run_id: str, root_scope: str) -> None:
    """Nest the run's top-level subagent scopes under its root scope, now that it exists.

    Each subagent scope is found from its node's provider thread (``child_ids``): a
    thread has a provider thread per provider and per subagent, but a checkpoint scope
    per run too, and every turn's end reading all of those cost more with each turn.
    """
    for pt in ch.select("provider_thread", thread_id=thread_id):
        if pt.owner_node_id is None:
            continue
        scope = ch.get("checkpoint_scope", child_ids(pt.owner_node_id)[1])
        if (
            scope is not None
            and scope.run_id == run_id
            and scope.kind == "subagent"
            and scope.parent_scope_id is None
        ):
            ch.put(
                "checkpoint_scope",
                msgspec.structs.replace(scope, parent_scope_id=CheckpointScopeId(root_scope)),
            )
