"""Checkpoint captures in a real git repository: what an unchanged tree costs, and that
every change is still seen (``t3orch.gitcache``)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from t3orch import gitcache, gitstore
from tests.lineage.test_checkpoints import git


@pytest.fixture
async def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Path]:
    # Files this much older than a walk are trusted (their ctime cannot be set back).
    monkeypatch.setattr(gitcache, "RACY_NS", 100_000_000)
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    await git(root, "init", "-q")
    for i in range(20):
        (root / "src" / f"f{i}.txt").write_text(f"file {i}\n")
    (root / ".gitignore").write_text("build/\n")
    # Old timestamps, as in a work tree nobody is editing this very moment.
    old = time.time() - 3600
    for path in [*root.rglob("*"), root]:
        if ".git" not in path.relative_to(root).parts:
            os.utime(path, (old, old))
    await trio.sleep(0.2)
    yield root
    gitcache.forget(str(root))


async def _tree_files(repo: Path, commit: str) -> list[str]:
    return (await git(repo, "ls-tree", "-r", "--name-only", commit)).split()


async def test_a_checkpoint_of_an_unchanged_tree_runs_no_git(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = await gitstore.work_tree_root(repo)
    assert root is not None
    first, tree = await gitstore.capture(root, "refs/t3orch/checkpoints/t/1", "cp 1", None)
    # From here on there is no git: the second checkpoint must not need one.
    bin_dir = tmp_path / "nogit"
    bin_dir.mkdir()
    (bin_dir / "git").write_text("#!/bin/sh\necho 'git was run' >&2\nexit 97\n")
    (bin_dir / "git").chmod(0o755)
    real_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", f"{bin_dir}:{real_path}")
    assert await gitstore.work_tree_root(repo) == root
    base = await gitstore.resolve(root, "refs/t3orch/checkpoints/t/1")
    assert base == first
    objects = _loose_objects(repo)
    second, tree2 = await gitstore.capture(root, "refs/t3orch/checkpoints/t/2", "cp 2", base)
    assert await gitstore.numstat(root, base, second) == []
    monkeypatch.setenv("PATH", real_path)
    # Unchanged since the checkpoint it follows: no object written, its ref names that
    # checkpoint's commit (same tree, same files), as git itself says.
    assert _loose_objects(repo) == objects
    assert tree2 == tree and second == first
    assert (await git(repo, "rev-parse", "refs/t3orch/checkpoints/t/2")).strip() == first
    assert (await git(repo, "rev-parse", f"{second}^{{tree}}")).strip() == tree
    await git(repo, "fsck", "--no-dangling")
    assert ".gitignore" in await _tree_files(repo, second)
    # A change after it: a new commit, on the one both refs name.
    (repo / "src" / "f1.txt").write_text("changed\n")
    third, _ = await gitstore.capture(root, "refs/t3orch/checkpoints/t/3", "cp 3", second)
    assert third != first
    assert (await git(repo, "rev-parse", f"{third}^")).strip() == first
    assert "cp 3" in await git(repo, "log", "-1", "--format=%B", third)
    assert [f.path for f in await gitstore.numstat(root, second, third)] == ["src/f1.txt"]


def _loose_objects(repo: Path) -> set[str]:
    return {
        str(p.relative_to(repo / ".git" / "objects"))
        for p in (repo / ".git" / "objects").glob("??/*")
    }


async def test_a_small_trees_checkpoint_at_a_turns_end_takes_no_thread_hop(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's end waits for its checkpoint: for a tree of tens of files the walk and
    the root's stat run on the event loop (a worker thread's hop costs more); a tree
    grown past the inline bound is walked on a thread again, and still seen whole."""
    root = await gitstore.work_tree_root(repo)
    assert root is not None
    first, _ = await gitstore.capture(root, "refs/t3orch/checkpoints/t/1", "cp 1", None)
    hops: list[object] = []
    real = trio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kw: Any) -> Any:
        hops.append(fn)
        return await real(fn, *args, **kw)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    assert await gitstore.work_tree_root(repo) == root
    second, tree = await gitstore.capture(root, "refs/t3orch/checkpoints/t/2", "cp 2", first)
    assert hops == []
    monkeypatch.setattr(gitcache, "INLINE_ENTRIES", 5)
    (repo / "src" / "new.txt").write_text("new\n")
    third, tree3 = await gitstore.capture(root, "refs/t3orch/checkpoints/t/3", "cp 3", second)
    assert gitcache.fingerprint in hops
    assert tree3 != tree and "src/new.txt" in await _tree_files(repo, third)


