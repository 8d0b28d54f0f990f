"""A subagent through the whole daemon path: the stand-in plays a Codex collab spawn.

``fixtures/standin/codex_subagent.ndjson`` has every turn spawn a subagent
(``collabAgentToolCall`` ``spawnAgent``) whose own Codex thread runs a turn
before the parent answers. Checked: the graph it leaves, that its message stays
out of the default view, and that its checkpoint scope nests under the run's
and gets a checkpoint without advancing the run count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

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
