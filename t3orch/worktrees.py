"""``fork --worktree``: a fork with a git worktree of its own.

A plain fork shares its parent's cwd, so its provider edits the parent's files
and rolling it back rewrites them. This fork gets a git worktree beside the
repository (``gitstore.fork_worktree_path``: ``<repo>-fork-<thread id>``),
detached at the repository's HEAD, with the files of the source run's checkpoint
(the work tree as that run left it); the fork thread's ``cwd`` (the parent's
subdirectory, in the worktree) and ``worktreePath`` point into it, so its provider
runs there. The worktree is made before the fork is recorded and removed again
if the record is refused, so a refused fork leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import Protocol, TypeVar

import attrs

from t3orch import gitstore
from t3orch.domain.checkpoint import Checkpoint
from t3orch.domain.run import Run
from t3orch.domain.thread import AppThread
from t3orch.domain.vocab import RUN_TERMINAL, ProviderKind
from t3orch.ids import CommandId, ThreadId
from t3orch.service import CommandResult, CoreService
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import ReadModel

T = TypeVar("T")


class Reads(Protocol):
    async def snapshot(self, fn: Callable[[ReadModel], T]) -> T: ...


@attrs.frozen
class _Source:
    cwd: str
    #: The ref of the source run's checkpoint, if it has one.
    checkpoint_ref: str | None


def _source(store: ReadModel, thread_id: str, run_id: str | None) -> _Source:
    """The parent's cwd and the fork point's checkpoint (the run rules are the
    fork decision's; checked here too, since the worktree is made before it runs)."""
    thread = store.get(AppThread, thread_id)
    if thread is None:
        raise CommandRejected("unknown_thread", f"no thread {thread_id!r}")
    runs = store.select(Run, thread_id=thread_id)
    if run_id is None:
        done = [r for r in runs if r.status in RUN_TERMINAL and r.status != "rolled_back"]
        source = max(done, key=lambda r: r.ordinal) if done else None
    else:
        source = next((r for r in runs if r.id == run_id), None)
        if source is None:
            raise CommandRejected("unknown_run", f"no run {run_id!r} on thread {thread_id}")
    ref = None
    if source is not None and source.checkpoint_id:
        cp = store.get(Checkpoint, source.checkpoint_id)
        ref = cp.ref if cp is not None else None
    return _Source(thread.cwd, ref)


def _inside(path: str, cwd: str, root: str) -> str:
    """The parent's cwd, as the same subdirectory of the worktree at ``path``."""
    try:
        return str(PurePath(path, PurePath(cwd).relative_to(root)))
    except ValueError:  # a cwd reached through a symlink: git names the real top
        return path


async def fork_into_worktree(
    service: CoreService,
    reads: Reads,
    thread_id: str,
    run_id: str | None,
    *,
    title: str | None,
    provider: ProviderKind | None,
    command_id: str,
) -> CommandResult:
    def seen(store: ReadModel) -> bool:
        return store.receipt(CommandId(command_id)) is not None

    if await reads.snapshot(seen):
        # A retry: the first answer (its worktree exists), nothing made again.
        return await service.fork_thread(
            thread_id, run_id, title=title, provider=provider, command_id=command_id
        )
    source = await reads.snapshot(lambda store: _source(store, thread_id, run_id))
    root = await gitstore.work_tree_root(source.cwd)
    if root is None:
        raise CommandRejected(
            "not_a_work_tree", f"{source.cwd} is not in a git work tree: no worktree to fork into"
        )
    new_id = service.ids.new(ThreadId)
    path = gitstore.fork_worktree_path(root, new_id)
    files = await gitstore.resolve(root, source.checkpoint_ref) if source.checkpoint_ref else None
    try:
        await gitstore.add_worktree(root, path, files)
    except (gitstore.GitError, OSError) as exc:
        raise CommandRejected("worktree_failed", f"no worktree at {path}: {exc}") from exc
    cwd = _inside(path, source.cwd, root)
    try:
        return await service.fork_thread(
            thread_id,
            run_id,
            title=title,
            provider=provider,
            new_thread_id=new_id,
            worktree=(cwd, path),
            command_id=command_id,
        )
    except CommandRejected:
        await gitstore.remove_worktree(root, path)
        raise


__all__ = ["Reads", "fork_into_worktree"]
