"""Settings incompatibility: a provider thread held in another cwd is not resumed; the run
gets a fresh one with a full summary (real supervisor, every kind played by the stand-in).
A changed model or runtime mode still resumes it."""

from __future__ import annotations

from pathlib import Path

from tests.lineage.support import FrameLog, handoff_of, notes, send_completed, standin_rig


def _dirs(tmp_path: Path) -> tuple[str, str]:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return str(a), str(b)


async def test_a_return_after_the_cwd_changed_starts_a_fresh_provider_thread(
    tmp_path: Path,
) -> None:
    a, b = _dirs(tmp_path)
    frames = FrameLog()
    async with standin_rig(tmp_path, raw_factory=frames) as r:
        tid = await r.thread("codex", cwd=a)
        run1 = await send_completed(r, tid, "codex run 1 APPLE")
        codex_pt = r.row("run", run1).provider_thread_id
        assert r.row("provider_thread", codex_pt).cwd == a
        await r.manager.switch_provider(tid, "claude")
        await send_completed(r, tid, "claude run 2 BANANA")
        res = await r.manager.configure_thread(tid, cwd=b)
        assert res.result["changed"] == {"cwd": {"from": a, "to": b}}
        await r.manager.switch_provider(tid, "codex")
        run3 = await send_completed(r, tid, "codex run 3")

        run = r.row("run", run3)
        assert run.provider_thread_id != codex_pt
        assert r.row("provider_thread", codex_pt).status == "closed"
        fresh = r.row("provider_thread", run.provider_thread_id)
        assert (fresh.provider, fresh.owner_node_id, fresh.cwd) == ("codex", None, b)
        handoff = handoff_of(r, run3)
        assert handoff.strategy == "full_thread_summary"
        assert (handoff.covered_run_ordinals.from_, handoff.covered_run_ordinals.to) == (1, 2)
        assert handoff.from_provider_thread_ids == [codex_pt]
        assert f"cwd {a} -> {b}" in handoff.summary_text
        [note] = notes(r, "settings_incompatible")
        assert note.level == "info"
        assert note.message == f"provider thread {codex_pt} is not resumed: cwd {a} -> {b}"
        # The fresh conversation was started (not resumed) in the new cwd and told it all.
        starts = [f for k, f in frames.sent if k == "codex" and f.get("method") == "thread/start"]
        assert starts[-1]["params"]["cwd"] == b
        sent = frames.turn_texts("codex")[-1]
        assert "APPLE" in sent and "BANANA" in sent and sent.endswith("codex run 3")
        # Never picked again by a later return.
        await r.manager.switch_provider(tid, "claude")
        back = await r.manager.switch_provider(tid, "codex")
        assert back.result["providerThreadId"] == fresh.id


async def test_a_cwd_change_on_the_same_provider_retires_the_runtime_and_starts_fresh(
    tmp_path: Path,
) -> None:
    a, b = _dirs(tmp_path)
    async with standin_rig(tmp_path) as r:
        tid = await r.thread("standin", cwd=a)
        run1 = await send_completed(r, tid, "one CHERRY")
        old = r.manager.runners[tid]
        await r.manager.configure_thread(tid, cwd=b)
        run2 = await send_completed(r, tid, "two")
        assert old.stop_reason == "settings_changed"
        assert r.manager.runners[tid].config.cwd == b
        pt1 = r.row("run", run1).provider_thread_id
        assert r.row("run", run2).provider_thread_id != pt1
        assert r.row("provider_thread", pt1).status == "closed"
        handoff = handoff_of(r, run2)
        assert handoff.strategy == "full_thread_summary" and "CHERRY" in handoff.summary_text
        assert len(notes(r, "settings_incompatible")) == 1


async def test_a_model_or_runtime_mode_change_still_resumes(tmp_path: Path) -> None:
    a, _ = _dirs(tmp_path)
    frames = FrameLog()
    async with standin_rig(tmp_path, raw_factory=frames) as r:
        tid = await r.thread("codex", cwd=a)
        run1 = await send_completed(r, tid, "one")
        await r.manager.switch_provider(tid, "claude")
        await send_completed(r, tid, "two")
        await r.manager.switch_provider(tid, "codex")
        res = await r.manager.configure_thread(
            tid, model="gpt-other", runtime_mode="full-access", cwd=a
        )
        assert set(res.result["changed"]) == {"model", "runtimeMode"}
        run3 = await send_completed(r, tid, "three")
        pt = r.row("run", run1).provider_thread_id
        assert r.row("run", run3).provider_thread_id == pt
        assert handoff_of(r, run3).strategy == "delta_since_target_last_seen"
        assert notes(r, "settings_incompatible") == []
        # The resumed Codex thread is given the new model and runtime mode.
        resume = [f for k, f in frames.sent if f.get("method") == "thread/resume"][-1]
        assert resume["params"]["model"] == "gpt-other"
        assert resume["params"]["approvalPolicy"] == "never"
