"""The real `claude` binary driven through ClaudeAdapter, against the fake Messages API.

Real processes (adapters.process: own process group, parent-death signal), the
pinned CLI, a loopback fake model: every assertion is on canonical events.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from adapters.claude import ClaudeAdapter
from adapters.claude.runtime import ClaudeRuntime
from adapters.errors import ResumeError
from adapters.process import TrioProcessLauncher
from adapters.protocol import NullRawSink, RequestAnswer, ResumeRefs, RuntimeConfig
from fixtures.fakes.claude_env import (
    FAKE_MODEL,
    ClaudeDirs,
    claude_dirs,
    claude_env,
    expected_version,
    find_claude_binary,
)
from fixtures.fakes.messages_api import FakeMessagesServer, user_texts
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
)
from t3orch.domain.vocab import RuntimeMode
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    RequestOpened,
    RequestResolved,
    ResumeFailed,
    RuntimeExited,
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
)
from tests.claude.support import Events

BINARY = find_claude_binary()

pytestmark = [
    pytest.mark.real_claude,
    pytest.mark.skipif(
        BINARY is None,
        reason="no claude binary: set T3ORCH_CLAUDE_BIN or install claude-agent-sdk==0.2.184",
    ),
]

#: Bound on each wait for a canonical event (spawn is ~1 s, a turn well under 1 s;
#: a backend failure waits out one retry).
WAIT_S = 30.0


@pytest.fixture
def fake() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as server:
        yield server


@pytest.fixture
def dirs() -> Iterator[ClaudeDirs]:
    with claude_dirs() as made:
        yield made


def config(fake: FakeMessagesServer, dirs: ClaudeDirs, mode: RuntimeMode) -> RuntimeConfig:
    assert BINARY is not None
    return RuntimeConfig(
        command=[str(BINARY)],
        env=claude_env(dirs, fake.base_url),
        cwd=str(dirs.cwd),
        model=FAKE_MODEL,
        runtime_mode=mode,
        request_timeout_s=WAIT_S,
    )


@asynccontextmanager
async def claude(
    fake: FakeMessagesServer, dirs: ClaudeDirs, mode: RuntimeMode = "approval-required"
) -> AsyncIterator[tuple[ClaudeRuntime, Events]]:
    """A runtime over real processes; leaving kills and reaps them."""
    events = Events(wait_s=WAIT_S)
    async with trio.open_nursery() as nursery:
        launcher = TrioProcessLauncher(nursery)
        adapter = ClaudeAdapter()
        async with adapter.open_runtime(
            config(fake, dirs, mode), launcher, events.queue, NullRawSink()
        ) as rt:
            yield rt, events


async def test_streamed_reply(fake: FakeMessagesServer, dirs: ClaudeDirs) -> None:
    async with claude(fake, dirs) as (runtime, events):
        ref = await runtime.open_thread(None)
        await runtime.start_turn("hello there")
        done = await events.until(TurnCompleted)
        assert done.status == "completed"
        assert done.usage is not None and done.usage["output_tokens"] > 0
        ready = await events.until(SessionReady)
        assert ready.provider_version == expected_version() and ready.native_session_ref == ref
        deltas = [e for e in events.seen if isinstance(e, ItemDelta)]
        assert len(deltas) >= 2  # streamed, not one block
        assert "".join(d.text for d in deltas) == "ack: hello there"
        message = next(e for e in events.seen if isinstance(e, ItemCompleted))
        assert message.content.__struct_config__.tag == "assistant_message"
        refs = [e for e in events.seen if isinstance(e, ThreadRefsLearned)]
        assert {r.native_thread_ref for r in refs} == {ref}
        assert refs[-1].native_conversation_head_ref is not None
        await runtime.close()
        exited = await events.until(RuntimeExited)
        assert (exited.code, exited.signal) == (0, None)


async def _command_turn(
    runtime: ClaudeRuntime, events: Events, answer: RequestAnswer
) -> tuple[RequestOpened, ItemCompleted, TurnCompleted]:
    await runtime.open_thread(None)
    await runtime.start_turn("RUN_BASH: touch made_by_claude && echo hi")
    request = await events.until(RequestOpened)
    assert request.kind == "command"
    assert request.summary == "touch made_by_claude && echo hi"
    await runtime.respond(request.native_request_ref, answer)
    done = await events.until(TurnCompleted)
    item = next(
        e
        for e in events.seen
        if isinstance(e, ItemCompleted) and e.native_item_ref == request.native_item_ref
    )
    return request, item, done


async def test_approved_command_really_runs(fake: FakeMessagesServer, dirs: ClaudeDirs) -> None:
    async with claude(fake, dirs) as (runtime, events):
        request, item, done = await _command_turn(runtime, events, RequestAnswer("accept"))
        assert (dirs.cwd / "made_by_claude").exists()
        assert item.status == "completed"
        assert item.content == CommandExecution(
            input="touch made_by_claude && echo hi", output="hi", exit_code=0
        )
        resolved = await events.until(RequestResolved)
        assert (resolved.native_request_ref, resolved.decision) == (
            request.native_request_ref,
            "accept",
        )
        assert done.status == "completed"


async def test_declined_command_does_not_run(fake: FakeMessagesServer, dirs: ClaudeDirs) -> None:
    async with claude(fake, dirs) as (runtime, events):
        _, item, done = await _command_turn(
            runtime, events, RequestAnswer("decline", message="not today")
        )
        assert not (dirs.cwd / "made_by_claude").exists()
        assert item.status == "declined"
        assert isinstance(item.content, CommandExecution) and "not today" in item.content.output
        assert done.status == "completed"  # the model answered the refusal


async def test_interrupt_mid_stream(fake: FakeMessagesServer, dirs: ClaudeDirs) -> None:
    async with claude(fake, dirs) as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn("SLOW")
        delta = await events.until(ItemDelta)
        await runtime.interrupt_turn()
        done = await events.until(TurnCompleted)
        assert done.status == "interrupted"
        # The reply cut off mid-stream ends interrupted, not completed.
        (cut,) = [
            e
            for e in events.seen
            if isinstance(e, ItemCompleted) and e.native_item_ref == delta.native_item_ref
        ]
        assert cut.status == "interrupted" and isinstance(cut.content, AssistantMessage)
        assert cut.content.text.startswith(delta.text)
        # The process takes the next turn.
        await runtime.start_turn("after the interrupt")
        turns = await events.all_of(TurnCompleted, 2)
        assert [t.status for t in turns] == ["interrupted", "completed"]


async def _wait_for_session_file(dirs: ClaudeDirs, session: str, head: str) -> None:
    """Until the CLI has written the head message to its session file (polled, bounded)."""
    with trio.fail_after(WAIT_S):
        while True:
            files = list(dirs.config.glob(f"projects/*/{session}.jsonl"))
            if files and head in files[0].read_text(errors="replace"):
                return
            await trio.sleep(0.05)


async def test_kill_then_resume_in_a_new_process(
    fake: FakeMessagesServer, dirs: ClaudeDirs
) -> None:
    async with claude(fake, dirs) as (runtime, events):
        ref = await runtime.open_thread(None)
        await runtime.start_turn("remember the word PAPAYA")
        assert (await events.until(TurnCompleted)).status == "completed"
        head = runtime.native_conversation_head_ref
        assert head is not None
        await _wait_for_session_file(dirs, ref, head)
        pid = runtime.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        exited = await events.until(RuntimeExited)
        assert exited.signal == signal.SIGKILL

    async with claude(fake, dirs) as (runtime, events):
        resumed = await runtime.open_thread(ResumeRefs(ref, head))
        assert resumed == ref
        before = len(fake.requests)
        await runtime.start_turn("RECALL")
        done = await events.until(TurnCompleted)
        assert done.status == "completed"
        # The earlier conversation went to the model with the resumed process's request.
        request = fake.requests[before]
        earlier = [text for message in request["messages"] for text in user_texts(message)]
        assert any("remember the word PAPAYA" in text for text in earlier)
        reply = [
            e.content
            for e in events.seen
            if isinstance(e, ItemCompleted)
            and e.content.__struct_config__.tag == "assistant_message"
        ]
        assert "PAPAYA" in getattr(reply[-1], "text", "")
        refs = [e for e in events.seen if isinstance(e, ThreadRefsLearned)]
        assert {r.native_thread_ref for r in refs} == {ref}


async def test_resume_of_an_unknown_session_fails(
    fake: FakeMessagesServer, dirs: ClaudeDirs
) -> None:
    async with claude(fake, dirs) as (runtime, events):
        with pytest.raises(ResumeError) as caught:
            await runtime.open_thread(ResumeRefs("5259c18c-2fa1-4d22-b201-f883d85567ec"))
        assert caught.value.reason == "not_found"
        failed = await events.until(ResumeFailed)
        assert failed.reason == "not_found"


async def test_backend_error_is_a_failed_turn(fake: FakeMessagesServer, dirs: ClaudeDirs) -> None:
    async with claude(fake, dirs) as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn("FAIL")
        done = await events.until(TurnCompleted)
        assert done.status == "failed"
        assert done.error is not None and "500" in done.error


async def test_full_access_runs_commands_without_asking(
    fake: FakeMessagesServer, dirs: ClaudeDirs
) -> None:
    """Even as root, where the CLI refuses its own bypassPermissions mode."""
    async with claude(fake, dirs, "full-access") as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn("RUN_BASH: touch unasked && echo hi")
        done = await events.until(TurnCompleted)
        assert done.status == "completed"
        assert (dirs.cwd / "unasked").exists()
        assert not any(isinstance(e, RequestOpened) for e in events.seen)
        run = next(
            e
            for e in events.seen
            if isinstance(e, ItemCompleted) and isinstance(e.content, CommandExecution)
        )
        assert run.status == "completed"


def test_binary_path_is_a_file() -> None:
    assert BINARY is not None and Path(BINARY).is_file()
