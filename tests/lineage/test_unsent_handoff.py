"""A handoff sent with a turn the provider never took is sent again with the next one.

The provider switched to dies as the first ``turn/start`` reaches it (the stand-in's
``--crash-on-request``), or refuses it: that run fails, and the history it was to be
told is still owed to the provider thread. Before, the handoff counted as delivered and the thread
as having seen the failed run, so the next run told it nothing: the earlier
conversation was lost to the new provider, silently.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from supervisor.providers import ProviderSettings, standin_settings
from tests.lineage.support import (
    FrameLog,
    handoff_of,
    send_completed,
    standin_for_every_kind,
    there_and_back,
)
from tests.supervisor.standin_plan import ECHO_RESUME, launch_count, plan_settings
from tests.supervisor.support import Rig, rig


def _echo(*extra: str) -> list[str]:
    return [str(ECHO_RESUME), "--loop-turns", *extra]


def _rig(
    tmp_path: Path, frames: FrameLog, **providers: ProviderSettings
) -> AbstractAsyncContextManager[Rig]:
    """The real supervisor, every kind the stand-in, ``providers`` replacing the defaults."""
    every = {"codex": standin_settings(), "claude": standin_settings(), **providers}
    return rig(
        tmp_path / "e.db",
        providers=every,
        adapter_factory=standin_for_every_kind,
        raw_factory=frames,
    )


def _refusing_first_turn(tmp_path: Path) -> Path:
    """The echo transcript whose process answers its first ``turn/start`` with an error
    (and plays the echo turn for the next ones)."""
    lines = ECHO_RESUME.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if '"method":"turn/start"' in line)
    request = json.loads(lines[first])["frame"]
    error = {"code": -32600, "message": "the test refuses this turn"}
    refusal = [
        json.dumps({"step": "expect_outbound", "frame": request}),
        json.dumps({"step": "emit_inbound", "frame": {"id": request["id"], "error": error}}),
    ]
    path = tmp_path / "refusing.ndjson"
    path.write_text("\n".join([*lines[:first], *refusal, *lines[first:]]) + "\n")
    return path


async def _fails(r: Rig, thread_id: str, text: str) -> str:
    """Send ``text``; the run's id once it failed (its turn never started)."""
    run_id = str((await r.manager.send_message(thread_id, text)).result["runId"])
    run = await r.wait_run(run_id, ("completed", "failed", "interrupted", "cancelled"))
    assert run.status == "failed", run
    return run_id


async def test_a_handoff_whose_turn_never_reached_the_provider_goes_with_the_next(
    tmp_path: Path,
) -> None:
    frames = FrameLog()
    plan = tmp_path / "claude-plan.json"
    # The first claude process dies on its first turn/start; the next one behaves.
    claude = plan_settings(plan, _echo("--crash-on-request", "turn/start"), _echo())
    async with _rig(tmp_path, frames, claude=claude) as r:
        tid = await r.thread("codex")
        await send_completed(r, tid, "codex run 1 BANANA")
        await r.manager.switch_provider(tid, "claude")

        lost = await _fails(r, tid, "claude run 2")
        # The scenario: the history went with the turn that never started.
        given = handoff_of(r, lost)
        assert "codex run 1 BANANA" in given.summary_text
        assert given.status == "superseded", "a turn the provider never took delivers nothing"
        (written,) = frames.turn_texts("claude")  # what the process died reading
        assert "codex run 1 BANANA" in written

        again = await send_completed(r, tid, "claude run 3")
        assert launch_count(plan) == 2
        sent = frames.turn_texts("claude")[-1]
        assert "codex run 1 BANANA" in sent, "the next turn carries the history"
        assert sent.endswith("claude run 3")
        handoff = handoff_of(r, again)
        # All of the history so far, the failed run (the user said it) included.
        assert handoff.status == "ready" and handoff.covered_run_ordinals.to == 2
        pt = r.row("provider_thread", handoff.to_provider_thread_id)
        assert pt.handoff_ids == [handoff.id], "the superseded one is not counted as given"
        assert pt.last_run_ordinal == 3


async def test_a_regenerated_handoff_whose_turn_never_reached_the_provider_waits_again(
    tmp_path: Path,
) -> None:
    frames = FrameLog()
    plan = tmp_path / "codex-plan.json"
    # Codex's second process (back from claude, run 3) dies on its second turn/start;
    # the third resumes the thread.
    codex = plan_settings(
        plan,
        _echo(),
        _echo("--segment", "1", "--crash-on-request", "turn/start:2"),
        _echo("--segment", "1"),
    )
    async with _rig(tmp_path, frames, codex=codex) as r:
        tid, run3 = await there_and_back(r)
        res = await r.core.service.regenerate_handoff(
            r.row("run", run3).context_handoff_id, "full_thread_summary"
        )
        regenerated = res.result["handoffId"]

        await _fails(r, tid, "codex run 4")
        assert "MANGO" in frames.turn_texts("codex")[-1], "it went with the turn that died"
        waiting = r.row("context_handoff", regenerated)
        assert waiting.status == "pending", "not delivered: the provider never took it"

        run5 = await send_completed(r, tid, "codex run 5")
        assert launch_count(plan) == 3
        sent = frames.turn_texts("codex")[-1]
        assert "regenerated" in sent and "MANGO" in sent and sent.endswith("codex run 5")
        delivered = r.row("context_handoff", regenerated)
        assert (delivered.status, delivered.target_run_id) == ("ready", run5)
        pt = r.row("provider_thread", delivered.to_provider_thread_id)
        assert pt.handoff_ids.count(regenerated) == 1
        # Delivered once: the run after gets nothing.
        await send_completed(r, tid, "codex run 6")
        assert "regenerated" not in frames.turn_texts("codex")[-1]


async def test_a_handoff_whose_turn_the_provider_refused_goes_with_the_next(
    tmp_path: Path,
) -> None:
    frames = FrameLog()
    claude = standin_settings(_refusing_first_turn(tmp_path))
    async with _rig(tmp_path, frames, claude=claude) as r:
        tid = await r.thread("codex")
        await send_completed(r, tid, "codex run 1 BANANA")
        await r.manager.switch_provider(tid, "claude")

        lost = await _fails(r, tid, "claude run 2")
        assert "could not start" in (r.row("run", lost).last_error or "")
        assert handoff_of(r, lost).status == "superseded"

        await send_completed(r, tid, "claude run 3")  # the same process, alive
        refused, sent = frames.turn_texts("claude")
        assert "codex run 1 BANANA" in refused
        assert "codex run 1 BANANA" in sent and sent.endswith("claude run 3")
        assert len(r.rows("provider_session")) == 2, "one codex, one claude: no restart"
