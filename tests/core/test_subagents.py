"""Subagents through the real core: graph shape, hidden items, completion in either order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import msgspec

from t3orch.core import open_core
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    Subagent,
)
from t3orch.projections.check import compare, rebuild
from t3orch.projections.views import execution_graph, thread_detail
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RuntimeExited,
    SubagentEnded,
    TurnCompleted,
    TurnStarted,
)
from tests.store.support import new_thread, started_turn

SPAWN = Subagent(tool_name="Task", description="look around", prompt="find x")


def _detail(core: Any, tid: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Any]]:
    with core.reader.snapshot():
        d = thread_detail(core.reader, tid)
    items = [msgspec.json.decode(r) for r in d.turn_items]
    visible = [msgspec.json.decode(r) for r in d.visible_turn_items]
    messages = [msgspec.json.decode(r) for r in d.messages]
    return items, visible, messages


def _graph(core: Any, tid: str) -> dict[str, Any]:
    with core.reader.snapshot():
        g = execution_graph(core.reader, tid)
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(g))
    return out


def _node(graph: dict[str, Any], kind: str) -> dict[str, Any]:
    (node,) = [n for n in graph["nodes"] if n["kind"] == kind]
    return node


def _subagent_work(child_text: str = "child says hi") -> list[ProviderEvent]:
    return [
        TurnStarted(native_turn_ref="t1"),
        ItemStarted(native_item_ref="task1", content=SPAWN),
        ItemStarted(
            native_item_ref="cm1", content=AssistantMessage(), parent_native_item_ref="task1"
        ),
        ItemDelta(native_item_ref="cm1", text=child_text),
        ItemCompleted(native_item_ref="cm1", content=AssistantMessage(text=child_text)),
        ItemStarted(
            native_item_ref="cc1",
            content=CommandExecution(input="grep -r x"),
            parent_native_item_ref="task1",
        ),
        # A grandchild: under the subagent's command, still the subagent's work.
        ItemStarted(
            native_item_ref="gc1", content=AssistantMessage(), parent_native_item_ref="cc1"
        ),
        ItemCompleted(native_item_ref="gc1", content=AssistantMessage(text="deep")),
        ItemCompleted(
            native_item_ref="cc1", content=CommandExecution(input="grep -r x", exit_code=0)
        ),
    ]


async def test_subagent_graph_shape_and_hidden_children(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid, "delegate it")
        assert b.turn is not None
        await core.service.ingest(
            b,
            [
                *_subagent_work(),
                ItemCompleted(
                    native_item_ref="task1",
                    content=Subagent(
                        tool_name="Task",
                        description="look around",
                        prompt="find x",
                        child_native_thread_ref="native-child",
                        output="x is in y.py",
                    ),
                ),
                ItemStarted(native_item_ref="m1", content=AssistantMessage()),
                ItemCompleted(native_item_ref="m1", content=AssistantMessage(text="parent answer")),
                TurnCompleted(native_turn_ref="t1", status="completed"),
            ],
        )
        graph = _graph(core, tid)
        root = _node(graph, "root_turn")
        sub = _node(graph, "subagent")
        assert sub["parentNodeId"] == root["id"] and sub["rootNodeId"] == root["id"]
        assert sub["countsForRun"] is False and sub["status"] == "completed"
        assert root["status"] == "completed"
        # The child provider thread is owned by the subagent node and listed in the graph.
        (child_pt,) = [p for p in graph["providerThreads"] if p["ownerNodeId"]]
        assert child_pt["ownerNodeId"] == sub["id"] and child_pt["appThreadId"] == tid
        assert child_pt["nativeThreadRef"] == "native-child" and child_pt["status"] == "idle"
        assert sub["providerThreadId"] == child_pt["id"]
        # The root provider thread is untouched by the child.
        root_pt = _graph_pt(graph, b.provider_thread_id)
        assert root_pt["ownerNodeId"] is None and root_pt["nativeThreadRef"] is None
        # The subagent's own items run on its provider thread, under its node.
        by_ref = {n["nativeItemRef"]["value"]: n for n in graph["nodes"] if n["nativeItemRef"]}
        assert by_ref["cm1"]["parentNodeId"] == sub["id"]
        assert by_ref["gc1"]["parentNodeId"] == by_ref["cc1"]["id"]
        assert {by_ref[r]["providerThreadId"] for r in ("cm1", "cc1", "gc1")} == {child_pt["id"]}
        assert by_ref["m1"]["providerThreadId"] == b.provider_thread_id
        # Child scope: subagent kind, does not advance the run count.
        (scope,) = graph["checkpointScopes"]
        assert scope["kind"] == "subagent" and scope["advancesAppRunCount"] is False
        assert scope["nodeId"] == sub["id"] and scope["providerThreadId"] == child_pt["id"]
        assert scope["parentScopeId"] is None  # the run has no root scope yet
        assert sub["checkpointScopeId"] == scope["id"]
        # The context in and out: consumed transfers, pointing at the subagent item.
        transfers = {t["type"]: t for t in graph["transfers"]}
        assert set(transfers) == {"subagent_spawn", "subagent_result"}
        assert {t["status"] for t in transfers.values()} == {"consumed"}
        spawn_item = transfers["subagent_spawn"]["sourcePoint"]["turnItemId"]
        assert transfers["subagent_result"]["sourcePoint"]["turnItemId"] == spawn_item
        assert transfers["subagent_result"]["sourcePoint"]["providerThreadRef"] == "native-child"

        items, visible, messages = _detail(core, tid)
        refs = {(i["nativeItemRef"] or {}).get("value"): i for i in items}
        assert refs["task1"]["type"] == "subagent" and not refs["task1"]["hidden"]
        assert refs["task1"]["output"] == "x is in y.py"
        assert all(refs[r]["hidden"] for r in ("cm1", "cc1", "gc1"))
        assert not refs["m1"]["hidden"]
        visible_refs = [(i["nativeItemRef"] or {}).get("value") for i in visible]
        assert "task1" in visible_refs and "m1" in visible_refs
        assert not {"cm1", "cc1", "gc1"} & set(visible_refs)
        assert [m["text"] for m in messages] == ["delegate it", "parent answer"]
        with core.reader.snapshot():
            rebuilt, _, _ = rebuild(core.reader.iter_events())
            assert compare(core.reader.all_rows(), rebuilt) == []


def _graph_pt(graph: dict[str, Any], pt_id: str | None) -> dict[str, Any]:
    (pt,) = [p for p in graph["providerThreads"] if p["id"] == pt_id]
    return pt


async def test_child_failing_first_never_ends_its_parent(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        assert b.turn is not None
        await core.service.ingest(
            b,
            [
                *_subagent_work(),
                ItemCompleted(native_item_ref="task1", content=SPAWN, status="failed"),
            ],
        )
        graph = _graph(core, tid)
        assert _node(graph, "subagent")["status"] == "failed"
        assert _node(graph, "root_turn")["status"] == "running"
        with core.reader.snapshot():
            run = core.reader.row("run", b.turn.run_id)
        assert run is not None and run.decode().status == "running"
        # The parent keeps working after its child ended, then completes the run.
        await core.service.ingest(
            b,
            [
                ItemStarted(native_item_ref="m1", content=AssistantMessage()),
                ItemCompleted(native_item_ref="m1", content=AssistantMessage(text="done anyway")),
                TurnCompleted(native_turn_ref="t1", status="completed"),
            ],
        )
        graph = _graph(core, tid)
        assert _node(graph, "subagent")["status"] == "failed"
        assert _node(graph, "root_turn")["status"] == "completed"
        with core.reader.snapshot():
            run = core.reader.row("run", b.turn.run_id)
        assert run is not None and run.decode().status == "completed"


async def test_parent_turn_ending_first_interrupts_the_open_subagent(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        assert b.turn is not None
        await core.service.ingest(
            b,
            [
                TurnStarted(native_turn_ref="t1"),
                ItemStarted(native_item_ref="task1", content=SPAWN),
                ItemStarted(
                    native_item_ref="cm1",
                    content=AssistantMessage(),
                    parent_native_item_ref="task1",
                ),
                ItemDelta(native_item_ref="cm1", text="half a thought"),
                TurnCompleted(native_turn_ref="t1", status="completed"),
            ],
        )
        graph = _graph(core, tid)
        assert _node(graph, "root_turn")["status"] == "completed"
        assert _node(graph, "subagent")["status"] == "interrupted"
        (child_pt,) = [p for p in graph["providerThreads"] if p["ownerNodeId"]]
        assert child_pt["status"] == "idle"
        # Nothing came back from an interrupted subagent.
        assert [t["type"] for t in graph["transfers"]] == ["subagent_spawn"]
        with core.reader.snapshot():
            run = core.reader.row("run", b.turn.run_id)
        assert run is not None and run.decode().status == "completed"
        items, _, messages = _detail(core, tid)
        child = next(i for i in items if (i["nativeItemRef"] or {}).get("value") == "cm1")
        assert child["hidden"] and child["status"] == "interrupted"
        assert child["text"] == "half a thought"
        assert all(m["text"] != "half a thought" for m in messages)
        # The child's late completion, after its parent's turn, reopens nothing.
        await core.service.ingest(
            b.with_turn(None),
            [ItemCompleted(native_item_ref="task1", content=SPAWN)],
        )
        assert _node(_graph(core, tid), "subagent")["status"] == "interrupted"
        with core.reader.snapshot():
            run = core.reader.row("run", b.turn.run_id)
        assert run is not None and run.decode().status == "completed"


async def test_child_scope_nests_under_the_root_scope_without_advancing_the_count(
    tmp_path: Path,
) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        assert b.turn is not None
        await core.service.ingest(
            b,
            [
                *_subagent_work(),
                ItemCompleted(native_item_ref="task1", content=SPAWN),
                TurnCompleted(native_turn_ref="t1", status="completed"),
            ],
        )
        await core.service.record_checkpoint(b.turn.run_id, "/tmp", "refs/t3orch/x/1", [], None)
        scopes = {s["kind"]: s for s in _graph(core, tid)["checkpointScopes"]}
        assert scopes["subagent"]["parentScopeId"] == scopes["root_run"]["id"]
        assert scopes["root_run"]["advancesAppRunCount"] is True
        assert scopes["subagent"]["advancesAppRunCount"] is False
        # Run counts come from runs only: the next run is ordinal 2, not 3.
        b2 = await started_turn(core.service, tid, "again")
        assert b2.turn is not None
        with core.reader.snapshot():
            runs = [r.decode() for r in core.reader.rows("run", thread_id=tid)]
        assert sorted(r.ordinal for r in runs) == [1, 2]
        _, _, messages = _detail(core, tid)
        assert [m["text"] for m in messages][-1] == "again"
        with core.reader.snapshot():
            cps = [c.decode() for c in core.reader.rows("checkpoint", thread_id=tid)]
        assert [c.app_run_ordinal for c in cps] == [1]


#: A Codex spawn call returning before its child works (``receiverThreadIds`` set).
SPAWNED = Subagent(
    tool_name="collab/spawnAgent",
    prompt="find x",
    child_native_thread_ref="native-child",
    output={"native-child": {"status": "pendingInit", "message": None}},
)


def _spawn_returns_then_child_starts() -> list[ProviderEvent]:
    return [
        TurnStarted(native_turn_ref="t1"),
        ItemStarted(native_item_ref="spawn1", content=SPAWN),
        ItemCompleted(native_item_ref="spawn1", content=SPAWNED, child_continues=True),
        ItemStarted(
            native_item_ref="cm1", content=AssistantMessage(), parent_native_item_ref="spawn1"
        ),
        ItemStarted(native_item_ref="m1", content=AssistantMessage()),
        ItemCompleted(native_item_ref="m1", content=AssistantMessage(text="parent answer")),
    ]


def _item(core: Any, tid: str, ref: str) -> dict[str, Any]:
    items = _detail(core, tid)[0]
    return next(i for i in items if (i["nativeItemRef"] or {}).get("value") == ref)


def _status(core: Any, kind: str, row_id: str) -> str:
    with core.reader.snapshot():
        row = core.reader.row(kind, row_id)
    assert row is not None
    status: str = row.decode().status
    return status


async def test_a_child_the_provider_keeps_running_outlives_its_parents_turn(
    tmp_path: Path,
) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid, "delegate it")
        assert b.turn is not None
        await core.service.ingest(b, _spawn_returns_then_child_starts())
        # The spawn call returned, the child works: the node is open, its thread active.
        graph = _graph(core, tid)
        sub = _node(graph, "subagent")
        assert sub["status"] == "running"
        (spawn_item,) = [i for i in _detail(core, tid)[0] if i["type"] == "subagent"]
        assert spawn_item["status"] == "completed"
        (child_pt,) = [p for p in graph["providerThreads"] if p["ownerNodeId"]]
        assert (child_pt["status"], child_pt["nativeThreadRef"]) == ("active", "native-child")
        await core.service.ingest(
            b, [TurnCompleted(native_turn_ref="t1", status="completed", continuing=["spawn1"])]
        )
        # The run completes from its root; the child and its open message stay open.
        graph = _graph(core, tid)
        assert _node(graph, "root_turn")["status"] == "completed"
        assert _node(graph, "subagent")["status"] == "running"
        assert _status(core, "run", b.turn.run_id) == "completed"
        assert [t["type"] for t in graph["transfers"]] == ["subagent_spawn"]
        # Later frames of the child: bound to the turn that spawned it, even while
        # another turn of the thread is active.
        b2 = await started_turn(core.service, tid, "next")
        assert b2.turn is not None
        late = attrs.evolve(b2, lingering=(b.turn,))
        await core.service.ingest(
            late,
            [
                ItemDelta(native_item_ref="cm1", text="found it"),
                ItemCompleted(native_item_ref="cm1", content=AssistantMessage(text="found it")),
                ItemStarted(
                    native_item_ref="cc1",
                    content=CommandExecution(input="grep -r x"),
                    parent_native_item_ref="spawn1",
                ),
                ItemCompleted(native_item_ref="cc1", content=CommandExecution(input="grep -r x")),
                SubagentEnded(
                    native_item_ref="spawn1",
                    status="completed",
                    child_native_thread_ref="native-child",
                ),
            ],
        )
        graph = _graph(core, tid)
        sub = _node(graph, "subagent")
        assert sub["status"] == "completed"
        by_ref = {n["nativeItemRef"]["value"]: n for n in graph["nodes"] if n["nativeItemRef"]}
        assert by_ref["cc1"]["parentNodeId"] == sub["id"]
        assert by_ref["cc1"]["runId"] == b.turn.run_id
        (child_pt,) = [p for p in graph["providerThreads"] if p["ownerNodeId"]]
        assert by_ref["cc1"]["providerThreadId"] == child_pt["id"]
        assert child_pt["status"] == "idle"
        transfers = {t["type"]: t for t in graph["transfers"]}
        assert set(transfers) == {"subagent_spawn", "subagent_result"}
        assert transfers["subagent_result"]["sourcePoint"]["providerThreadRef"] == "native-child"
        items, _, messages = _detail(core, tid)
        refs = {(i["nativeItemRef"] or {}).get("value"): i for i in items}
        assert refs["cm1"]["status"] == "completed" and refs["cm1"]["text"] == "found it"
        assert refs["cm1"]["hidden"] and refs["cc1"]["hidden"]
        assert [m["text"] for m in messages] == ["delegate it", "parent answer", "next"]
        # The first run stays completed, and the new turn's run is untouched.
        assert _status(core, "run", b.turn.run_id) == "completed"
        assert _status(core, "run", b2.turn.run_id) != "completed"
        with core.reader.snapshot():
            rebuilt, _, _ = rebuild(core.reader.iter_events())
            assert compare(core.reader.all_rows(), rebuilt) == []


async def test_an_interrupted_parent_turn_interrupts_a_child_whose_call_returned(
    tmp_path: Path,
) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        assert b.turn is not None
        await core.service.ingest(
            b,
            [
                *_spawn_returns_then_child_starts(),
                TurnCompleted(native_turn_ref="t1", status="interrupted"),
            ],
        )
        graph = _graph(core, tid)
        assert _node(graph, "subagent")["status"] == "interrupted"
        (child_pt,) = [p for p in graph["providerThreads"] if p["ownerNodeId"]]
        assert child_pt["status"] == "idle"
        assert [t["type"] for t in graph["transfers"]] == ["subagent_spawn"]
        child = _item(core, tid, "cm1")
        assert child["status"] == "interrupted"
        # A late end of the child reopens nothing.
        await core.service.ingest(
            b.with_turn(None),
            [SubagentEnded(native_item_ref="spawn1", status="completed")],
        )
        assert _node(_graph(core, tid), "subagent")["status"] == "interrupted"
        assert _status(core, "run", b.turn.run_id) == "interrupted"


async def test_a_runtime_exit_settles_a_child_that_outlived_its_parents_turn(
    tmp_path: Path,
) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        assert b.turn is not None
        await core.service.ingest(
            b,
            [
                *_spawn_returns_then_child_starts(),
                TurnCompleted(native_turn_ref="t1", status="completed", continuing=["spawn1"]),
            ],
        )
        assert _node(_graph(core, tid), "subagent")["status"] == "running"
        idle = attrs.evolve(b, turn=None, lingering=(b.turn,))
        await core.service.ingest(idle, [RuntimeExited(code=0, signal=None)])
        graph = _graph(core, tid)
        assert _node(graph, "subagent")["status"] == "interrupted"
        assert _node(graph, "root_turn")["status"] == "completed"
        assert _status(core, "run", b.turn.run_id) == "completed"
        child = _item(core, tid, "cm1")
        assert child["status"] == "interrupted"
        assert [t["type"] for t in graph["transfers"]] == ["subagent_spawn"]
