"""Checkpoints at each root run's end and rollback, in a real git repository (stand-in)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from t3orch.events import ProviderDiagnostic
from tests.supervisor.support import Rig, rig


async def git(repo: Path, *args: str) -> str:
    proc = await trio.run_process(
        ["git", "-c", "user.name=u", "-c", "user.email=u@x", *args],
        cwd=str(repo),
        capture_stdout=True,
    )
    return proc.stdout.decode()


async def _run(r: Rig, tid: str, text: str) -> Any:
    sent = await r.manager.send_message(tid, text)
    run_id = sent.result["runId"]
    await r.wait_run(run_id)
    # The checkpoint follows the run's end, before the next dispatch.
    return await r.wait_for(lambda: (x := r.row("run", run_id)).checkpoint_id and x)


async def test_checkpoints_then_rollback_restores_files_and_marks_runs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    await git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    await git(repo, "add", "a.txt")
    await git(repo, "commit", "-q", "-m", "user commit")
    head = await git(repo, "rev-parse", "HEAD")
    (repo / "user-untracked.txt").write_text("mine\n")
    status_before = await git(repo, "status", "--porcelain")

    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread(cwd=str(repo))
        run1 = await _run(r, tid, "first")
        (repo / "a.txt").write_text("one\ntwo\n")
        (repo / "b.txt").write_text("b\n")
        run2 = await _run(r, tid, "second")
        (repo / "c.txt").write_text("c1\nc2\n")
        (repo / "a.txt").write_text("two\n")
        run3 = await _run(r, tid, "third")

        cps = {c.app_run_ordinal: c for c in r.rows("checkpoint", tid)}
        assert sorted(cps) == [1, 2, 3]
        assert cps[1].ref == f"refs/t3orch/checkpoints/{tid}/1"
        assert cps[2].parent_checkpoint_id == cps[1].id
        files2 = {f.path: (f.additions, f.deletions) for f in cps[2].files}
        assert files2 == {"a.txt": (1, 0), "b.txt": (1, 0)}
        files3 = {f.path: (f.additions, f.deletions) for f in cps[3].files}
        assert files3 == {"a.txt": (0, 1), "c.txt": (2, 0)}
        scopes = r.rows("checkpoint_scope", tid)
        assert {(s.kind, s.advances_app_run_count) for s in scopes} == {("root_run", True)}
        items = [i for i in r.rows("turn_item", tid) if type(i).__name__ == "CheckpointItem"]
        assert [i.run_id for i in items] == [run1.id, run2.id, run3.id]

        # The user's branches, HEAD and index never saw any of it.
        assert await git(repo, "rev-parse", "HEAD") == head
        assert await git(repo, "diff", "--cached", "--name-only") == ""
        assert "refs/t3orch" not in await git(repo, "branch", "-a")
        refs = await git(repo, "for-each-ref", "--format=%(refname)", "refs/t3orch")
        assert len(refs.split()) == 3

        res = await r.manager.rollback(tid, cps[1].id)
        assert res.result["rolledBackRuns"] == [2, 3]
        assert (repo / "a.txt").read_text() == "one\n"
        assert not (repo / "b.txt").exists() and not (repo / "c.txt").exists()
        assert (repo / "user-untracked.txt").read_text() == "mine\n"
        assert await git(repo, "status", "--porcelain") == status_before
        runs = sorted(r.rows("run", tid), key=lambda x: x.ordinal)
        assert [x.status for x in runs] == ["completed", "rolled_back", "rolled_back"]
        assert {
            c.app_run_ordinal: c.status
            for c in r.rows("checkpoint", tid)
            if c.app_run_ordinal is not None
        } == {1: "ready", 2: "stale", 3: "stale"}
        # The work tree as the rollback found it: the checkpoint that undoes it.
        undo = r.row("checkpoint", res.result["undoCheckpointId"])
        assert undo.app_run_ordinal is None and undo.status == "ready"
        assert undo.run_id == run3.id and undo.ref.startswith(f"refs/t3orch/checkpoints/{tid}/")
        assert r.row("checkpoint_scope", undo.scope_id).kind == "manual"
        assert sorted(res.result["deleted"]) == ["b.txt", "c.txt"]
        assert res.result["restored"] == ["a.txt"]
        # The stand-in's provider thread cannot be reverted natively: it is closed, and
        # the next run starts a new one told only what is left (run 1).
        assert r.row("provider_thread", run1.provider_thread_id).status == "closed"
        run4 = await _run(r, tid, "fourth")
        assert run4.provider_thread_id != run1.provider_thread_id
        handoff = r.row("context_handoff", run4.context_handoff_id)
        assert handoff.strategy == "full_thread_summary"
        assert "User: first" in handoff.summary_text
        assert "second" not in handoff.summary_text
        # Run 4's checkpoint diffs against run 1's (the rolled-back ones are skipped).
        cp4 = r.row("checkpoint", run4.checkpoint_id)
        assert cp4.parent_checkpoint_id == cps[1].id and cp4.files == []


async def test_a_cwd_outside_git_disables_checkpoints_once(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread(cwd=str(plain))
        for text in ("one", "two"):
            sent = await r.manager.send_message(tid, text)
            await r.wait_run(sent.result["runId"])

        def notes() -> list[ProviderDiagnostic]:
            return [
                e.payload
                for e in r.core.reader.read_events(0, 10_000)
                if isinstance(e.payload, ProviderDiagnostic)
                and e.payload.code == "checkpoints_disabled"
            ]

        [note] = await r.wait_for(notes)
        assert note.detail["threadId"] == tid
        assert r.rows("checkpoint", tid) == []
        assert all(x.status == "completed" for x in r.rows("run", tid))


async def test_completion_barrier_commits_the_checkpoint_before_the_terminal_event(
    tmp_path: Path,
) -> None:
    """flush text -> finalize items -> checkpoint -> publish the run's terminal event."""
    repo = tmp_path / "repo"
    repo.mkdir()
    await git(repo, "init", "-q")
    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread(cwd=str(repo))
        run = await _run(r, tid, "first")
        with r.core.reader.snapshot():
            events = list(r.core.reader.iter_events())
        ended = next(
            e.sequence
            for e in events
            if e.type == "run.upserted"
            and e.payload.run.id == run.id
            and e.payload.run.status == "completed"
        )  # type: ignore[union-attr]
        checkpointed = next(e.sequence for e in events if e.type == "checkpoint.upserted")
        items_final = max(
            e.sequence
            for e in events
            if e.type == "turn_item.upserted"
            and e.payload.item.run_id == run.id  # type: ignore[union-attr]
            and type(e.payload.item).__name__ != "CheckpointItem"
        )  # type: ignore[union-attr]
        assert items_final < checkpointed < ended
