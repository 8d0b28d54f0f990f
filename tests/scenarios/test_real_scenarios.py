"""The scenario table (``table.py``) run on the real Codex and Claude binaries.

Each provider runs against its loopback fake model server; a scenario passes only
if both providers produce the same canonical shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from adapters.claude import ClaudeAdapter
from adapters.claude.runtime import ClaudeRuntime
from adapters.codex import CodexAdapter
from adapters.protocol import NullRawSink, ProviderAdapter, ProviderRuntime, RuntimeConfig
from fixtures.fakes import messages_api, responses_api
from fixtures.fakes.claude_env import (
    FAKE_MODEL,
    ClaudeDirs,
    claude_dirs,
    claude_env,
    find_claude_binary,
)
from fixtures.fakes.codex_home import make_codex_home, make_work_dir, resolve_codex_binary
from supervisor.launcher import RecordingLauncher
from tests.claude.support import Events

from .table import SCENARIOS, RuntimeAndEvents, Scenario, shape

CLAUDE = find_claude_binary()
CODEX = resolve_codex_binary()
#: Bound on every wait for an event (spawn ~1 s; a backend failure waits out retries).
WAIT_S = 30.0


@attrs.define
class _Base:
    adapter: ProviderAdapter
    config: RuntimeConfig
    launcher: RecordingLauncher
    work: Path

    @asynccontextmanager
    async def runtime(self) -> AsyncIterator[RuntimeAndEvents]:
        events = Events(wait_s=WAIT_S)
        async with self.adapter.open_runtime(
            self.config, self.launcher, events.queue, NullRawSink()
        ) as rt:
            yield rt, events


@attrs.define
class ClaudeDriver(_Base):
    fake: messages_api.FakeMessagesServer = attrs.field(kw_only=True)
    dirs: ClaudeDirs = attrs.field(kw_only=True)
    name: str = "claude"

    def command_prompt(self, marker: str) -> str:
        return f"RUN_BASH: touch {marker} && echo hi"

    async def kill(self, runtime: ProviderRuntime, native_thread_ref: str) -> None:
        # The CLI writes its session file after the result frame: killing before the
        # head is on disk would lose the turn (a real race, not a test artefact).
        assert isinstance(runtime, ClaudeRuntime)
        head = runtime.native_conversation_head_ref
        assert head is not None
        with trio.fail_after(WAIT_S):
            while True:
                files = list(self.dirs.config.glob(f"projects/*/{native_thread_ref}.jsonl"))
                if files and head in files[0].read_text(errors="replace"):
                    break
                await trio.sleep(0.05)
        await self.launcher.children[-1].kill()

    def last_request_user_texts(self) -> list[str]:
        request = self.fake.requests[-1]
        return [t for m in request["messages"] for t in messages_api.user_texts(m)]


@attrs.define
class CodexDriver(_Base):
    fake: responses_api.FakeResponsesServer = attrs.field(kw_only=True)
    name: str = "codex"

    def command_prompt(self, marker: str) -> str:
        return f"ESCALATE RUN_SHELL: touch {marker} && echo ran-{marker}"

    async def kill(self, runtime: ProviderRuntime, native_thread_ref: str) -> None:
        await self.launcher.children[-1].kill()

    def last_request_user_texts(self) -> list[str]:
        return responses_api.user_texts(self.fake.requests[-1])


@asynccontextmanager
async def claude_driver(tmp_path: Path) -> AsyncIterator[ClaudeDriver]:
    assert CLAUDE is not None
    with messages_api.FakeMessagesServer() as fake, claude_dirs() as dirs:
        config = RuntimeConfig(
            command=[str(CLAUDE)],
            env=claude_env(dirs, fake.base_url),
            cwd=str(dirs.cwd),
            model=FAKE_MODEL,
            request_timeout_s=WAIT_S,
        )
        async with trio.open_nursery() as nursery:
            launcher = RecordingLauncher(nursery)
            yield ClaudeDriver(ClaudeAdapter(), config, launcher, dirs.cwd, fake=fake, dirs=dirs)
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def codex_driver(tmp_path: Path) -> AsyncIterator[CodexDriver]:
    assert CODEX is not None
    with responses_api.FakeResponsesServer() as fake:
        work = make_work_dir(tmp_path / "work")
        config = RuntimeConfig(
            command=[str(CODEX)],
            env=make_codex_home(tmp_path, fake.base_url, work),
            cwd=str(work),
            model="mock-model",
            request_timeout_s=WAIT_S,
        )
        async with trio.open_nursery() as nursery:
            launcher = RecordingLauncher(nursery)
            yield CodexDriver(CodexAdapter(), config, launcher, work, fake=fake)
            nursery.cancel_scope.cancel()


_PROVIDERS = {
    "claude": (
        claude_driver,
        [pytest.mark.real_claude],
        CLAUDE is None,
        "no claude binary: set T3ORCH_CLAUDE_BIN or install claude-agent-sdk==0.2.184",
    ),
    "codex": (
        codex_driver,
        [pytest.mark.real_codex],
        CODEX is None,
        "codex 0.169.0 not installed: run scripts/install-codex",
    ),
}


def _cases() -> list[object]:
    cases: list[object] = []
    for scenario in SCENARIOS:
        for provider, (_, marks, missing, reason) in _PROVIDERS.items():
            cases.append(
                pytest.param(
                    provider,
                    scenario,
                    id=f"{scenario.name}-{provider}",
                    marks=[*marks, pytest.mark.skipif(missing, reason=reason)],
                )
            )
    return cases


def test_the_table_names_the_agreed_scenarios() -> None:
    assert [s.name for s in SCENARIOS] == [
        "streamed_reply",
        "approved_command",
        "declined_command",
        "interrupt",
        "kill_resume",
        "backend_error",
    ]


@pytest.mark.parametrize(("provider", "scenario"), _cases())
async def test_scenario(provider: str, scenario: Scenario, tmp_path: Path) -> None:
    make_driver = _PROVIDERS[provider][0]
    async with make_driver(tmp_path) as driver:  # type: ignore[operator]
        events = await scenario.run(driver)
    assert shape(events) == list(scenario.expected)
