"""Checkpoints at each root run's end, and rollback to one (files + provider thread).

The git work is ``t3orch.gitstore``; the records are core commands. Rollback of
the provider side: a Codex provider thread the thread is using is reverted
natively (``thread/revert`` before the first rolled-back turn, on a live runtime);
any other provider thread that saw a rolled-back run is closed, so the next run
starts a new one seeded with a summary of what is left (see docs/lineage.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from adapters.errors import AdapterError
from supervisor.session import SessionFailed, SessionRunner
from t3orch import gitstore, timeline
from t3orch.commands import checkpoints, sessions
from t3orch.commands.checkpoints import require_run_checkpoint, target_ordinal
from t3orch.domain.checkpoint import Checkpoint, CheckpointScope
from t3orch.domain.node import ExecutionNode
from t3orch.domain.provider import ProviderThread, ProviderTurn
from t3orch.domain.run import Run, RunAttempt
from t3orch.domain.thread import AppThread
from t3orch.ids import CheckpointId, CommandId
from t3orch.service import CommandResult, CoreService
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, ReadModel, StateView

log = logging.getLogger(__name__)

_ENDED = ("completed", "interrupted", "failed")
_NODE_OPEN = ("pending", "running", "waiting")


class Runtimes(Protocol):
    """What a rollback needs of the session manager (which passes itself): the live
    runtimes, and opening or retiring one. A protocol, so that the manager, which
    owns the checkpointer, is not imported back by it."""

    @property
    def runners(self) -> Mapping[str, SessionRunner]: ...

    async def ensure_runner(self, thread_id: str) -> SessionRunner: ...

    async def retire(self, runner: SessionRunner, reason: str = ...) -> None: ...


@attrs.define(eq=False)
class Checkpointer:
    core: CoreService
    reader: ReadModel
    #: Threads already told their cwd cannot be checkpointed (said once per daemon).
    disabled_noted: set[str] = attrs.field(factory=set)

    def previous(self, thread_id: str, before_ordinal: int) -> Checkpoint | None:
        """The latest ready checkpoint before ``before_ordinal`` whose run was not
        rolled back. A run's ordinal is its place in the thread (``count + 1`` when it
        is created), so the thread's runs newest first are in ordinal order: the first
        one before the ordinal, not rolled back, with a ready checkpoint is the answer.
        Each turn's end asks; it reads the runs since (mostly the turn's own) and one
        checkpoint, never the thread's whole history."""
        for run in self.reader.recent(Run, thread_id=thread_id):
            if run.ordinal >= before_ordinal or run.status == "rolled_back":
                continue
            if run.checkpoint_id is None:
                continue
            cp = self.reader.get(Checkpoint, run.checkpoint_id)
            if cp is not None and cp.status == "ready":
                return cp
        return None

    async def after_run(self, thread_id: str, run_id: str) -> None:
        """The root run ended (not completed: those are checkpointed at their barrier):
        checkpoint the thread's work tree (or say why not, once).

        Never raises: a checkpoint that cannot be taken is a diagnostic, and the
        next run is dispatched anyway.
        """
        try:
            record = await self._capture_run(thread_id, run_id, None)
            if record is not None:
                await self.core.commit_decision(record, "checkpoint.record")
        except (gitstore.GitError, OSError, trio.TooSlowError, CommandRejected) as exc:
            await self._failed(thread_id, run_id, exc)

    async def at_barrier(
        self, thread_id: str, run_id: str, committed: Callable[[], Awaitable[None]]
    ) -> Decide | None:
        """The completion barrier: the turn's text and items are final (queued; awaited
        with ``committed`` before the log is read), its terminal event not yet queued.

        Returns the checkpoint's record, for the stream to commit with the turn's end
        (one transaction, the record first), or None. Never raises, like
        :meth:`after_run`; a record the log then refuses becomes the same diagnostic.
        """
        try:
            record = await self._capture_run(thread_id, run_id, committed)
        except (gitstore.GitError, OSError, trio.TooSlowError, CommandRejected) as exc:
            await self._failed(thread_id, run_id, exc)
            return None
        if record is None:
            return None
        decide = record

        def or_note(view: StateView) -> Decision:
            try:
                return decide(view)
            except CommandRejected as exc:
                log.warning("checkpoint of %s run %s failed: %s", thread_id, run_id, exc)
                return sessions.note(None, "warning", "checkpoint_failed", f"{thread_id}: {exc}")(
                    view
                )

        return or_note

    async def _failed(self, thread_id: str, run_id: str, exc: Exception) -> None:
        log.warning("checkpoint of %s run %s failed: %s", thread_id, run_id, exc)
        await self.core.note(None, "warning", "checkpoint_failed", f"{thread_id}: {exc}")

    async def _capture_run(
        self, thread_id: str, run_id: str, committed: Callable[[], Awaitable[None]] | None
    ) -> Decide | None:
        """Capture the run's work tree; the checkpoint's record (not yet submitted).

        ``committed``: at the barrier, the wait for the turn's last events; the tree is
        captured while they commit (it does not read the log), subagent scopes after.
        """
        ending = committed is not None
        run = self.reader.get(Run, run_id)
        thread = self.reader.get(AppThread, thread_id)
        if run is None or thread is None:
            return None
        # After the fact, only a run that started (one that failed to start changed
        # nothing). At the barrier its turn is completing, so it worked, even if the
        # provider never said the turn started: skipping it here was silent.
        if not ending and (run.started_at is None or run.status not in _ENDED):
            return None
        if run.checkpoint_id is not None:
            return None
        timeline.stamp("checkpoint.start")
        root = await gitstore.work_tree_root(thread.cwd)
        timeline.stamp("checkpoint.root")
        if root is None:
            if thread_id not in self.disabled_noted:
                self.disabled_noted.add(thread_id)
                await self.core.checkpoints_disabled(
                    thread_id, thread.cwd, f"{thread.cwd} is not in a git work tree"
                )
            return None
        prev = self.previous(thread_id, run.ordinal)
        base = await gitstore.resolve(root, prev.ref) if prev is not None else None
        ref = gitstore.checkpoint_ref(thread_id, run.ordinal)
        message = f"t3orch checkpoint: thread {thread_id} run {run.ordinal}"
        if committed is not None:
            commit, _ = await gitstore.capture(root, ref, message, base)
            # What follows reads the run's id and ordinal only: not read again.
            await committed()
        # Subagents whose end was not seen (closed by the turn's end) get theirs
        # (their records commit before the run's).
        await self._children(root, thread_id, run, None, at_barrier=True)
        if committed is None:
            commit, _ = await gitstore.capture(root, ref, message, base)
        files = await gitstore.numstat(root, base, commit)
        return checkpoints.record_checkpoint(
            run.id, thread.cwd, ref, files, prev.id if prev is not None and base else None
        )

    async def after_subagent(self, thread_id: str, run_id: str, child_ref: str | None) -> None:
        """A subagent of the run finished: checkpoint its scope (never advancing the count).

        ``child_ref``: the native thread of a child that ended a turn (Codex), whose
        scope gets a checkpoint even if it has one. Any ended subagent without a
        checkpoint gets one too. Never raises, like :meth:`after_run`.
        """
        try:
            run = self.reader.get(Run, run_id)
            thread = self.reader.get(AppThread, thread_id)
            if run is None or thread is None:
                return
            root = await gitstore.work_tree_root(thread.cwd)
            if root is not None:
                await self._children(root, thread_id, run, child_ref, at_barrier=False)
        except (gitstore.GitError, OSError, trio.TooSlowError, CommandRejected) as exc:
            log.warning("child checkpoint of %s run %s failed: %s", thread_id, run_id, exc)
            await self.core.note(None, "warning", "checkpoint_failed", f"{thread_id}: {exc}")

    async def _children(
        self, root: str, thread_id: str, run: Any, child_ref: str | None, *, at_barrier: bool
    ) -> None:
        # The run's scopes, and their checkpoints, were all created after the run: read
        # newest first down to the run's own row, not the thread's every scope.
        created = self.reader.row("run", run.id)
        since = created.position if created is not None else 0
        scopes = [
            s
            for s in self.reader.recent(CheckpointScope, thread_id=thread_id, since_position=since)
            if s.run_id == run.id and s.kind == "subagent"
        ]
        if not scopes:
            return
        ids = {s.id for s in scopes}
        cps = [
            c
            for c in self.reader.recent(Checkpoint, thread_id=thread_id, since_position=since)
            if c.scope_id in ids
        ]
        for scope in sorted(scopes, key=lambda s: s.created_at):
            mine = sorted(
                (c for c in cps if c.scope_id == scope.id), key=lambda c: c.ordinal_within_scope
            )
            node = self.reader.get(ExecutionNode, scope.node_id)
            pt = (
                self.reader.get(ProviderThread, scope.provider_thread_id)
                if scope.provider_thread_id is not None
                else None
            )
            ended = at_barrier or (node is not None and node.status not in _NODE_OPEN)
            named = child_ref is not None and pt is not None and pt.native_thread_ref == child_ref
            if not named and (mine or not ended):
                continue
            await self._capture_child(root, thread_id, run, scope, mine[-1] if mine else None)

    async def _capture_child(
        self, root: str, thread_id: str, run: Any, scope: Any, last: Any | None
    ) -> None:
        # Parented on the scope's previous checkpoint, else on the previous run's.
        parent = last if last is not None else self.previous(thread_id, run.ordinal)
        base = await gitstore.resolve(root, parent.ref) if parent is not None else None
        n = (last.ordinal_within_scope if last is not None else 0) + 1
        ref = gitstore.child_checkpoint_ref(thread_id, scope.id, n)
        commit, _ = await gitstore.capture(
            root, ref, f"t3orch checkpoint: thread {thread_id} run {run.ordinal} subagent", base
        )
        files = await gitstore.numstat(root, base, commit)
        await self.core.record_child_checkpoint(
            scope.id, ref, files, parent.id if parent is not None and base else None
        )

    async def rollback(
        self,
        manager: Runtimes,
        thread_id: str,
        checkpoint_id: str,
        *,
        command_id: str | None = None,
        dry_run: bool = False,
        allow_shared_work_tree: bool = False,
        expect_work_tree: str | None = None,
    ) -> CommandResult:
        """Roll ``thread_id`` back to ``checkpoint_id``: files, provider thread, runs.

        ``dry_run``: only the plan (what would be written back and deleted, which
        runs roll back, which other threads share the work tree); nothing changes.
        Otherwise the work tree as it is now is first recorded as an undo checkpoint
        (rolling back to it undoes the rollback's files), and a work tree another
        thread uses too (a fork shares its parent's) is refused unless
        ``allow_shared_work_tree``. ``expect_work_tree``: the ``workTree`` of the
        plan the user confirmed; a work tree changed since is refused.
        """
        thread = self.reader.get(AppThread, thread_id)
        if thread is None:
            raise CommandRejected("unknown_thread", f"no thread {thread_id!r}")
        if (
            not dry_run
            and command_id is not None
            and self.reader.receipt(CommandId(command_id)) is not None
        ):
            # A retry: the first answer, without touching files or providers again.
            return await self.core.rollback(
                thread_id, checkpoint_id, reverted={}, closed=[], command_id=command_id
            )
        cp = require_run_checkpoint(
            self.reader.get(Checkpoint, checkpoint_id), checkpoint_id, thread_id
        )
        runs = self.reader.select(Run, thread_id=thread_id)
        runner = manager.runners.get(thread_id)
        if (runner is not None and runner.busy) or any(
            r.status in ("queued", "starting", "running", "waiting") for r in runs
        ):
            raise CommandRejected("run_active", f"thread {thread_id} has a run in progress")
        root = await gitstore.work_tree_root(thread.cwd)
        if root is None:
            raise CommandRejected("checkpoints_disabled", f"{thread.cwd} is not in a git work tree")
        commit = await gitstore.resolve(root, cp.ref)
        if commit is None:
            raise CommandRejected("checkpoint_missing", f"{cp.ref} is gone from {root}")
        keep = target_ordinal(cp, runs)
        later = sorted(
            (r for r in runs if r.ordinal > keep and r.status != "rolled_back"),
            key=lambda r: r.ordinal,
        )
        plan = await gitstore.plan_restore(root, commit)
        shared = await self._sharing(thread_id, root)
        if dry_run:
            return CommandResult(
                {
                    "threadId": thread_id,
                    "checkpointId": checkpoint_id,
                    "dryRun": True,
                    "root": root,
                    "workTree": plan.tree,
                    "restore": plan.restore,
                    "delete": plan.delete,
                    "rollsBackRuns": [r.ordinal for r in later],
                    "sharedWith": shared,
                },
                self.reader.last_sequence(),
            )
        if shared and not allow_shared_work_tree:
            raise CommandRejected(
                "shared_work_tree",
                f"{root} is also the work tree of {', '.join(shared)}: rolling back {thread_id} "
                "rewrites their files too; confirm it (allowSharedWorkTree), or fork with "
                "a worktree of its own (fork --worktree)",
            )
        if expect_work_tree is not None and expect_work_tree != plan.tree:
            raise CommandRejected(
                "work_tree_changed",
                f"files in {root} changed since the rollback was planned; nothing was changed, "
                "plan it again",
            )
        # The undo point first: nothing below may change a file before it is recorded.
        undo = await self._capture_undo(root, thread, runs)
        reverted: dict[str, int | None] = {}
        closed: list[str] = []
        for pt_id in dict.fromkeys(r.provider_thread_id for r in later if r.provider_thread_id):
            kept = [
                r.ordinal
                for r in runs
                if r.provider_thread_id == pt_id and r.ordinal <= keep and r.status != "rolled_back"
            ]
            if await self._revert_natively(manager, thread, pt_id, later):
                reverted[pt_id] = max(kept) if kept else None
            else:
                closed.append(pt_id)
        runner = manager.runners.get(thread_id)
        if (
            runner is not None
            and runner.binding is not None
            and runner.binding.provider_thread_id in closed
        ):
            # Its conversation holds rolled-back runs: the next run opens a new one.
            await manager.retire(runner)
        deleted = await gitstore.restore(root, commit)
        return await self.core.rollback(
            thread_id,
            checkpoint_id,
            reverted=reverted,
            closed=closed,
            undo_checkpoint_id=undo,
            restored=plan.restore,
            deleted=deleted,
            command_id=command_id,
        )

    async def _capture_undo(self, root: str, thread: Any, runs: list[Any]) -> str:
        """Commit and record the work tree as it is now; returns the checkpoint's id."""
        cp_id = self.core.ids.new(CheckpointId)
        ref = gitstore.undo_checkpoint_ref(thread.id, cp_id)
        live = [r.ordinal for r in runs if r.status != "rolled_back"]
        prev = self.previous(thread.id, max(live) + 1) if live else None
        base = await gitstore.resolve(root, prev.ref) if prev is not None else None
        commit, _ = await gitstore.capture(
            root, ref, f"t3orch checkpoint: thread {thread.id} before a rollback", base
        )
        files = await gitstore.numstat(root, base, commit)
        await self.core.record_undo_checkpoint(
            thread.id, cp_id, thread.cwd, ref, files, prev.id if prev is not None and base else None
        )
        return cp_id

    async def _sharing(self, thread_id: str, root: str) -> list[str]:
        """The other live threads whose cwd is in the work tree at ``root``.

        Only cwds under ``root`` can be in it; each is asked (a nested repository
        or a git worktree below ``root`` is a work tree of its own).
        """
        threads = self.reader.select(AppThread)
        prefix = root.rstrip(os.sep) + os.sep
        out = []
        for t in threads:
            if t.id == thread_id or t.archived_at is not None:
                continue
            if t.cwd != root and not t.cwd.startswith(prefix):
                continue
            if await gitstore.work_tree_root(t.cwd) == root:
                out.append(str(t.id))
        return sorted(out)

    async def _revert_natively(
        self, manager: Runtimes, thread: Any, pt_id: str, later: list[Any]
    ) -> bool:
        pt = self.reader.get(ProviderThread, pt_id)
        if (
            pt is None
            or pt.provider != "codex"
            or thread.default_provider != "codex"
            or thread.active_provider_thread_id != pt_id
        ):
            return False
        turn_ref = self._first_turn_ref(pt_id, later)
        if turn_ref is None:
            return False
        try:
            runner = await manager.ensure_runner(thread.id)
            runtime = runner.runtime
            revert = getattr(runtime, "revert_thread", None)
            if runner.binding is None or runner.binding.provider_thread_id != pt_id:
                return False
            if revert is None:
                return False
            await revert(turn_ref)
        except (AdapterError, SessionFailed) as exc:
            await self.core.note(
                None, "warning", "rollback_revert_failed", f"{thread.id}: thread/revert: {exc}"
            )
            return False
        return True

    def _first_turn_ref(self, pt_id: str, later: list[Any]) -> str | None:
        later_ids = {r.id for r in later}
        with self.reader.snapshot():
            turns = self.reader.select(ProviderTurn)
            attempts = {
                a.id: a
                for r in later
                for a in self.reader.select(RunAttempt, thread_id=r.thread_id)
            }
        mine = [
            t
            for t in turns
            if t.provider_thread_id == pt_id
            and t.native_turn_ref
            and t.run_attempt_id in attempts
            and attempts[t.run_attempt_id].run_id in later_ids
        ]
        if not mine:
            return None
        return str(min(mine, key=lambda t: t.ordinal).native_turn_ref)
