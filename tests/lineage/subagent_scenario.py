"""The subagent scenario of issue #7, for the real binaries and their recorded transcripts.

Run 1 asks the model to delegate to a subagent that writes ``child.txt``; run 2 is a
plain message. The fake model servers make the real binaries do it offline: Claude
gets a ``tool_use`` of its ``Agent`` tool (a foreground subagent whose own requests
reach the fake, its Bash call asking us for approval), Codex a ``spawn_agent`` call of
its ``multi_agent_v1`` tools, then ``wait_agent`` (``fixtures/fakes/responses_api.py``).
Checked on the canonical records: a subagent node under the run's root node with a
child provider thread it owns, the child's items hidden, a child checkpoint scope
that does not advance the run count (its checkpoint holds the child's file, the runs
still count 1, 2), and the run completed by its root node only, after the subagent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from t3orch.domain.turn_items import (
    ApprovalRequest,
    AssistantMessage,
    CommandExecution,
    Subagent,
)
from tests.lineage.test_checkpoints import git
from tests.supervisor.support import Rig

#: What run 1 says, per provider: the fake turns it into the provider's subagent call.
PROMPTS = {
    "codex": "SPAWN_AGENT: RUN_SHELL: echo child > child.txt",
    "claude": "USE_TOOL: Agent "
    + json.dumps(
        {
            "description": "write child.txt",
            "prompt": "RUN_BASH: echo child > child.txt",
            "subagent_type": "general-purpose",
            # Foreground: the parent's turn waits for the child's report.
            "run_in_background": False,
        }
    ),
}
WAIT_S = 60.0


async def _send_approving(r: Rig, tid: str, text: str) -> Any:
    """Send ``text``; accept every request the run raises (the child's command) until it ends."""
    sent = await r.manager.send_message(tid, text)
    run_id = sent.result["runId"]
    answered: set[str] = set()
    async with trio.open_nursery() as nursery:

        async def approve() -> None:
            while True:
                for req in r.rows("runtime_request", tid):
                    if req.status == "pending" and req.id not in answered:
                        answered.add(req.id)
                        await r.manager.respond(req.id, "accept")
                await trio.sleep(0.02)

        nursery.start_soon(approve)
        run = await r.wait_run(run_id, ("completed", "failed", "interrupted"), within=WAIT_S)
        nursery.cancel_scope.cancel()
    assert run.status == "completed", run
    return run


def _first(events: list[Any], kind: str, match: Any) -> int:
    return min(e.sequence for e in events if e.type == kind and match(e.payload))


async def subagent_scenario(r: Rig, provider: str, work: Path, *, real: bool) -> None:
    """Run the scenario on a new thread and check what it left.

    ``real``: the binary runs the child's command. A replay has no process to write
    ``child.txt``, so the file is written before run 1 to stand in for it (what the
    child really did is checked against the real binaries only).
    """
    tid = await r.thread(provider, cwd=str(work))
    if real:
        assert not (work / "child.txt").exists()
    else:
        (work / "child.txt").write_text("child\n")
    run1 = await _send_approving(r, tid, PROMPTS[provider])
    run2 = await _send_approving(r, tid, "hello")
    assert [x.ordinal for x in sorted(r.rows("run", tid), key=lambda x: x.ordinal)] == [1, 2]

    # The graph: one subagent node under run 1's root node; it never counts for the run.
    nodes = {n.id: n for n in r.rows("node", tid)}
    [sub] = [n for n in nodes.values() if n.kind == "subagent"]
    assert (sub.run_id, sub.parent_node_id) == (run1.id, run1.root_node_id)
    assert sub.status == "completed" and not sub.counts_for_run
    [item] = [i for i in r.rows("turn_item", tid) if isinstance(i, Subagent)]
    assert item.node_id == sub.id and not item.hidden and item.output

    # Its child provider thread: owned by the node, never the run's own conversation.
    [child] = [p for p in r.rows("provider_thread", tid) if p.owner_node_id is not None]
    assert (child.owner_node_id, child.id) == (sub.id, sub.provider_thread_id)
    assert child.id != run1.provider_thread_id == run2.provider_thread_id
    assert child.native_thread_ref == item.child_native_thread_ref
    assert child.native_thread_ref
    parent_ref = r.row("provider_thread", run1.provider_thread_id).native_thread_ref
    assert child.native_thread_ref != parent_ref
    if provider == "claude":
        # The CLI's task_id: named by `system/task_started` for this Agent call.
        started = [
            e.payload.detail
            for e in r.core.reader.read_events(0, 100_000)
            if e.type == "provider.diagnostic"
            and e.payload.code == "claude.system"
            and e.payload.detail.get("subtype") == "task_started"
        ]
        assert [d["task_id"] for d in started] == [child.native_thread_ref]
        assert item.native_item_ref is not None
        assert started[0]["tool_use_id"] == item.native_item_ref.value
    # (Codex: receiverThreadIds[0], the child's own Codex thread.)
    assert r.row("provider_thread", run1.provider_thread_id).owner_node_id is None

    # The child's items (its command, its report) are hidden, on the child's thread.
    def under_sub(node_id: str | None) -> bool:
        while node_id is not None and node_id != sub.id:
            node_id = nodes[node_id].parent_node_id
        return node_id == sub.id

    theirs = [
        i
        for i in r.rows("turn_item", tid)
        if i.node_id != sub.id and under_sub(i.node_id) and i.id != item.id
    ]
    # An approval the child asks for is the run's request (answered like any other),
    # recorded on the parent's provider thread: visible. Everything else is the child's.
    work_items = [i for i in theirs if not isinstance(i, ApprovalRequest)]
    assert work_items and all(i.hidden for i in work_items)
    assert all(nodes[i.node_id].provider_thread_id == child.id for i in work_items)
    [command] = [i for i in work_items if isinstance(i, CommandExecution)]
    assert "echo child > child.txt" in command.input
    if provider == "codex":
        # Claude 2.1.327 forwards a subagent's tool calls, not its text: the child's
        # report reaches us only as the Agent tool's result (the subagent's output).
        assert any(isinstance(i, AssistantMessage) for i in work_items)

    # Its checkpoint scope nests under run 1's and does not advance the run count.
    scopes = {s.id: s for s in r.rows("checkpoint_scope", tid)}
    scope = scopes[sub.checkpoint_scope_id]
    assert (scope.kind, scope.advances_app_run_count) == ("subagent", False)
    assert (scope.node_id, scope.provider_thread_id) == (sub.id, child.id)
    parent = scopes[scope.parent_scope_id]
    assert (parent.kind, parent.run_id, parent.advances_app_run_count) == (
        "root_run",
        run1.id,
        True,
    )
    cps = r.rows("checkpoint", tid)
    mine = sorted((c for c in cps if c.scope_id == scope.id), key=lambda c: c.ordinal_within_scope)
    assert mine and all(c.app_run_ordinal is None and c.run_id == run1.id for c in mine)
    assert await git(work, "show", f"{mine[-1].ref}:child.txt") == "child\n"
    counted = sorted(
        (c for c in cps if c.app_run_ordinal is not None), key=lambda c: c.app_run_ordinal
    )
    assert [(c.run_id, c.app_run_ordinal) for c in counted] == [(run1.id, 1), (run2.id, 2)]
    assert counted[1].parent_checkpoint_id == counted[0].id
    assert (run1.checkpoint_id, run2.checkpoint_id) == (counted[0].id, counted[1].id)

    # The context in and out is recorded (the provider carried it natively).
    transfers = sorted(t.type for t in r.rows("context_transfer", tid))
    assert transfers == ["subagent_result", "subagent_spawn"]

    # Only the root node completes the run: the subagent ended first, the parent then
    # answered, and only its turn's end completed the run.
    with r.core.reader.snapshot():
        events = r.core.reader.read_thread_events(tid)
    sub_done = _first(
        events, "node.upserted", lambda p: p.node.id == sub.id and p.node.status == "completed"
    )
    run_done = _first(
        events, "run.upserted", lambda p: p.run.id == run1.id and p.run.status == "completed"
    )
    root_done = _first(
        events,
        "node.upserted",
        lambda p: p.node.id == run1.root_node_id and p.node.status == "completed",
    )
    answer = _first(
        events,
        "turn_item.upserted",
        lambda p: (
            isinstance(p.item, AssistantMessage) and p.item.run_id == run1.id and not p.item.hidden
        ),
    )
    assert sub_done < answer < run_done and root_done <= run_done
