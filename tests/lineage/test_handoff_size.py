"""The configured handoff size: accumulated delta handoffs past it give a fresh provider
thread with a full summary (real supervisor, every kind played by the stand-in)."""

from __future__ import annotations

from pathlib import Path

from tests.lineage.support import FrameLog, handoff_of, notes, send_completed, standin_rig


async def test_deltas_accumulate_until_the_limit_then_a_fresh_provider_thread(
    tmp_path: Path,
) -> None:
    frames = FrameLog()
    async with standin_rig(tmp_path, raw_factory=frames, delta_handoff_limit=2000) as r:
        tid = await r.thread("codex")
        run1 = await send_completed(r, tid, "codex run 1 APPLE")
        await r.manager.switch_provider(tid, "claude")
        await send_completed(r, tid, "claude run 2 short")
        await r.manager.switch_provider(tid, "codex")
        run3 = await send_completed(r, tid, "codex run 3")
        first = handoff_of(r, run3)
        # Under the limit: the old codex conversation is resumed with a delta.
        assert first.strategy == "delta_since_target_last_seen"  # type: ignore[attr-defined]
        codex_pt = r.row("run", run1).provider_thread_id
        assert r.row("run", run3).provider_thread_id == codex_pt

        await r.manager.switch_provider(tid, "claude")
        await send_completed(r, tid, "claude run 4 " + "long words " * 150)
        await r.manager.switch_provider(tid, "codex")
        run5 = await send_completed(r, tid, "codex run 5")

        # This delta (≈1,900 chars) plus the one before pass 2,000: not resumed.
        run = r.row("run", run5)
        assert run.provider_thread_id != codex_pt
        assert r.row("provider_thread", codex_pt).status == "closed"
        fresh = r.row("provider_thread", run.provider_thread_id)
        assert (fresh.provider, fresh.owner_node_id) == ("codex", None)
        handoff = handoff_of(r, run5)
        assert handoff.strategy == "full_thread_summary"  # type: ignore[attr-defined]
        covered = handoff.covered_run_ordinals  # type: ignore[attr-defined]
        assert (covered.from_, covered.to) == (1, 4)
        assert "APPLE" in handoff.summary_text  # type: ignore[attr-defined]
        [note] = notes(r, "handoff_size_exceeded")
        assert "above the configured 2000" in note.message
        # What the fresh Codex conversation was sent: the whole history, then the message.
        sent = frames.turn_texts("codex")[-1]
        assert "APPLE" in sent and sent.endswith("codex run 5")
        # A later switch back never picks the closed provider thread again.
        await r.manager.switch_provider(tid, "claude")
        res = await r.manager.switch_provider(tid, "codex")
        assert res.result["providerThreadId"] == fresh.id


async def test_a_large_limit_keeps_resuming(tmp_path: Path) -> None:
    async with standin_rig(tmp_path, delta_handoff_limit=100_000) as r:
        tid = await r.thread("codex")
        run1 = await send_completed(r, tid, "one")
        await r.manager.switch_provider(tid, "claude")
        await send_completed(r, tid, "two " + "long words " * 150)
        await r.manager.switch_provider(tid, "codex")
        run3 = await send_completed(r, tid, "three")
        assert r.row("run", run3).provider_thread_id == r.row("run", run1).provider_thread_id
        assert handoff_of(r, run3).strategy == "delta_since_target_last_seen"  # type: ignore[attr-defined]
