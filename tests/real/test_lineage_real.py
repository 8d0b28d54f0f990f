"""Lineage through the real supervisor with the real Codex and Claude binaries.

Each provider talks to its loopback fake model server, which records every request
the provider made: the tests assert what context actually reached the "model".
The stand-in versions (always run) are in ``tests/lineage``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from fixtures.fakes import messages_api, responses_api
from fixtures.fakes.claude_env import FAKE_MODEL, claude_dirs, claude_env, find_claude_binary
from fixtures.fakes.codex_home import make_codex_home, make_work_dir, resolve_codex_binary
from fixtures.record.supervised import TranscriptRecorder
from supervisor.providers import ProviderSettings
from t3orch.domain.turn_items import AssistantMessage
from tests.lineage import lineage_scenarios as scenarios
from tests.lineage.subagent_scenario import subagent_scenario
from tests.supervisor.support import Rig, rig

#: Set to a directory (``fixtures/lineage``) to record each scenario's transcripts there.
RECORD_DIR = os.environ.get("T3ORCH_RECORD_LINEAGE")
CLAUDE = find_claude_binary()
CODEX = resolve_codex_binary()
WAIT_S = 60.0

pytestmark = [
    pytest.mark.real_codex,
    pytest.mark.real_claude,
    pytest.mark.slow,
    pytest.mark.skipif(
        CODEX is None, reason="codex 0.169.0 not installed: run scripts/install-codex"
    ),
    pytest.mark.skipif(CLAUDE is None, reason="no claude binary: install claude-agent-sdk"),
]


@attrs.define
class Both:
    r: Rig
    work: Path
    codex_home: Path
    codex_fake: responses_api.FakeResponsesServer
    claude_fake: messages_api.FakeMessagesServer

    async def send(self, tid: str, text: str) -> Any:
        sent = await self.r.manager.send_message(tid, text)
        run = await self.r.wait_run(
            sent.result["runId"], ("completed", "failed", "interrupted"), within=WAIT_S
        )
        assert run.status == "completed", run
        return run

    async def checkpointed(self, tid: str, text: str) -> Any:
        run = await self.send(tid, text)
        return await self.r.wait_for(lambda: (x := self.r.row("run", run.id)).checkpoint_id and x)

    def codex_last_user_texts(self) -> list[str]:
        return responses_api.user_texts(self.codex_fake.requests[-1])

    def claude_last_user_text(self) -> str:
        request = self.claude_fake.requests[-1]
        texts = [t for m in request["messages"] for t in messages_api.user_texts(m)]
        return "\n".join(texts)


@asynccontextmanager
async def both(tmp_path: Path) -> AsyncIterator[Both]:
    assert CODEX is not None and CLAUDE is not None
    with ExitStack() as stack:
        codex_fake = stack.enter_context(responses_api.FakeResponsesServer())
        claude_fake = stack.enter_context(messages_api.FakeMessagesServer())
        dirs = stack.enter_context(claude_dirs("lin"))
        work = make_work_dir(tmp_path / "work")
        codex_env = make_codex_home(tmp_path, codex_fake.base_url, work)
        providers = {
            "codex": ProviderSettings(
                command=[str(CODEX)], env=codex_env, model="mock-model", request_timeout_s=WAIT_S
            ),
            "claude": ProviderSettings(
                command=[str(CLAUDE)],
                env={**claude_env(dirs, claude_fake.base_url), "PWD": str(work)},
                model=FAKE_MODEL,
                request_timeout_s=WAIT_S,
            ),
        }
        recorder = TranscriptRecorder(tmp_path) if RECORD_DIR else None
        async with rig(tmp_path / "e.db", providers=providers, launcher_factory=recorder) as r:
            yield Both(r, work, Path(codex_env["CODEX_HOME"]), codex_fake, claude_fake)
        if recorder is not None:
            # ``tests/real/test_lineage_real.py::test_x (call)`` → ``x``.
            test = os.environ["PYTEST_CURRENT_TEST"].split("::")[-1].split()[0]
            recorder.write(
                Path(RECORD_DIR),
                test.removeprefix("test_"),
                f"Recorded by {test} in tests/real/test_lineage_real.py "
                "(T3ORCH_RECORD_LINEAGE): the real supervisor and adapters driving the real "
                "binaries against the loopback fake model servers. Replayed by "
                "tests/lineage/test_recorded_lineage.py.",
            )


async def test_codex_claude_codex_delta_handoff_reaches_the_model(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        last = await scenarios.delta_handoff(b)
        # Claude's first run got everything so far (it had no provider thread).
        assert "remember the word PAPAYA" in b.claude_last_user_text()
        # The resumed Codex thread still has its own history (run 1, natively) ...
        texts = b.codex_last_user_texts()
        assert texts[0] == "remember the word PAPAYA"
        # ... and the handoff of exactly the runs it missed reached the model.
        handoff_text = texts[-1]
        assert "claude hears BANANA" in handoff_text
        assert "claude hears KIWI" in handoff_text
        # Run 1 is not re-told: it appears only inside Claude's reply to run 2 (the
        # fake model echoes its whole prompt, which held the full summary).
        replies = [
            m.text
            for m in b.r.rows("message", last.thread_id)
            if m.role == "assistant" and m.run_id
        ]
        echoed = sum(t.count("User: remember the word PAPAYA") for t in replies[1:3])
        assert handoff_text.count("User: remember the word PAPAYA") == echoed
        assert "User: claude hears BANANA" in handoff_text
        assert handoff_text.endswith("RECALL")


async def test_resume_failure_on_return_falls_back_to_a_full_summary(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        # Codex's rollout files are gone: resuming its thread fails.
        await scenarios.resume_failure(b, lambda: shutil.rmtree(b.codex_home / "sessions"))
        texts = b.codex_last_user_texts()
        assert "remember the word PAPAYA" in texts[-1]
        assert "claude hears BANANA" in texts[-1]


async def test_claude_after_a_cwd_change_starts_a_fresh_session(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        tid = await b.r.thread("claude", cwd=str(b.work))
        first = await b.send(tid, "remember the word PAPAYA")
        elsewhere = make_work_dir(tmp_path / "elsewhere")
        await b.r.manager.configure_thread(tid, cwd=str(elsewhere))
        last = await b.send(tid, "where are we")

        # Not resumed: a new session, told the whole history, in the new directory.
        assert last.provider_thread_id != first.provider_thread_id
        old = b.r.row("provider_thread", first.provider_thread_id)
        fresh = b.r.row("provider_thread", last.provider_thread_id)
        assert old.status == "closed" and fresh.native_thread_ref != old.native_thread_ref
        assert fresh.cwd == str(elsewhere)
        text = b.claude_last_user_text()
        assert "User: remember the word PAPAYA" in text and f"cwd {b.work} -> {elsewhere}" in text
        assert b.r.manager.runners[tid].config.cwd == str(elsewhere)
        handoff = b.r.row("context_handoff", last.context_handoff_id)
        assert handoff.strategy == "full_thread_summary"


async def test_codex_fork_at_an_earlier_run_is_native(tmp_path: Path) -> None:
    async with both(tmp_path) as b:

        def fork_saw_run_1_only() -> None:
            # thread/fork through run 1's turn: the model sees run 1 natively, not
            # run 2, and no handoff text.
            assert b.codex_last_user_texts() == ["remember the word PAPAYA", "RECALL"]

        await scenarios.codex_fork(b, fork_saw_run_1_only)
        assert b.codex_last_user_texts() == [
            "remember the word PAPAYA",
            "remember the word MANGO",
            "RECALL",
        ]


async def test_claude_fork_at_the_latest_run_is_native(tmp_path: Path) -> None:
    async with both(tmp_path) as b:

        def fork_saw_run_1() -> None:
            assert "remember the word PAPAYA" in b.claude_last_user_text()

        await scenarios.claude_fork(b, fork_saw_run_1)
        # The parent never saw the fork's run.
        assert "MANGO" not in b.claude_last_user_text()


async def test_codex_rollback_restores_files_and_reverts_the_thread(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        await scenarios.codex_rollback(b)
        # thread/revert dropped run 2's turn: the model sees run 1 only, natively.
        assert b.codex_last_user_texts() == ["remember the word PAPAYA", "RECALL"]


async def test_claude_rollback_starts_over_from_what_is_left(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        await scenarios.claude_rollback(b, b.claude_last_user_text)


async def test_codex_subagent_checkpoint_does_not_advance_the_run_count(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        await subagent_scenario(b.r, "codex", b.work, real=True)
        # The child thread made its own model requests (its command, its report).
        children = [
            q
            for q in b.codex_fake.requests
            if responses_api.user_texts(q)[-1:] == ["RUN_SHELL: echo child > child.txt"]
        ]
        assert len(children) == 2


async def test_claude_subagent_checkpoint_does_not_advance_the_run_count(tmp_path: Path) -> None:
    async with both(tmp_path) as b:
        await subagent_scenario(b.r, "claude", b.work, real=True)
        # The subagent's own requests reached the fake as a subagent's.
        system = [json.dumps(q.get("system")) for q in b.claude_fake.requests]
        assert sum("cc_is_subagent=true" in s for s in system) == 2


async def test_codex_child_outlives_the_turn_that_spawned_it(tmp_path: Path) -> None:
    """Spawn without wait: the parent answers and its turn completes; the child ends later."""
    async with both(tmp_path) as b:
        r = b.r
        tid = await r.thread("codex", cwd=str(b.work))
        run1 = await b.checkpointed(tid, "SPAWN_AGENT_NOWAIT: DAWDLE")
        (sub,) = [n for n in r.rows("node", tid) if n.kind == "subagent"]
        # The run completed from its root; the child (replying 0.5 s a delta) still works.
        assert r.row("node", run1.root_node_id).status == "completed"
        assert sub.status == "running"
        sub = await r.wait_for(
            lambda: (n := r.row("node", sub.id)).status != "running" and n, within=WAIT_S
        )
        assert sub.status == "completed"
        assert r.row("run", run1.id).status == "completed"
        child = r.row("provider_thread", sub.provider_thread_id)
        assert child.status == "idle" and child.native_thread_ref
        assert sorted(t.type for t in r.rows("context_transfer", tid)) == [
            "subagent_result",
            "subagent_spawn",
        ]
        # The child's reply, streamed after its parent's turn ended, is the child's: hidden.
        replies = [
            i for i in r.rows("turn_item", tid) if isinstance(i, AssistantMessage) and i.hidden
        ]
        assert [(i.text, i.status, i.run_id) for i in replies] == [
            ("dawdled: done", "completed", run1.id)
        ]
        nodes = {n.id: n for n in r.rows("node", tid)}
        assert nodes[replies[0].node_id].provider_thread_id == child.id

        # Its scope: checkpointed when the spawn returned and again at the child's end.
        def scope_cps() -> list[Any]:
            return [c for c in r.rows("checkpoint", tid) if c.scope_id == sub.checkpoint_scope_id]

        await r.wait_for(lambda: len(scope_cps()) == 2)
        assert all(c.app_run_ordinal is None for c in scope_cps())
        # The next run counts 2.
        await b.checkpointed(tid, "hello")
        assert sorted(x.ordinal for x in r.rows("run", tid)) == [1, 2]
        visible = [
            i.text
            for i in r.rows("turn_item", tid)
            if isinstance(i, AssistantMessage) and not i.hidden
        ]
        assert visible[0] == "not waiting"
