"""A subagent through the whole daemon path: the stand-in plays a Codex collab spawn.

``fixtures/standin/codex_subagent.ndjson`` has every turn spawn a subagent
(``collabAgentToolCall`` ``spawnAgent``) whose own Codex thread runs a turn
before the parent answers. Checked: the graph it leaves, that its message stays
out of the default view, and that its checkpoint scope nests under the run's
and gets a checkpoint without advancing the run count.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from supervisor.providers import standin_settings
from t3orch.projections.views import thread_detail
from tests.lineage.test_checkpoints import git
from tests.supervisor.support import Rig, rig

TRANSCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "standin" / "codex_subagent.ndjson"


async def _run(r: Rig, tid: str, text: str) -> Any:
    sent = await r.manager.send_message(tid, text)
    run_id = sent.result["runId"]
    await r.wait_run(run_id)
    return await r.wait_for(lambda: (x := r.row("run", run_id)).checkpoint_id and x)


async def test_a_subagent_whose_child_scope_does_not_advance_the_run_count(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    await git(repo, "init", "-q")
    async with rig(tmp_path / "e.db", providers={"standin": standin_settings(TRANSCRIPT)}) as r:
        tid = await r.thread(cwd=str(repo))
        run1 = await _run(r, tid, "first")
        run2 = await _run(r, tid, "second")
        assert (run1.status, run2.status) == ("completed", "completed")
        assert sorted(x.ordinal for x in r.rows("run", tid)) == [1, 2]

        nodes = r.rows("node", tid)
        subs = sorted((n for n in nodes if n.kind == "subagent"), key=lambda n: n.run_id == run2.id)
        assert [n.run_id for n in subs] == [run1.id, run2.id]
        assert all(n.status == "completed" and not n.counts_for_run for n in subs)
        roots = {n.id: n for n in nodes if n.kind == "root_turn"}
        assert all(n.parent_node_id in roots for n in subs)

        children = {p.owner_node_id: p for p in r.rows("provider_thread", tid) if p.owner_node_id}
        assert children[subs[0].id].native_thread_ref == "standin-child-thread-1"
        assert children[subs[1].id].native_thread_ref == "standin-child-thread-2"
        # The child threads never replaced the run's own provider thread.
        assert run1.provider_thread_id == run2.provider_thread_id
        root_pt = r.row("provider_thread", run1.provider_thread_id)
        assert root_pt.owner_node_id is None
        assert root_pt.native_thread_ref == "01a22d23-29ff-7810-a22a-20759d90506a"

        scopes = r.rows("checkpoint_scope", tid)
        by_id = {s.id: s for s in scopes}
        kinds = sorted((s.kind, s.advances_app_run_count) for s in scopes)
        assert kinds == [("root_run", True)] * 2 + [("subagent", False)] * 2
        for sub in subs:
            scope = by_id[sub.checkpoint_scope_id]
            parent = by_id[scope.parent_scope_id]
            assert parent.kind == "root_run" and parent.run_id == sub.run_id
        cps = r.rows("checkpoint", tid)
        # One per run, plus one per subagent that does not count: the runs count 1, 2.
        assert sorted(c.app_run_ordinal for c in cps if c.app_run_ordinal) == [1, 2]
        children = [c for c in cps if c.app_run_ordinal is None]
        assert sorted(c.scope_id for c in children) == sorted(s.checkpoint_scope_id for s in subs)
        assert all(c.ref.startswith(f"refs/t3orch/checkpoints/{tid}/subagents/") for c in children)

        with r.core.reader.snapshot():
            detail = thread_detail(r.core.reader, tid)
        messages = [msgspec.json.decode(m)["text"] for m in detail.messages]
        assert "tests pass" not in messages and messages.count("ack: hello") == 2
        items = [msgspec.json.decode(i) for i in detail.turn_items]
        child_msgs = [i for i in items if i["type"] == "assistant_message" and i["hidden"]]
        assert [i["text"] for i in child_msgs] == ["tests pass", "tests pass"]
        visible = [msgspec.json.decode(i) for i in detail.visible_turn_items]
        assert [i["type"] for i in visible].count("subagent") == 2
        assert not any(i["hidden"] for i in visible)


OUTLIVES = TRANSCRIPT.with_name("codex_subagent_outlives_parent.ndjson")


async def test_a_child_that_outlives_its_parents_turn_completes_later(tmp_path: Path) -> None:
    """Codex spawn without wait: the parent's turn completes first, the child's after.

    ``codex_subagent_outlives_parent.ndjson`` pauses 1.5 s between the parent's
    ``turn/completed`` and the rest of the child's turn, so the test can see the
    run completed with its subagent still open, and change the tree meanwhile.
    """
    repo = tmp_path / "repo"
    repo.mkdir()
    await git(repo, "init", "-q")
    async with rig(tmp_path / "e.db", providers={"standin": standin_settings(OUTLIVES)}) as r:
        tid = await r.thread(cwd=str(repo))
        sent = await r.manager.send_message(tid, "first")
        run1 = await r.wait_run(sent.result["runId"])
        run1 = await r.wait_for(lambda: (x := r.row("run", run1.id)).checkpoint_id and x)
        (sub,) = [n for n in r.rows("node", tid) if n.kind == "subagent"]
        # The run completed from its root while the provider still runs the child.
        assert r.row("node", run1.root_node_id).status == "completed"
        assert sub.status == "running" and sub.completed_at is None
        assert not any(t.type == "subagent_result" for t in r.rows("context_transfer", tid))
        (repo / "late.txt").write_text("written while the child worked\n")

        sub = await r.wait_for(lambda: (n := r.row("node", sub.id)).status != "running" and n)
        assert sub.status == "completed"
        assert r.row("run", run1.id).status == "completed"
        child_pt = r.row("provider_thread", sub.provider_thread_id)
        assert (child_pt.status, child_pt.native_thread_ref) == ("idle", "standin-child-thread-1")
        transfers = sorted(t.type for t in r.rows("context_transfer", tid))
        assert transfers == ["subagent_result", "subagent_spawn"]

        # The child's message arrived after its parent's turn: still the child's, hidden.
        with r.core.reader.snapshot():
            detail = thread_detail(r.core.reader, tid)
        items = [msgspec.json.decode(i) for i in detail.turn_items]
        (child_msg,) = [i for i in items if i["type"] == "assistant_message" and i["hidden"]]
        assert (child_msg["text"], child_msg["status"]) == ("tests pass", "completed")
        assert child_msg["runId"] == run1.id
        messages = [msgspec.json.decode(m)["text"] for m in detail.messages]
        assert messages == ["first", "ack: hello"]

        # Its scope: one checkpoint when the spawn returned, one at the child's end,
        # which (taken after the run's) holds the file written in between.
        scope_id = sub.checkpoint_scope_id
        cps = await r.wait_for(
            lambda: (
                len(x := [c for c in r.rows("checkpoint", tid) if c.scope_id == scope_id]) == 2
                and x
            )
        )
        late = max(cps, key=lambda c: c.ordinal_within_scope)
        assert (late.ordinal_within_scope, late.app_run_ordinal, late.run_id) == (2, None, run1.id)
        assert await git(repo, "show", f"{late.ref}:late.txt") == "written while the child worked\n"
        run_cp = r.row("checkpoint", run1.checkpoint_id)
        with pytest.raises(subprocess.CalledProcessError):
            await git(repo, "show", f"{run_cp.ref}:late.txt")

        # The next run counts 2: child scopes never advance the run count.
        sent = await r.manager.send_message(tid, "second")
        run2 = await r.wait_run(sent.result["runId"])
        await r.wait_for(
            lambda: (
                [n.status for n in r.rows("node", tid) if n.kind == "subagent"] == ["completed"] * 2
            )
        )
        assert sorted(x.ordinal for x in r.rows("run", tid)) == [1, 2]
        assert run2.status == "completed"
        run2 = await r.wait_for(lambda: (x := r.row("run", run2.id)).checkpoint_id and x)
        counted = sorted(c.app_run_ordinal for c in r.rows("checkpoint", tid) if c.app_run_ordinal)
        assert counted == [1, 2]
