"""``fork --worktree`` with the real Codex and Claude binaries (loopback fake models).

The fork's provider must run in the fork's own worktree: Codex forks natively
with the worktree as the fork's cwd; Claude (sessions are kept per cwd) forks
portably there.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.worktrees import fork_into_worktree
from tests.real.test_lineage_real import Both, both, pytestmark  # noqa: F401

T = TypeVar("T")


class _Reads:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def snapshot(self, fn: Callable[[SQLiteStore], T]) -> T:
        with self.store.snapshot():
            return fn(self.store)


def _commit(work: Path) -> None:
    (work / "a.txt").write_text("one\n")
    for args in (["add", "a.txt"], ["commit", "-q", "-m", "user commit"]):
        subprocess.run(
            ["git", "-c", "user.name=u", "-c", "user.email=u@x", *args], cwd=work, check=True
        )


async def _fork(b: Both, tid: str, run_id: str | None, cid: str) -> tuple[str, Path]:
    res = await fork_into_worktree(
        b.r.core.service,
        _Reads(b.r.core.reader),
        tid,
        run_id,
        title=None,
        provider=None,
        command_id=cid,
    )
    fork = res.result["threadId"]
    thread = b.r.row("thread", fork)
    assert thread.worktree_path is not None and thread.cwd == thread.worktree_path
    return fork, Path(thread.worktree_path)


async def test_codex_worktree_fork_is_native_and_runs_in_the_worktree(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        _commit(b.work)
        tid = await b.r.thread("codex", cwd=str(b.work))
        first = await b.checkpointed(tid, "remember the word PAPAYA")
        fork, wt = await _fork(b, tid, first.id, "c-fork-codex")
        assert (wt / "a.txt").read_text() == "one\n"
        await b.send(fork, "RECALL")
        [transfer] = b.r.rows("context_transfer", fork)
        assert transfer.status == "resolved_native"
        assert b.codex_last_user_texts() == ["remember the word PAPAYA", "RECALL"]
        # The fork's turn runs in the worktree (Codex tells the model its cwd).
        assert f"<cwd>{wt}</cwd>" in json.dumps(b.codex_fake.requests[-1])
        [run] = b.r.rows("run", fork)
        assert b.r.row("provider_thread", run.provider_thread_id).cwd == str(wt)


async def test_claude_worktree_fork_is_portable_and_runs_in_the_worktree(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        _commit(b.work)
        tid = await b.r.thread("claude", cwd=str(b.work))
        await b.checkpointed(tid, "remember the word PAPAYA")
        fork, wt = await _fork(b, tid, None, "c-fork-claude")
        await b.send(fork, "fork hears MANGO")
        [transfer] = b.r.rows("context_transfer", fork)
        assert transfer.status == "resolved_portable"
        assert "remember the word PAPAYA" in b.claude_last_user_text()
        # Claude tells the model its working directory: the worktree's.
        assert str(wt) in json.dumps(b.claude_fake.requests[-1])
        [run] = b.r.rows("run", fork)
        assert b.r.row("provider_thread", run.provider_thread_id).cwd == str(wt)