async def test_every_change_after_a_checkpoint_is_in_the_next(repo: Path) -> None:
    root = str(repo)
    ref = "refs/t3orch/checkpoints/t/{}".format
    target = repo / "src" / "f3.txt"
    # Its ctime set at the start of a second, the rewrite below within the same second:
    # git's index compares stat to the second (without USE_NSEC) and would miss it.
    await trio.sleep(1 - time.time() % 1 + 0.01)
    target.chmod(0o644)
    await trio.sleep(0.2)  # older than the racy window
    c1, _ = await gitstore.capture(root, ref(1), "cp", None)
    # Same size, timestamps put back: only the ctime's nanoseconds tell.
    st = target.stat()
    target.write_text("FILE 3\n")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    c2, _ = await gitstore.capture(root, ref(2), "cp", c1)
    assert (await git(repo, "show", f"{c2}:src/f3.txt")) == "FILE 3\n"
    assert [f.path for f in await gitstore.numstat(root, c1, c2)] == ["src/f3.txt"]
    # A new file, a deleted one, and an ignored one.
    (repo / "src" / "new.txt").write_text("new\n")
    (repo / "src" / "f4.txt").unlink()
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("x")
    c3, _ = await gitstore.capture(root, ref(3), "cp", c2)
    files = await _tree_files(repo, c3)
    assert "src/new.txt" in files and "src/f4.txt" not in files
    assert not any(f.startswith("build/") for f in files)
    # A file the index has that the .gitignore now ignores leaves the checkpoint.
    (repo / ".gitignore").write_text("build/\nsrc/f5.txt\n")
    c4, _ = await gitstore.capture(root, ref(4), "cp", c3)
    assert "src/f5.txt" not in await _tree_files(repo, c4)
    await git(repo, "fsck", "--no-dangling")


async def test_a_checkpoint_leaves_the_users_index_and_head_alone(repo: Path) -> None:
    await git(repo, "add", "src/f1.txt")
    await git(repo, "commit", "-q", "-m", "user")
    head = await git(repo, "rev-parse", "HEAD")
    status = await git(repo, "status", "--porcelain")
    await gitstore.capture(str(repo), "refs/t3orch/checkpoints/t/1", "cp", None)
    await gitstore.capture(str(repo), "refs/t3orch/checkpoints/t/2", "cp", None)
    assert await git(repo, "rev-parse", "HEAD") == head
    assert await git(repo, "status", "--porcelain") == status


async def test_a_ref_that_cannot_be_written_in_process_is_left_to_git_unlocked(repo: Path) -> None:
    root = str(repo)
    await gitstore.capture(root, "refs/t3orch/checkpoints/t/1", "cp", None)
    # Empty directories where the ref's file goes: not ours to remove, git's update-ref
    # clears them. Our own lock must be gone by then, or git refuses the ref.
    (repo / ".git" / "refs" / "t3orch" / "checkpoints" / "t" / "2" / "x").mkdir(parents=True)
    c2, _ = await gitstore.capture(root, "refs/t3orch/checkpoints/t/2", "cp", None)
    assert (await git(repo, "rev-parse", "refs/t3orch/checkpoints/t/2")).strip() == c2
    assert not (repo / ".git" / "refs" / "t3orch" / "checkpoints" / "t" / "2.lock").exists()
