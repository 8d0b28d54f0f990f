"""Fork then diverge through the real supervisor, on the stand-in (a portable fork).

The stand-in plays a fixed transcript and cannot fork natively, so the fork's
first run is seeded with the source history up to the source point. Native forks
on the real binaries are in ``tests/real/test_lineage_real.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from t3orch.projections.views import thread_detail
from t3orch.store.errors import CommandRejected
from tests.lineage.support import FrameLog
from tests.supervisor.support import Rig, rig


async def _send(r: Rig, tid: str, text: str) -> str:
    sent = await r.manager.send_message(tid, text)
    run_id = str(sent.result["runId"])
    run = await r.wait_run(run_id)
    assert run.status == "completed", run
    return run_id


def _detail(r: Rig, tid: str) -> dict[str, Any]:
    with r.core.reader.snapshot():
        detail = thread_detail(r.core.reader, tid)
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(detail))
    return decoded


def _shape(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for i in items:
        if i["type"] == "user_message":
            out.append(f"user:{i['text']}")
        elif i["type"] in ("fork", "handoff"):
            out.append(i["type"])
        elif i["type"] == "assistant_message":
            out.append("assistant")
    return out


async def test_fork_then_diverge(tmp_path: Path) -> None:
    frames = FrameLog()
    async with rig(tmp_path / "e.db", raw_factory=frames) as r:
        parent = await r.thread()
        await _send(r, parent, "alpha")
        beta = await _send(r, parent, "beta")
        await _send(r, parent, "gamma")

        forked = await r.core.service.fork_thread(parent, beta)
        fork = forked.result["threadId"]
        assert forked.result["sourceRunId"] == beta
        thread = r.row("thread", fork)
        assert thread.lineage.parent_thread_id == parent
        assert thread.lineage.relationship_to_parent == "fork"
        assert thread.lineage.root_thread_id == parent
        [transfer] = r.rows("context_transfer", fork)
        assert (transfer.type, transfer.status) == ("fork", "pending")
        assert transfer.source_point.run_id == beta

        # Before any run: the inherited items up to run 2, then the marker; no rows copied.
        detail = _detail(r, fork)
        assert detail["turnItems"] == []
        assert _shape(detail["visibleTurnItems"]) == [
            "user:alpha",
            "assistant",
            "user:beta",
            "assistant",
            "fork",
        ]
        marker = detail["visibleTurnItems"][-1]
        assert marker["sourceThreadId"] == parent and marker["sourceRunId"] == beta

        # Diverge: the fork and the parent each go on; neither sees the other.
        await _send(r, fork, "delta on the fork")
        await _send(r, parent, "epsilon on the parent")
        fork_detail = _detail(r, fork)
        assert _shape(fork_detail["visibleTurnItems"]) == [
            "user:alpha",
            "assistant",
            "user:beta",
            "assistant",
            "fork",
            "user:delta on the fork",
            "handoff",
            "assistant",
        ]
        assert all(i["threadId"] == fork for i in fork_detail["turnItems"])
        parent_users = [
            i["text"] for i in _detail(r, parent)["visibleTurnItems"] if i["type"] == "user_message"
        ]
        assert parent_users == ["alpha", "beta", "gamma", "epsilon on the parent"]

        # Portable resolution: the fork's first turn carried the history up to run 2.
        [transfer] = r.rows("context_transfer", fork)
        assert transfer.status == "resolved_portable"
        [handoff] = r.rows("context_handoff", fork)
        assert handoff.strategy == "full_thread_summary"
        assert (handoff.covered_run_ordinals.from_, handoff.covered_run_ordinals.to) == (1, 2)
        first = next(t for t in frames.turn_texts() if t.endswith("delta on the fork"))
        assert "User: alpha" in first and "User: beta" in first
        assert "gamma" not in first
        # The fork's runs count from 1: it is its own conversation.
        assert [x.ordinal for x in r.rows("run", fork)] == [1]


async def test_a_fork_of_a_fork_inherits_through_both(tmp_path: Path) -> None:
    async with rig(tmp_path / "e.db") as r:
        root = await r.thread()
        await _send(r, root, "one")
        child = (await r.core.service.fork_thread(root)).result["threadId"]
        await _send(r, child, "two")
        grandchild = (await r.core.service.fork_thread(child)).result["threadId"]
        assert r.row("thread", grandchild).lineage.root_thread_id == root
        shape = _shape(_detail(r, grandchild)["visibleTurnItems"])
        assert shape == [
            "user:one",
            "assistant",
            "fork",
            "user:two",
            "handoff",
            "assistant",
            "fork",
        ]


async def test_fork_refuses_a_run_still_going_or_elsewhere(tmp_path: Path) -> None:
    async with rig(tmp_path / "e.db") as r:
        a = await r.thread()
        b = await r.thread()
        run = await _send(r, a, "one")
        with pytest.raises(CommandRejected) as exc:
            await r.core.service.fork_thread(b, run)
        assert exc.value.code == "unknown_run"
        empty = (await r.core.service.fork_thread(b)).result
        assert empty["sourceRunId"] is None
        [transfer] = r.rows("context_transfer", empty["threadId"])
        assert transfer.status == "consumed"
        assert _shape(_detail(r, empty["threadId"])["visibleTurnItems"]) == ["fork"]
