"""The lineage scenarios from recorded transcripts of the real binaries (always run).

``fixtures/lineage/<scenario>.<provider>.ndjson`` were recorded by
``tests/real/test_lineage_real.py`` with ``T3ORCH_RECORD_LINEAGE=fixtures/lineage``:
the real supervisor and adapters driving the pinned ``codex`` and ``claude``
against the fake model servers. Here the same scenarios run through the real
supervisor, adapters, store and projections, with only the provider processes
replaced: each launch plays the next recorded segment of its provider, strictly
(a frame of a shape the binary never got fails the test) and with no delays (each
turn's frames in one burst). Files the scenario
changes by hand are changed here the same way; what the model received is
checked in the real tests, here what we sent (the raw frames) and what we recorded.
The steps and the record checks are shared with the real tests
(``lineage_scenarios.py``, ``subagent_scenario.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from adapters.transcript import load_transcript
from fixtures.fakes.codex_home import make_work_dir
from fixtures.record.supervised import TranscriptLaunchers
from supervisor.providers import ProviderSettings
from tests.lineage import lineage_scenarios as scenarios
from tests.lineage.subagent_scenario import subagent_scenario
from tests.lineage.support import FrameLog
from tests.supervisor.support import Rig, rig

LINEAGE = Path(__file__).resolve().parents[2] / "fixtures" / "lineage"
PROVIDERS = {
    "codex": ProviderSettings(command=["codex"], model="mock-model"),
    "claude": ProviderSettings(command=["claude"], model="claude-fake"),
}


@attrs.define
class Replay:
    r: Rig
    work: Path
    frames: FrameLog

    async def send(self, tid: str, text: str) -> Any:
        sent = await self.r.manager.send_message(tid, text)
        run = await self.r.wait_run(sent.result["runId"], ("completed", "failed", "interrupted"))
        assert run.status == "completed", run
        return run

    async def checkpointed(self, tid: str, text: str) -> Any:
        run = await self.send(tid, text)
        # Taken at the completion barrier, before the run's end is committed.
        assert run.checkpoint_id is not None, run
        return run

    def sent_texts(self) -> list[str]:
        """The user text of every turn our adapters sent, both providers, in order."""
        out = []
        for _, frame in self.frames.sent:
            if frame.get("method") == "turn/start":
                out.append(frame["params"]["input"][0]["text"])
            elif frame.get("type") == "user":
                content = frame["message"]["content"]
                out.append(content if isinstance(content, str) else content[0]["text"])
        return out


@asynccontextmanager
async def replay(tmp_path: Path, scenario: str) -> AsyncIterator[Replay]:
    transcripts = {
        kind: load_transcript(LINEAGE / f"{scenario}.{kind}.ndjson")
        for kind in PROVIDERS
        if (LINEAGE / f"{scenario}.{kind}.ndjson").exists()
    }
    assert transcripts, f"no recorded transcript for {scenario}"
    launchers = TranscriptLaunchers(transcripts)
    frames = FrameLog()
    async with rig(
        tmp_path / "e.db", providers=PROVIDERS, launcher_factory=launchers, raw_factory=frames
    ) as r:
        yield Replay(r, make_work_dir(tmp_path / "work"), frames)
    # Every recorded process was launched, in the recorded order, and no other.
    assert dict(launchers.launched) == {k: len(t.segments) for k, t in transcripts.items()}


async def test_codex_claude_codex_delta_handoff(tmp_path: Path) -> None:
    async with replay(tmp_path, "codex_claude_codex_delta_handoff_reaches_the_model") as b:
        await scenarios.delta_handoff(b)
        sent = b.sent_texts()
        assert "User: remember the word PAPAYA" in sent[1]  # Claude's first: everything
        assert "User: claude hears BANANA" in sent[-1] and sent[-1].endswith("RECALL")


async def test_resume_failure_falls_back_to_a_full_summary(tmp_path: Path) -> None:
    async with replay(tmp_path, "resume_failure_on_return_falls_back_to_a_full_summary") as b:
        # The recording's thread/resume failed (its rollout files were deleted).
        await scenarios.resume_failure(b)
        assert "claude hears BANANA" in b.sent_texts()[-1]


async def test_codex_fork_then_diverge(tmp_path: Path) -> None:
    async with replay(tmp_path, "codex_fork_at_an_earlier_run_is_native") as b:
        transfer = await scenarios.codex_fork(b)
        # thread/fork through run 1's turn was what we asked for.
        forks = [f for _, f in b.frames.sent if f.get("method") == "thread/fork"]
        assert [f["params"].get("lastTurnId") for f in forks] == [
            transfer.source_point.provider_turn_ref
        ]


async def test_claude_fork_then_diverge(tmp_path: Path) -> None:
    async with replay(tmp_path, "claude_fork_at_the_latest_run_is_native") as b:
        await scenarios.claude_fork(b)


async def test_codex_rollback_restores_files_and_reverts_the_thread(tmp_path: Path) -> None:
    async with replay(tmp_path, "codex_rollback_restores_files_and_reverts_the_thread") as b:
        await scenarios.codex_rollback(b)
        reverts = [f for _, f in b.frames.sent if f.get("method") == "thread/revert"]
        assert len(reverts) == 1


async def test_claude_rollback_starts_over_from_what_is_left(tmp_path: Path) -> None:
    async with replay(tmp_path, "claude_rollback_starts_over_from_what_is_left") as b:
        await scenarios.claude_rollback(b, lambda: b.sent_texts()[-1])


async def test_codex_subagent_checkpoint_does_not_advance_the_run_count(tmp_path: Path) -> None:
    async with replay(tmp_path, "codex_subagent_checkpoint_does_not_advance_the_run_count") as b:
        await subagent_scenario(b.r, "codex", b.work, real=False)
        spawns = [f for _, f in b.frames.sent if f.get("method") == "turn/start"]
        assert len(spawns) == 2  # the child's turn was Codex's own, not one we started


async def test_claude_subagent_checkpoint_does_not_advance_the_run_count(tmp_path: Path) -> None:
    async with replay(tmp_path, "claude_subagent_checkpoint_does_not_advance_the_run_count") as b:
        await subagent_scenario(b.r, "claude", b.work, real=False)
        # The child's command asked us, and our answer went back to the CLI.
        answers = [f for _, f in b.frames.sent if f.get("type") == "control_response"]
        assert [a["response"]["response"]["behavior"] for a in answers] == ["allow"]
