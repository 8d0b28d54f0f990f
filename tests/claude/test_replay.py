"""Every recorded Claude transcript through the real adapter, asserted on canonical events."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from adapters.replay import replay_events
from t3orch.domain.turn_items import (
    CommandExecution,
    DynamicTool,
)
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RequestCancelled,
    RequestOpened,
    RequestResolved,
    ResumeFailed,
    RuntimeExited,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
)

from .support import plain

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
TRANSCRIPTS = sorted(FIXTURES.glob("*.ndjson"))


def shape(events: list[ProviderEvent]) -> list[str]:
    """The events a reader cares about, one short word each (no deltas, usage, refs)."""
    out: list[str] = []
    for event in events:
        if isinstance(event, TurnStarted):
            out.append("turn")
        elif isinstance(event, TurnCompleted):
            out.append(f"turn:{event.status}")
        elif isinstance(event, ItemStarted):
            out.append(f"+{event.content.__struct_config__.tag}")
        elif isinstance(event, ItemCompleted):
            out.append(f"-{event.content.__struct_config__.tag}:{event.status}")
        elif isinstance(event, RequestOpened):
            out.append(f"request:{event.kind}")
        elif isinstance(event, RequestResolved):
            out.append(f"resolved:{event.decision}")
        elif isinstance(event, RequestCancelled):
            out.append("request:cancelled")
        elif isinstance(event, ResumeFailed):
            out.append(f"resume_failed:{event.reason}")
        elif isinstance(event, RuntimeExited):
            out.append(f"exit:{event.code if event.signal is None else -event.signal}")
    return out


async def replay(name: str) -> list[ProviderEvent]:
    return await replay_events("claude", FIXTURES / f"{name}.ndjson")


def test_there_are_transcripts() -> None:
    assert len(TRANSCRIPTS) >= 8


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
async def test_every_transcript_replays_with_consistent_lifecycles(path: Path) -> None:
    events = await replay_events("claude", path)
    # Each process ends with exactly one RuntimeExited, the last event of its segment.
    assert isinstance(events[-1], RuntimeExited)
    # Every turn that starts completes; every item that starts completes once.
    assert sum(isinstance(e, TurnStarted) for e in events) == sum(
        isinstance(e, TurnCompleted) for e in events
    )
    started = Counter(e.native_item_ref for e in events if isinstance(e, ItemStarted))
    completed = Counter(e.native_item_ref for e in events if isinstance(e, ItemCompleted))
    assert started == completed
    assert all(count == 1 for count in completed.values())
    # Deltas only go to items that are open.
    open_items: set[str] = set()
    for event in events:
        if isinstance(event, ItemStarted):
            open_items.add(event.native_item_ref)
        elif isinstance(event, ItemCompleted):
            open_items.discard(event.native_item_ref)
        elif isinstance(event, ItemDelta):
            assert event.native_item_ref in open_items
    # Every request ends: answered by us, or withdrawn by the CLI.
    opened = {e.native_request_ref for e in events if isinstance(e, RequestOpened)}
    ended = {
        e.native_request_ref for e in events if isinstance(e, RequestResolved | RequestCancelled)
    }
    assert opened == ended
    # Nothing unexpected: no frame we failed to decode.
    codes = {e.code for e in events if isinstance(e, Diagnostic)}
    assert not codes & {"claude.invalid_frame", "claude.unknown_frame", "claude.malformed_line"}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
async def test_replay_is_deterministic(path: Path) -> None:
    first = plain(await replay_events("claude", path))
    second = plain(await replay_events("claude", path))
    assert first == second


async def test_plain_reply() -> None:
    events = await replay("plain_reply")
    assert shape(events) == [
        "turn",
        "+assistant_message",
        "-assistant_message:completed",
        "turn:completed",
        "exit:0",
    ]
    deltas = "".join(e.text for e in events if isinstance(e, ItemDelta))
    assert deltas == "ack: hello there"
    refs = [e for e in events if isinstance(e, ThreadRefsLearned)]
    assert refs[0].native_thread_ref == refs[-1].native_thread_ref
    assert refs[-1].native_conversation_head_ref is not None


async def test_bash_allowed() -> None:
    events = await replay("bash_allowed")
    assert shape(events) == [
        "turn",
        "+assistant_message",
        "-assistant_message:completed",
        "+command_execution",
        "request:command",
        "resolved:accept",
        "-command_execution:completed",
        "+assistant_message",
        "-assistant_message:completed",
        "turn:completed",
        "exit:0",
    ]
    command = next(
        e
        for e in events
        if isinstance(e, ItemCompleted) and isinstance(e.content, CommandExecution)
    )
    assert command.content == CommandExecution(input="touch x && echo hi", output="hi", exit_code=0)
    request = next(e for e in events if isinstance(e, RequestOpened))
    assert request.native_item_ref == command.native_item_ref


async def test_bash_denied() -> None:
    events = await replay("bash_denied")
    assert shape(events)[3:7] == [
        "+command_execution",
        "request:command",
        "resolved:decline",
        "-command_execution:declined",
    ]
    assert shape(events)[-2:] == ["turn:completed", "exit:0"]


async def test_interrupt_streaming_then_another_turn() -> None:
    events = await replay("interrupt_streaming")
    assert shape(events) == [
        "turn",
        "+assistant_message",
        "-assistant_message:interrupted",
        "turn:interrupted",
        "turn",
        "+assistant_message",
        "-assistant_message:completed",
        "turn:completed",
        "exit:0",
    ]


async def test_interrupt_with_a_pending_permission_cancels_the_request() -> None:
    events = await replay("interrupt_pending_permission")
    assert shape(events) == [
        "turn",
        "+assistant_message",
        "-assistant_message:completed",
        "+command_execution",
        "request:command",
        "request:cancelled",
        "-command_execution:interrupted",
        "turn:interrupted",
        "exit:1",
    ]
    # The cancelled request was never answered.
    assert not any(isinstance(e, RequestResolved) for e in events)


async def test_api_error_is_a_failed_turn() -> None:
    events = await replay("api_error")
    assert shape(events) == ["turn", "turn:failed", "exit:1"]
    done = next(e for e in events if isinstance(e, TurnCompleted))
    assert done.error is not None and "API Error: 500" in done.error
    assert [e.code for e in events if isinstance(e, Diagnostic)] == [
        "claude.api_retry",
        "claude.api_error",
    ]


async def test_kill_then_resume_keeps_the_session() -> None:
    events = await replay("kill_resume")
    assert shape(events) == [
        "turn",
        "+assistant_message",
        "-assistant_message:completed",
        "turn:completed",
        "exit:-9",
        "turn",
        "+assistant_message",
        "-assistant_message:completed",
        "turn:completed",
        "exit:0",
    ]
    sessions = {e.native_thread_ref for e in events if isinstance(e, ThreadRefsLearned)}
    assert len(sessions) == 1
    texts = [
        e.content.text
        for e in events
        if isinstance(e, ItemCompleted) and e.content.__struct_config__.tag == "assistant_message"
    ]
    assert "PAPAYA" in texts[-1]


async def test_resume_of_an_unknown_session_fails_as_not_found() -> None:
    events = await replay("resume_unknown")
    assert shape(events) == ["resume_failed:not_found", "exit:1"]
    failed = events[0]
    assert isinstance(failed, ResumeFailed) and "No conversation found" in failed.message


async def test_hooks_are_answered_and_invisible() -> None:
    events = await replay("hooks")
    assert shape(await replay("bash_allowed")) == shape(events)


async def test_mcp_tool_is_a_dynamic_tool_with_its_output() -> None:
    events = await replay("mcp_tool")
    assert "request:dynamic_tool_call" in shape(events)
    tool = next(
        e for e in events if isinstance(e, ItemCompleted) and isinstance(e.content, DynamicTool)
    )
    assert tool.content.tool_name == "mcp__t3__echo"
    assert tool.content.output == [{"type": "text", "text": "echo: from the fake model"}]


class CapturingSink:
    """A raw sink keeping what the adapter wrote, decoded."""

    def __init__(self) -> None:
        self.outgoing: list[dict[str, object]] = []
        self._n = 0

    def record(self, direction: str, line: bytes) -> str:
        self._n += 1
        if direction == "outgoing":
            self.outgoing.append(json.loads(line))
        return f"raw_{self._n}"


async def test_hooks_replay_sends_the_recorded_hooks_and_answers() -> None:
    sink = CapturingSink()
    await replay_events("claude", FIXTURES / "hooks.ndjson", raw=sink)
    init = sink.outgoing[0]
    assert init["request"] == {
        "subtype": "initialize",
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hookCallbackIds": ["hook_0"]}],
            "PostToolUse": [{"matcher": "Bash", "hookCallbackIds": ["hook_1"]}],
        },
    }
    answers = [
        f["response"]["response"]  # type: ignore[index]
        for f in sink.outgoing
        if f["type"] == "control_response"
    ]
    assert answers[0] == {"continue": True} and answers[-1] == {"continue": True}


async def test_mcp_replay_answers_as_the_recording_did() -> None:
    sink = CapturingSink()
    await replay_events("claude", FIXTURES / "mcp_tool.ndjson", raw=sink)
    replies = [
        f["response"]["response"]["mcp_response"]  # type: ignore[index]
        for f in sink.outgoing
        if f["type"] == "control_response" and "mcp_response" in f["response"]["response"]  # type: ignore[index,operator]
    ]
    assert replies[0]["result"]["serverInfo"]["name"] == "t3"
    assert {"type": "text", "text": "echo: from the fake model"} in replies[-1]["result"]["content"]
