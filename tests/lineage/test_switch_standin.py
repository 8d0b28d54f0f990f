"""Provider switching through the real supervisor, every kind played by the stand-in.

The stand-in cannot read prompts, so what reached the "model" is checked on the
frames the supervisor sent (the raw-frame sink), not on a fake model server; the
real-binary version is ``tests/real/test_lineage_real.py``.
"""

from __future__ import annotations

from pathlib import Path

from tests.lineage.support import FrameLog, standin_rig
from tests.supervisor.support import Rig, rig


async def _send(r: Rig, tid: str, text: str) -> str:
    sent = await r.manager.send_message(tid, text)
    run_id = str(sent.result["runId"])
    run = await r.wait_run(run_id)
    assert run.status == "completed", run
    return run_id


async def test_codex_claude_codex_delta_handoff_covers_the_missed_runs(tmp_path: Path) -> None:
    frames = FrameLog()
    async with standin_rig(tmp_path, raw_factory=frames) as r:
        tid = await r.thread("codex")
        for n in (1, 2):
            await _send(r, tid, f"codex run {n}")
        await r.manager.switch_provider(tid, "claude")
        await _send(r, tid, "claude run 3 BANANA")
        await _send(r, tid, "claude run 4")
        res = await r.manager.switch_provider(tid, "codex")
        codex_pt = res.result["providerThreadId"]
        assert codex_pt is not None, "returning to codex names its old provider thread"
        last = await _send(r, tid, "codex run 5")

        runs = sorted(r.rows("run", tid), key=lambda x: x.ordinal)
        assert [x.provider for x in runs] == ["codex", "codex", "claude", "claude", "codex"]
        pts = {x.provider_thread_id for x in runs}
        assert len(pts) == 2, "codex came back to its own provider thread"
        assert runs[0].provider_thread_id == runs[4].provider_thread_id == codex_pt

        handoffs = {h.target_run_id: h for h in r.rows("context_handoff", tid)}
        # First time on claude: everything so far; back on codex: only runs 3-4.
        first = handoffs[runs[2].id]
        assert first.strategy == "full_thread_summary"
        assert (first.covered_run_ordinals.from_, first.covered_run_ordinals.to) == (1, 2)
        delta = handoffs[last]
        assert delta.strategy == "delta_since_target_last_seen"
        assert (delta.covered_run_ordinals.from_, delta.covered_run_ordinals.to) == (3, 4)
        assert "claude run 3 BANANA" in delta.summary_text
        assert "codex run 1" not in delta.summary_text
        assert delta.to_provider_thread_id == codex_pt
        assert runs[4].context_handoff_id == delta.id

        transfers = {t.id: t for t in r.rows("context_transfer", tid)}
        transfer = transfers[delta.transfer_id]
        assert transfer.type == "provider_handoff"
        assert type(transfer.resolution).__name__ == "DeltaContextResolution"
        assert (transfer.source_provider, transfer.target_provider) == ("claude", "codex")

        items = [i for i in r.rows("turn_item", tid) if i.run_id == last]
        kinds = [type(i).__name__ for i in items]
        assert "Handoff" in kinds
        handoff_item = next(i for i in items if type(i).__name__ == "Handoff")
        assert handoff_item.strategy == "delta_since_target_last_seen"
        assert handoff_item.from_providers == ["claude"]

        # What the provider was sent: the handoff text, then the user's message.
        codex_texts = frames.turn_texts("codex")
        assert codex_texts[-1].endswith("codex run 5")
        assert "claude run 3 BANANA" in codex_texts[-1]
        assert "claude run 3 BANANA" not in codex_texts[1]
        # Three runtimes: codex, claude, codex again (the old one retired gracefully).
        sessions = sorted(r.rows("provider_session"), key=lambda s: s.created_at)
        assert [s.provider for s in sessions] == ["codex", "claude", "codex"]
        assert all(s.status == "stopped" for s in sessions[:2])


async def test_switching_to_the_same_provider_changes_nothing(tmp_path: Path) -> None:
    async with standin_rig(tmp_path) as r:
        tid = await r.thread("codex")
        await _send(r, tid, "one")
        head = r.core.reader.last_sequence()
        res = await r.manager.switch_provider(tid, "codex")
        assert res.result["previousProvider"] == "codex"
        # Nothing about the thread was written (the run's checkpoint step may still
        # be writing its own diagnostic: only thread changes are checked).
        after = [e.type for e in r.core.reader.read_events(head, 1000)]
        assert "thread.upserted" not in after


async def test_an_unconfigured_provider_is_refused(tmp_path: Path) -> None:
    from t3orch.store.errors import CommandRejected

    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread()
        try:
            await r.manager.switch_provider(tid, "claude")
        except CommandRejected as exc:
            assert exc.code == "provider_not_configured"
        else:
            raise AssertionError("switching to an unconfigured provider was accepted")
