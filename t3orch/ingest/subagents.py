"""Subagents: a provider's delegated work as a nested part of the run's graph.

A ``SubagentRun`` item becomes an ``ExecutionNode`` of kind ``subagent`` (it never
counts for the run), a child ``ProviderThread`` owned by that node (``ownerNodeId``;
``appThreadId`` is the app thread, so the thread's execution graph lists it) and
a child ``CheckpointScope`` (kind ``subagent``, ``advancesAppRunCount`` false,
nested under the run's root scope once the run is checkpointed, or under the
enclosing subagent's scope). Every item produced under the subagent node (the
``parent_native_item_ref`` chain) is ``hidden``: kept in ``turnItems`` and the
graph, left out of messages and ``visibleTurnItems``.

Completion: a subagent finishing only ends its own node and makes its provider
thread idle; the root node alone completes the run. The parent's turn ending
closes a subagent still open as ``interrupted`` (``settle.close_open_items``);
a subagent's events that arrive after that fall outside any turn and are kept
as diagnostics only.
"""

from __future__ import annotations

import msgspec

from t3orch.domain.checkpoint import CheckpointScope
from t3orch.domain.node import ExecutionNode
from t3orch.domain.provider import ProviderThread
from t3orch.ids import CheckpointScopeId, NodeId, ProviderThreadId, ThreadId, derived_id
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.changes import Changes
from t3orch.provider_events import SubagentRun

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
    content: SubagentRun,
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
    return pt_id, scope_id


def settle_subagent(ch: Changes, node: ExecutionNode, content: SubagentRun | None = None) -> None:
    """A subagent node ended: its provider thread goes idle (and learns its native ref)."""
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
            status="idle" if pt.status == "active" else pt.status,
            native_thread_ref=ref,
            updated_at=ch.now(),
        ),
    )


def adopt_child_scopes(ch: Changes, thread_id: str, run_id: str, root_scope: str) -> None:
    """Nest the run's top-level subagent scopes under its root scope, now that it exists."""
    for scope in ch.select("checkpoint_scope", thread_id=thread_id):
        if scope.run_id == run_id and scope.kind == "subagent" and scope.parent_scope_id is None:
            ch.put(
                "checkpoint_scope",
                msgspec.structs.replace(scope, parent_scope_id=CheckpointScopeId(root_scope)),
            )
