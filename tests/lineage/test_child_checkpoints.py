"""Child checkpoints: a subagent's scope gets a real git checkpoint when the child ends.

The stand-in plays the Codex collab transcript, slowed down after the spawn
completes, so the test can change the work tree between the child's end and the
run's end and see which checkpoint holds what.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from supervisor.providers import standin_settings
from t3orch.store.errors import CommandRejected
from tests.lineage.test_checkpoints import git
from tests.supervisor.support import Rig, rig

TRANSCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "standin" / "codex_subagent.ndjson"
#: The pause between the subagent's end and the parent's reply.
PAUSE_MS = 3000.0


def slowed_transcript(tmp_path: Path) -> Path:
    """The fixture with a pause after the spawn item completes (nothing else changed)."""
    lines = TRANSCRIPT.read_text().splitlines()
    out, after_spawn = [], False
    for line in lines:
        step = json.loads(line)
        frame = step.get("frame") or {}
        item = (frame.get("params") or {}).get("item") or {}
        if after_spawn and step.get("step") == "emit_inbound":
            step["afterMs"] = PAUSE_MS
            after_spawn = False
            line = json.dumps(step)
        if frame.get("method") == "item/completed" and item.get("type") == "collabAgentToolCall":
            after_spawn = True
        out.append(line)
    path = tmp_path / "codex_subagent_slow.ndjson"
    path.write_text("\n".join(out) + "\n")
    return path


def _child_cps(r: Rig, tid: str) -> list[Any]:
    return [c for c in r.rows("checkpoint", tid) if c.app_run_ordinal is None]


async def test_a_subagent_checkpoint_is_taken_when_the_child_ends(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    await git(repo, "init", "-q")
    (repo / "before.txt").write_text("a\nb\n")
    providers = {"standin": standin_settings(slowed_transcript(tmp_path))}
    async with rig(tmp_path / "e.db", providers=providers) as r:
        tid = await r.thread(cwd=str(repo))
        sent = await r.manager.send_message(tid, "hello")
        run_id = sent.result["runId"]
        (child,) = await r.wait_for(lambda: _child_cps(r, tid))
        # The child has ended; the parent has not answered yet: change the tree now.
        assert r.row("run", run_id).status == "running"
        (repo / "after.txt").write_text("late\n")
        await r.wait_run(run_id)
        run = await r.wait_for(lambda: (x := r.row("run", run_id)).checkpoint_id and x)

        scope = r.row("checkpoint_scope", child.scope_id)
        assert (scope.kind, scope.advances_app_run_count) == ("subagent", False)
        node = r.row("node", scope.node_id)
        assert node.kind == "subagent" and node.checkpoint_scope_id == scope.id
        assert (child.run_id, child.node_id, child.ordinal_within_scope) == (run_id, node.id, 1)
        assert child.ref == f"refs/t3orch/checkpoints/{tid}/subagents/{scope.id}/1"
        assert [(f.path, f.additions) for f in child.files] == [("before.txt", 2)]
        # A real commit of the tree at the child's end: after.txt did not exist yet.
        assert (await git(repo, "show", f"{child.ref}:before.txt")) == "a\nb\n"
        tree = await git(repo, "ls-tree", "--name-only", child.ref)
        assert tree.split() == ["before.txt"]

        root = r.row("checkpoint", run.checkpoint_id)
        assert root.app_run_ordinal == 1 and "after.txt" in {f.path for f in root.files}
        # The run count is the runs': one run, one counted checkpoint.
        counted = [c for c in r.rows("checkpoint", tid) if c.app_run_ordinal is not None]
        assert len(counted) == 1 and len(_child_cps(r, tid)) == 1
        refs = await git(repo, "for-each-ref", "--format=%(refname)", "refs/t3orch")
        assert sorted(refs.split()) == sorted([root.ref, child.ref])
        assert "refs/t3orch" not in await git(repo, "branch", "-a")

        # Rolling back to a subagent's checkpoint is refused, naming why.
        with pytest.raises(CommandRejected) as info:
            await r.manager.rollback(tid, child.id)
        assert info.value.code == "subagent_checkpoint"
        assert "does not advance the run count" in str(info.value)


async def test_no_git_no_child_checkpoint(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    async with rig(tmp_path / "e.db", providers={"standin": standin_settings(TRANSCRIPT)}) as r:
        tid = await r.thread(cwd=str(plain))
        sent = await r.manager.send_message(tid, "hello")
        run = await r.wait_run(sent.result["runId"])
        assert run.status == "completed"
        assert r.rows("checkpoint", tid) == []
        assert any(s.kind == "subagent" for s in r.rows("checkpoint_scope", tid))
