"""Regenerating a handoff and merging a fork back, through the real supervisor (stand-in).

What reached the "model" is checked on the frames the supervisor sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t3orch.store.errors import CommandRejected
from tests.lineage.support import FrameLog, send_completed, standin_rig, there_and_back
from tests.supervisor.support import rig


async def _rejected(code: str, awaitable: object) -> str:
    with pytest.raises(CommandRejected) as info:
        await awaitable  # type: ignore[misc]
    assert info.value.code == code, info.value
    return str(info.value)


async def test_a_regenerated_handoff_supersedes_the_old_and_goes_with_the_next_run(
    tmp_path: Path,
) -> None:
    frames = FrameLog()
    async with standin_rig(tmp_path, raw_factory=frames) as r:
        svc = r.core.service
        tid, run3 = await there_and_back(r)
        old_id = r.row("run", run3).context_handoff_id
        old = r.row("context_handoff", old_id)
        assert old.strategy == "delta_since_target_last_seen"
        assert "MANGO" not in old.summary_text

        res = await svc.regenerate_handoff(old_id, "full_thread_summary")
        new_id = res.result["handoffId"]
        assert res.result["supersedes"] == old_id
        assert res.result["coveredRunOrdinals"] == {"from": 1, "to": 2}
        assert r.row("context_handoff", old_id).status == "superseded"
        new = r.row("context_handoff", new_id)
        assert (new.status, new.strategy, new.transfer_id) == (
            "pending",
            "full_thread_summary",
            old.transfer_id,
        )
        assert "MANGO" in new.summary_text and "PEAR" in new.summary_text
        transfer = r.row("context_transfer", old.transfer_id)
        assert transfer.resolution.context_handoff_id == new_id
        # The run that got the old text keeps its record of what it got.
        assert r.row("run", run3).context_handoff_id == old_id

        run4 = await send_completed(r, tid, "codex run 4")
        sent = frames.turn_texts("codex")[-1]
        assert "regenerated" in sent and "MANGO" in sent and sent.endswith("codex run 4")
        delivered = r.row("context_handoff", new_id)
        assert (delivered.status, delivered.target_run_id) == ("ready", run4)
        assert r.row("run", run4).context_handoff_id == new_id
        pt = r.row("provider_thread", new.to_provider_thread_id)
        assert pt.handoff_ids[-1] == new_id
        items = [i for i in r.rows("turn_item", tid) if i.run_id == run4]
        assert [i.handoff_id for i in items if type(i).__name__ == "Handoff"] == [new_id]
        # Delivered once: the run after gets nothing.
        await send_completed(r, tid, "codex run 5")
        assert "regenerated" not in frames.turn_texts("codex")[-1]

        msg = await _rejected("handoff_superseded", svc.regenerate_handoff(old_id))
        assert new_id in msg
        await _rejected("unknown_handoff", svc.regenerate_handoff("hof_nope"))
        again = await svc.regenerate_handoff(new_id)
        await _rejected("handoff_pending", svc.regenerate_handoff(again.result["handoffId"]))


async def test_merge_back_carries_the_fork_runs_into_the_parent_next_run(tmp_path: Path) -> None:
    frames = FrameLog()
    async with rig(tmp_path / "e.db", raw_factory=frames) as r:
        svc = r.core.service
        parent = await r.thread()
        await send_completed(r, parent, "parent run 1")
        fork = (await svc.fork_thread(parent)).result["threadId"]
        await send_completed(r, fork, "fork run 1 KIWI")
        await send_completed(r, fork, "fork run 2 LIME")

        res = await svc.merge_back(fork)
        transfer_id = res.result["transferId"]
        assert res.result["targetThreadId"] == parent
        assert res.result["coveredRunOrdinals"] == {"from": 1, "to": 2}
        transfer = r.row("context_transfer", transfer_id)
        assert (transfer.type, transfer.status) == ("merge_back", "pending")
        assert transfer.source_thread_id == fork and transfer.target_thread_id == parent
        # The base is where the fork branched off: the parent's run 1.
        assert transfer.base_point.thread_id == parent

        run2 = await send_completed(r, parent, "parent run 2")
        sent = frames.turn_texts()[-1]
        assert "KIWI" in sent and "LIME" in sent and sent.endswith("parent run 2")
        assert "parent run 1" not in sent.split("---")[0]
        transfer = r.row("context_transfer", transfer_id)
        assert transfer.status == "resolved_portable"
        handoff = r.row("context_handoff", transfer.resolution.context_handoff_id)
        assert (handoff.strategy, handoff.target_run_id) == ("delta_since_target_last_seen", run2)
        assert (handoff.covered_run_ordinals.from_, handoff.covered_run_ordinals.to) == (1, 2)
        assert r.row("run", run2).context_handoff_id == handoff.id

        await _rejected("nothing_to_merge", svc.merge_back(fork))
        await send_completed(r, fork, "fork run 3 PLUM")
        second = await svc.merge_back(fork)
        # Only what the parent has not been given yet.
        assert second.result["coveredRunOrdinals"] == {"from": 3, "to": 3}
        # A second merge before delivery supersedes the first and carries its runs too.
        await send_completed(r, fork, "fork run 4 FIG")
        third = await svc.merge_back(fork)
        assert third.result["coveredRunOrdinals"] == {"from": 3, "to": 4}
        assert r.row("context_transfer", second.result["transferId"]).status == "superseded"
        await send_completed(r, parent, "parent run 3")
        sent = frames.turn_texts()[-1]
        assert "PLUM" in sent and "FIG" in sent and "KIWI" not in sent

        msg = await _rejected("no_merge_target", svc.merge_back(parent))
        assert "not a fork" in msg
        await _rejected("same_thread", svc.merge_back(fork, target_thread_id=fork))
        await _rejected("unknown_run", svc.merge_back(fork, "run_nope"))
        await _rejected("unknown_thread", svc.merge_back("thr_nope"))
