"""Filesystem checkpoints of a git work tree, kept where the user's branches never look.

A checkpoint is a commit of the whole work tree (tracked and untracked files,
``.gitignore`` respected) under ``refs/t3orch/checkpoints/<thread>/<n>``. It is
built with a temporary index (``GIT_INDEX_FILE``), so the user's index, HEAD,
branches and stash are never touched. Restoring writes the checkpoint's files
into the work tree (again through a temporary index) and deletes files the
checkpoint did not have.

A checkpoint is on a turn's critical path: what is kept between them so that one of
an unchanged small tree runs no process at all is ``t3orch.gitcache``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import trio

from t3orch import gitcache, timeline

#: The empty tree's id: the base of a first checkpoint's diff.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
REF_PREFIX = "refs/t3orch/checkpoints"
GIT_TIMEOUT_S = 60.0
_IDENTITY = {
    "GIT_AUTHOR_NAME": "t3orch",
    "GIT_AUTHOR_EMAIL": "t3orch@localhost",
    "GIT_COMMITTER_NAME": "t3orch",
    "GIT_COMMITTER_EMAIL": "t3orch@localhost",
}


class GitError(Exception):
    pass


@attrs.frozen
class FileStat:
    path: str
    additions: int
    deletions: int


async def _git(
    cwd: str | Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> str:
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **_IDENTITY, **(env or {})}
    with trio.fail_after(GIT_TIMEOUT_S):
        proc = await trio.run_process(
            ["git", *args],
            cwd=str(cwd),
            env=full_env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise GitError(f"git {' '.join(args[:2])} failed ({proc.returncode}): {err[-500:]}")
    return proc.stdout.decode(errors="replace")


async def work_tree_root(cwd: str | Path) -> str | None:
    """The top of the git work tree holding ``cwd``, or None when there is none."""
    known = gitcache.roots.get(str(cwd))
    # One stat, on the event loop: a worker thread's hop costs more than it.
    if known is not None and os.path.exists(os.path.join(known, ".git")):  # noqa: ASYNC240
        return known  # asked for each turn's checkpoint: one process fewer
    if not await trio.Path(cwd).is_dir():
        return None
    try:
        out = await _git(cwd, "rev-parse", "--show-toplevel")
    except (GitError, OSError):
        return None
    root = out.strip()
    if root:
        gitcache.roots[str(cwd)] = root
    return root or None


def checkpoint_ref(thread_id: str, ordinal: int) -> str:
    return f"{REF_PREFIX}/{thread_id}/{ordinal}"


def undo_checkpoint_ref(thread_id: str, checkpoint_id: str) -> str:
    """The work tree as a rollback found it (the checkpoint that undoes the rollback)."""
    return f"{REF_PREFIX}/{thread_id}/undo/{checkpoint_id}"


def child_checkpoint_ref(thread_id: str, scope_id: str, ordinal: int) -> str:
    # Beside the run refs, not under one: a ref cannot also be a ref directory.
    return f"{REF_PREFIX}/{thread_id}/subagents/{scope_id}/{ordinal}"


async def _snapshot_tree(root: str, index: str) -> str:
    env = {"GIT_INDEX_FILE": index}
    await _git(root, "add", "-A", ".", env=env)
    return (await _git(root, "write-tree", env=env)).strip()


async def _repo(root: str) -> gitcache.Repo:
    repo = gitcache.known(root)
    if repo is None:
        out = await _git(root, "rev-parse", "--git-dir", "--git-common-dir", "--show-object-format")
        repo = gitcache.probe(root, out)
        gitcache.remember(repo)
    return repo


async def _kept_snapshot(repo: gitcache.Repo, blind: list[str]) -> str:
    """The work tree's tree through the repository's kept private index: ``add -A``
    re-reads only what changed (and ``blind``, which git's stat check may miss); files
    ignored since they were added leave it."""
    env = {"GIT_INDEX_FILE": str(repo.index)}
    if blind:
        await _git(repo.root, "rm", "-q", "--cached", "--ignore-unmatch", "--", *blind, env=env)
    await _git(repo.root, "add", "-A", ".", env=env)
    out = await _git(
        repo.root, "ls-files", "-z", "--cached", "--ignored", "--exclude-standard", env=env
    )
    ignored = [p for p in out.split("\0") if p]
    if ignored:
        await _git(repo.root, "rm", "-q", "--cached", "--", *ignored, env=env)
    return (await _git(repo.root, "write-tree", env=env)).strip()


async def capture(root: str, ref: str, message: str, parent: str | None) -> tuple[str, str]:
    """Commit the work tree under ``ref``; returns (commit, tree).

    An unchanged tree (its fingerprint equal to the last capture's) is not read
    again; the commit and ref are written in-process where that is safe
    (``t3orch.gitcache``); anything unexpected falls back to git alone.
    """
    try:
        repo = await _repo(root)
        timeline.stamp("checkpoint.repo")
        async with repo.lock:
            return await _capture(repo, ref, message, parent)
    except (GitError, OSError):
        gitcache.forget(root)
    with tempfile.TemporaryDirectory(prefix="t3cp") as tmp:
        tree = await _snapshot_tree(root, os.path.join(tmp, "index"))
    args = ["commit-tree", tree, "-m", message]
    if parent:
        args += ["-p", parent]
    commit = (await _git(root, *args)).strip()
    await _git(root, "update-ref", ref, commit)
    return commit, tree


async def _capture(
    repo: gitcache.Repo, ref: str, message: str, parent: str | None
) -> tuple[str, str]:
    # Taken before the tree is read: a change during the read shows at the next one.
    timeline.stamp("checkpoint.fingerprint")
    seen = await _fingerprint(repo)
    timeline.stamp("checkpoint.fingerprinted")
    if seen is not None and repo.tree is not None and seen == repo.fingerprint:
        tree = repo.tree  # unchanged since the last capture: nothing to read
    else:
        blind = gitcache.git_blind(repo.last_seen, seen)
        repo.fingerprint = None
        tree = await _kept_snapshot(repo, blind)
        repo.tree = tree
        # A racy one is still what the next capture compares with for git_blind.
        repo.fingerprint = seen if seen is not None and not seen.racy else None
        repo.last_seen = seen
    if parent is not None and repo.trees.get(parent) == tree:
        # Unchanged since the checkpoint it follows (made here, of this very tree): no
        # new commit object, the ref names that one. Its files, diff and restore are the
        # same; a file created costs ~0.5 ms (up to several) on a disk that is syncing.
        commit = parent
        if repo.native:
            gitcache.write_ref(repo, ref, commit)
        else:
            await _git(repo.root, "update-ref", ref, commit)
        timeline.stamp("checkpoint.written")
    elif repo.native:
        commit = gitcache.write_commit(repo, tree, parent, message)
        gitcache.write_ref(repo, ref, commit)
        timeline.stamp("checkpoint.written")
    else:
        args = ["commit-tree", tree, "-m", message]
        if parent:
            args += ["-p", parent]
        commit = (await _git(repo.root, *args)).strip()
        await _git(repo.root, "update-ref", ref, commit)
        repo.trees[commit] = tree
    return commit, tree


async def _fingerprint(repo: gitcache.Repo) -> gitcache.Fingerprint | None:
    """The work tree's fingerprint: walked on the event loop while it was small at the
    last walk (and stays so), else on a worker thread."""
    last = repo.last_seen
    if last is not None and len(last.entries) <= gitcache.INLINE_ENTRIES:
        try:
            return gitcache.fingerprint(repo.root, limit=gitcache.INLINE_ENTRIES)
        except gitcache.TooLarge:
            pass  # it grew: the whole walk goes to a thread
    return await trio.to_thread.run_sync(gitcache.fingerprint, repo.root)


async def numstat(root: str, base: str | None, target: str) -> list[FileStat]:
    """Per-file additions/deletions from ``base`` (None: nothing) to ``target``."""
    repo = gitcache.known(root)
    if repo is not None and base is not None:
        tree = repo.trees.get(target)
        if tree is not None and tree == repo.trees.get(base):
            return []  # both made here, of one tree: nothing changed
    out = await _git(root, "diff", "--numstat", "--no-renames", base or EMPTY_TREE, target)
    stats = []
    for line in out.splitlines():
        parts = line.split("\t", 2)
        if len(parts) != 3:
            continue
        adds, dels, path = parts
        # Binary files show "-": counted as no lines.
        stats.append(
            FileStat(path, int(adds) if adds.isdigit() else 0, int(dels) if dels.isdigit() else 0)
        )
    return stats


async def diff(root: str, base: str, target: str) -> str:
    return await _git(root, "diff", "--no-renames", base, target)


@attrs.frozen
class RestorePlan:
    """What restoring a checkpoint would do to the work tree as it is now."""

    #: The tree of the work tree now (tracked and untracked files, ignored ones left out).
    tree: str
    #: Files the checkpoint writes back: changed or deleted since it was taken.
    restore: list[str]
    #: Files created since the checkpoint: restoring it deletes them.
    delete: list[str]


async def plan_restore(root: str, commit: str) -> RestorePlan:
    """What :func:`restore` would change, computed without touching a file.

    The work tree is snapshotted through a temporary index (its blobs land in the
    object store, as a checkpoint's do; the user's index, HEAD and files are untouched).
    """
    with tempfile.TemporaryDirectory(prefix="t3pl") as tmp:
        tree = await _snapshot_tree(root, os.path.join(tmp, "now"))
    out = await _git(root, "diff", "--name-status", "--no-renames", "-z", commit, tree)
    fields = out.split("\0")
    restore: list[str] = []
    delete: list[str] = []
    for status, path in zip(fields[::2], fields[1::2], strict=False):
        if not path:
            continue
        (delete if status == "A" else restore).append(path)
    return RestorePlan(tree, restore, delete)


async def restore(root: str, commit: str) -> list[str]:
    """Make the work tree's files those of ``commit``; returns the paths deleted.

    Files the checkpoint has are written back; files created since are removed;
    ignored files are left alone. The user's index and HEAD are untouched.
    """
    with tempfile.TemporaryDirectory(prefix="t3rb") as tmp:
        current = await _snapshot_tree(root, os.path.join(tmp, "now"))
        added = await _git(
            root, "diff", "--name-only", "--no-renames", "--diff-filter=A", commit, current
        )
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "restore")}
        await _git(root, "read-tree", commit, env=env)
        await _git(root, "checkout-index", "-a", "-f", env=env)
    removed = [p for p in added.splitlines() if p]
    await trio.to_thread.run_sync(_remove, root, removed)
    return removed


def _remove(root: str, paths: list[str]) -> None:
    for path in paths:
        target = Path(root) / path
        if target.is_file() or target.is_symlink():
            target.unlink()


def fork_worktree_path(root: str, thread_id: str) -> str:
    """Where ``fork --worktree`` puts a fork's work tree: beside the repository's,
    where the user looks (``git worktree list`` names it too)."""
    top = Path(root)
    return str(top.parent / f"{top.name}-fork-{thread_id}")


async def add_worktree(root: str, path: str, files_from: str | None) -> None:
    """A git worktree at ``path`` on the repository's HEAD (detached: no branch is
    made), its files then made those of ``files_from`` (a checkpoint) when given."""
    if await resolve(root, "HEAD") is None:
        raise GitError(f"{root} has no commit yet to make a worktree from")
    await _git(root, "worktree", "add", "--detach", "--quiet", path, "HEAD")
    if files_from is not None:
        await restore(path, files_from)


async def remove_worktree(root: str, path: str) -> None:
    await _git(root, "worktree", "remove", "--force", path)


async def resolve(root: str, ref: str) -> str | None:
    repo = gitcache.known(root)
    written = repo.refs.get(ref) if repo is not None else None
    if written is not None:
        return written
    try:
        return (await _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")).strip()
    except GitError:
        return None


__all__: Sequence[str] = [
    "EMPTY_TREE",
    "FileStat",
    "GitError",
    "RestorePlan",
    "add_worktree",
    "capture",
    "checkpoint_ref",
    "child_checkpoint_ref",
    "diff",
    "fork_worktree_path",
    "numstat",
    "plan_restore",
    "remove_worktree",
    "resolve",
    "restore",
    "undo_checkpoint_ref",
    "work_tree_root",
]
