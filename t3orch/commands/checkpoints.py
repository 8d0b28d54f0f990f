"""Checkpoint and rollback decisions (the git work happens in ``t3orch.gitstore``)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from t3orch.commands.items import orchestration_refs
from t3orch.commands.threads import require_thread
from t3orch.domain.checkpoint import Checkpoint, CheckpointFileSummary, CheckpointScope
from t3orch.domain.node import ExecutionNode
from t3orch.domain.provider import ProviderThread
from t3orch.domain.run import Run
from t3orch.domain.turn_items import CheckpointItem
from t3orch.domain.vocab import RUN_TERMINAL
from t3orch.events import CheckpointScopeUpserted, CheckpointUpserted, ProviderDiagnostic
from t3orch.gitstore import REF_PREFIX, FileStat
from t3orch.ids import CheckpointId, CheckpointScopeId, ThreadId, TurnItemId, derived_id
from t3orch.ingest.changes import Changes
from t3orch.ingest.subagents import adopt_child_scopes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView


def summaries(files: Sequence[FileStat]) -> list[CheckpointFileSummary]:
    return [
        CheckpointFileSummary(path=f.path, additions=f.additions, deletions=f.deletions)
        for f in files
    ]


def latest_checkpoint(view: StateView, thread_id: str, before_ordinal: int) -> Checkpoint | None:
    """The checkpoint of the newest run before ``before_ordinal`` that has one (not rolled back)."""
    runs = {r.id: r for r in view.select(Run, thread_id=thread_id)}
    best: Checkpoint | None = None
    for cp in view.select(Checkpoint, thread_id=thread_id):
        run = runs.get(cp.run_id) if cp.run_id else None
        if run is None or run.status == "rolled_back" or cp.status != "ready":
            continue
        if cp.app_run_ordinal is None or cp.app_run_ordinal >= before_ordinal:
            continue
        if best is None or (best.app_run_ordinal or 0) < cp.app_run_ordinal:
            best = cp
    return best


def record_checkpoint(
    run_id: str, cwd: str, ref: str, files: Sequence[FileStat], parent_id: str | None
) -> Decide:
    """A root run's checkpoint: its scope, the checkpoint, the run's link and an item."""

    def decide(view: StateView) -> Decision:
        run = view.get(Run, run_id)
        if run is None:
            raise CommandRejected("unknown_run", f"no run {run_id!r}")
        ch = Changes(view)
        now = view.now()
        scope_id = derived_id(CheckpointScopeId, run.id, "root_run")
        cp_id = derived_id(CheckpointId, run.id, "root_run", "1")
        assert run.root_node_id is not None
        scope = CheckpointScope(
            id=scope_id,
            thread_id=ThreadId(run.thread_id),
            run_id=run.id,
            node_id=run.root_node_id,
            parent_scope_id=None,
            provider_thread_id=run.provider_thread_id,
            kind="root_run",
            ordinal_within_parent=run.ordinal,
            advances_app_run_count=True,
            cwd=cwd,
            created_at=now,
        )
        ch.emit(CheckpointScopeUpserted(scope=scope))
        # The run's subagent scopes were opened before this one existed.
        adopt_child_scopes(ch, run.thread_id, run.id, scope_id)
        checkpoint = Checkpoint(
            id=cp_id,
            thread_id=ThreadId(run.thread_id),
            scope_id=scope_id,
            run_id=run.id,
            node_id=run.root_node_id,
            parent_checkpoint_id=CheckpointId(parent_id) if parent_id else None,
            ordinal_within_scope=1,
            app_run_ordinal=run.ordinal,
            ref=ref,
            status="ready",
            files=summaries(files),
            captured_at=now,
        )
        ch.emit(CheckpointUpserted(checkpoint=checkpoint))
        ch.put("run", msgspec.structs.replace(run, checkpoint_id=cp_id))
        node = view.get(ExecutionNode, run.root_node_id)
        if node is not None:
            ch.put("node", msgspec.structs.replace(node, checkpoint_scope_id=scope_id))
        ch.put(
            "turn_item",
            CheckpointItem(
                id=derived_id(TurnItemId, cp_id),
                **orchestration_refs(ThreadId(run.thread_id), run.id, run.root_node_id, now),
                checkpoint_id=cp_id,
                ref=ref,
            ),
        )
        return Decision(ch.drafts, {"checkpointId": cp_id, "ref": ref})

    return decide


def record_child_checkpoint(
    scope_id: str, ref: str, files: Sequence[FileStat], parent_id: str | None
) -> Decide:
    """A subagent scope's checkpoint: it never advances the run count (no ``appRunOrdinal``).

    A scope may get several (``ordinalWithinScope``): one each time its child ends.
    """

    def decide(view: StateView) -> Decision:
        scope = view.get(CheckpointScope, scope_id)
        if scope is None or scope.advances_app_run_count:
            raise CommandRejected("unknown_scope", f"no child checkpoint scope {scope_id!r}")
        n = 1 + sum(
            1 for c in view.select(Checkpoint, thread_id=scope.thread_id) if c.scope_id == scope.id
        )
        cp_id = derived_id(CheckpointId, scope.id, str(n))
        ch = Changes(view)
        ch.put(
            "checkpoint",
            Checkpoint(
                id=cp_id,
                thread_id=scope.thread_id,
                scope_id=scope.id,
                run_id=scope.run_id,
                node_id=scope.node_id,
                parent_checkpoint_id=CheckpointId(parent_id) if parent_id else None,
                ordinal_within_scope=n,
                app_run_ordinal=None,
                ref=ref,
                status="ready",
                files=summaries(files),
                captured_at=view.now(),
            ),
        )
        return Decision(ch.drafts, {"checkpointId": cp_id, "ref": ref})

    return decide


def require_run_checkpoint(
    checkpoint: Checkpoint | None, checkpoint_id: str, thread_id: str
) -> Checkpoint:
    """The checkpoint a rollback goes to: a run's, or a rollback's undo point, on this thread."""
    if checkpoint is None or checkpoint.thread_id != thread_id:
        raise CommandRejected(
            "unknown_checkpoint", f"no checkpoint {checkpoint_id!r} on {thread_id}"
        )
    if checkpoint.app_run_ordinal is None and not is_undo_checkpoint(checkpoint):
        raise CommandRejected(
            "subagent_checkpoint",
            f"checkpoint {checkpoint_id} is a subagent's (it does not advance the run count); "
            "roll back to a run's checkpoint",
        )
    return checkpoint


def is_undo_checkpoint(checkpoint: Checkpoint) -> bool:
    """Taken by a rollback of the work tree it found (a ``manual`` scope's, see
    :func:`record_undo_checkpoint`): it never advances the run count."""
    return checkpoint.ref.startswith(f"{REF_PREFIX}/{checkpoint.thread_id}/undo/")


def target_ordinal(checkpoint: Checkpoint, runs: Sequence[Run]) -> int:
    """The last run a rollback to ``checkpoint`` keeps: later runs are rolled back.

    A run's checkpoint keeps its own run; an undo checkpoint keeps the runs that
    were live when it was taken (its ``runId`` is the latest of them).
    """
    if checkpoint.app_run_ordinal is not None:
        return checkpoint.app_run_ordinal
    ordinals = {r.id: r.ordinal for r in runs}
    return ordinals.get(checkpoint.run_id, 0) if checkpoint.run_id else 0


def record_undo_checkpoint(
    thread_id: str,
    checkpoint_id: CheckpointId,
    cwd: str,
    ref: str,
    files: Sequence[FileStat],
    parent_id: str | None,
) -> Decide:
    """The work tree as a rollback found it, recorded before the rollback changes a file.

    Its own ``manual`` scope (it is no run's end and never advances the run count),
    on the thread's latest live run: rolling back to it restores those files and
    rolls back any run started after it was taken.
    """

    def decide(view: StateView) -> Decision:
        require_thread(view, thread_id)
        live = [r for r in view.select(Run, thread_id=thread_id) if r.status != "rolled_back"]
        if not live:
            raise CommandRejected("no_runs", f"thread {thread_id} has no run to roll back from")
        latest = max(live, key=lambda r: r.ordinal)
        assert latest.root_node_id is not None
        n = 1 + sum(
            1 for s in view.select(CheckpointScope, thread_id=thread_id) if s.kind == "manual"
        )
        now = view.now()
        scope_id = derived_id(CheckpointScopeId, thread_id, "undo", checkpoint_id)
        ch = Changes(view)
        ch.emit(
            CheckpointScopeUpserted(
                scope=CheckpointScope(
                    id=scope_id,
                    thread_id=ThreadId(thread_id),
                    run_id=latest.id,
                    node_id=latest.root_node_id,
                    parent_scope_id=None,
                    provider_thread_id=None,
                    kind="manual",
                    ordinal_within_parent=n,
                    advances_app_run_count=False,
                    cwd=cwd,
                    created_at=now,
                )
            )
        )
        ch.emit(
            CheckpointUpserted(
                checkpoint=Checkpoint(
                    id=checkpoint_id,
                    thread_id=ThreadId(thread_id),
                    scope_id=scope_id,
                    run_id=latest.id,
                    node_id=latest.root_node_id,
                    parent_checkpoint_id=CheckpointId(parent_id) if parent_id else None,
                    ordinal_within_scope=1,
                    app_run_ordinal=None,
                    ref=ref,
                    status="ready",
                    files=summaries(files),
                    captured_at=now,
                )
            )
        )
        return Decision(ch.drafts, {"checkpointId": checkpoint_id, "ref": ref})

    return decide


def checkpoints_disabled(thread_id: str, cwd: str, reason: str) -> Decide:
    """Said once per thread (per daemon): its cwd cannot be checkpointed. Not an error."""

    def decide(view: StateView) -> Decision:
        ch = Changes(view)
        ch.emit(
            ProviderDiagnostic(
                provider_session_id=None,
                level="info",
                code="checkpoints_disabled",
                message=f"thread {thread_id}: checkpoints disabled: {reason}",
                detail={"threadId": thread_id, "cwd": cwd},
            )
        )
        return Decision(ch.drafts)

    return decide


def rollback(
    thread_id: str,
    checkpoint_id: str,
    *,
    reverted: dict[str, int | None],
    closed: Sequence[str],
    undo_checkpoint_id: str | None = None,
    restored: Sequence[str] = (),
    deleted: Sequence[str] = (),
) -> Decide:
    """Runs after the checkpoint's run become ``rolled_back``; later checkpoints ``stale``.

    ``undo_checkpoint_id`` (the work tree as the rollback found it), ``restored`` and
    ``deleted`` (the files it wrote back and removed) go into the answer, so that a
    retry of the command gets them too. Undo checkpoints never go stale: they are
    the user's files, whatever the conversation did since.

    ``reverted`` maps provider threads rolled back natively to the last run ordinal
    they still hold; ``closed`` ones cannot be rolled back and are never resumed
    again (the next run starts a new provider thread with a summary of what is left).
    """

    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        cp = require_run_checkpoint(view.get(Checkpoint, checkpoint_id), checkpoint_id, thread_id)
        ch = Changes(view)
        now = view.now()
        runs = view.select(Run, thread_id=thread_id)
        if any(r.status not in RUN_TERMINAL for r in runs):
            raise CommandRejected("run_active", f"thread {thread_id} has a run in progress")
        keep = target_ordinal(cp, runs)
        later = [r for r in runs if r.ordinal > keep and r.status != "rolled_back"]
        for r in later:
            ch.put("run", msgspec.structs.replace(r, status="rolled_back"))
            for n in view.select(ExecutionNode, thread_id=thread_id):
                if n.run_id == r.id and n.status != "rolled_back":
                    ch.put("node", msgspec.structs.replace(n, status="rolled_back"))
        later_ids = {r.id for r in later}
        for other in view.select(Checkpoint, thread_id=thread_id):
            stays = other.status != "ready" or is_undo_checkpoint(other)
            if other.run_id in later_ids and not stays:
                ch.emit(
                    CheckpointUpserted(checkpoint=msgspec.structs.replace(other, status="stale"))
                )
        active = thread.active_provider_thread_id
        for pt_id, last in reverted.items():
            pt = view.get(ProviderThread, pt_id)
            if pt is not None:
                ch.put(
                    "provider_thread",
                    msgspec.structs.replace(pt, last_run_ordinal=last, updated_at=now),
                )
        for pt_id in closed:
            pt = view.get(ProviderThread, pt_id)
            if pt is not None:
                ch.put(
                    "provider_thread", msgspec.structs.replace(pt, status="closed", updated_at=now)
                )
                if active == pt_id:
                    active = None
        if active != thread.active_provider_thread_id:
            ch.put(
                "thread",
                msgspec.structs.replace(thread, active_provider_thread_id=active, updated_at=now),
            )
        return Decision(
            ch.drafts,
            {
                "threadId": thread_id,
                "checkpointId": checkpoint_id,
                "rolledBackRuns": sorted(r.ordinal for r in later),
                "revertedProviderThreads": sorted(reverted),
                "closedProviderThreads": sorted(closed),
                "undoCheckpointId": undo_checkpoint_id,
                "restored": list(restored),
                "deleted": list(deleted),
            },
        )

    return decide


__all__ = [
    "checkpoints_disabled",
    "is_undo_checkpoint",
    "latest_checkpoint",
    "record_checkpoint",
    "record_child_checkpoint",
    "record_undo_checkpoint",
    "require_run_checkpoint",
    "rollback",
    "target_ordinal",
]
