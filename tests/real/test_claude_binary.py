"""The pinned `claude` CLI against the fake Messages API, over real pipes.

These prove the test infrastructure itself: the hermetic environment reaches the fake
and nothing else, a turn completes, and a side-effecting command asks permission.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fakes.claude_env import (
    FAKE_MODEL,
    ClaudeDirs,
    claude_argv,
    claude_dirs,
    claude_env,
    expected_version,
    find_claude_binary,
)
from fixtures.fakes.messages_api import FakeMessagesServer, user_texts
from fixtures.record.claude import ClaudeProcess, Frame, is_control

BINARY = find_claude_binary()

pytestmark = [
    pytest.mark.real_claude,
    pytest.mark.skipif(
        BINARY is None,
        reason="no claude binary: set T3ORCH_CLAUDE_BIN or install claude-agent-sdk==0.2.184",
    ),
]


@pytest.fixture
def binary() -> Path:
    assert BINARY is not None
    return BINARY


@pytest.fixture
def fake() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as server:
        yield server


@pytest.fixture
def dirs() -> Iterator[ClaudeDirs]:
    with claude_dirs() as made:
        yield made


@pytest.fixture
def cli(binary: Path, fake: FakeMessagesServer, dirs: ClaudeDirs) -> Iterator[ClaudeProcess]:
    process = ClaudeProcess(claude_argv(binary), claude_env(dirs, fake.base_url), dirs.cwd)
    try:
        yield process
    finally:
        process.ensure_dead()


def test_binary_is_the_pinned_version(binary: Path) -> None:
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.startswith(expected_version())


def test_a_turn_completes_against_the_fake(
    cli: ClaudeProcess, fake: FakeMessagesServer, dirs: ClaudeDirs
) -> None:
    init = cli.initialize()
    assert init["response"]["subtype"] == "success"
    cli.user("hello from the test")
    result = cli.result()
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["result"] == "ack: hello from the test"
    assert cli.close() == 0

    # The fake saw the model request, with our model and the user's words.
    (request,) = fake.requests
    assert request["model"] == FAKE_MODEL and request["stream"] is True
    last_user = [m for m in request["messages"] if m["role"] == "user"][-1]
    assert user_texts(last_user)[-1] == "hello from the test"
    # The session landed in our own config dir, not the real user's.
    assert list((dirs.config / "projects").glob(f"*/{result['session_id']}.jsonl"))


def test_side_effecting_bash_asks_can_use_tool(cli: ClaudeProcess, dirs: ClaudeDirs) -> None:
    cli.initialize()
    cli.user("RUN_BASH: touch made_by_bash && echo hi")
    # Hold the first control request unanswered until we have looked at it.
    request = cli.until(is_control("can_use_tool"), answer=lambda _: None, what="can_use_tool")
    asked: Frame = request["request"]
    assert asked["tool_name"] == "Bash"
    assert asked["input"]["command"] == "touch made_by_bash && echo hi"
    assert asked["tool_use_id"]
    assert not (dirs.cwd / "made_by_bash").exists()

    cli.respond(request["request_id"], {"behavior": "allow", "updatedInput": asked["input"]})
    result = cli.result()
    assert result["is_error"] is False
    assert result["result"] == "tool said: hi"
    assert (dirs.cwd / "made_by_bash").exists()
    assert cli.close() == 0
