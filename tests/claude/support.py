"""Helpers for Claude adapter tests: hand-built frames through the real decoder."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
import trio

from adapters.claude.frames import decode_line
from adapters.claude.mapper import ClaudeMapper
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import ProviderEvent
from tests.adapters.support import QueuedEvents

#: Bound on every wait for an event.
WAIT_S = 5.0

SESSION = "sess-1"


def feed(mapper: ClaudeMapper, *frames: dict[str, Any]) -> list[ProviderEvent]:
    """Events for frames, each encoded and decoded as the runtime would."""
    events: list[ProviderEvent] = []
    for frame in frames:
        decoded = decode_line(json.dumps(frame).encode())
        assert decoded is not None
        events += mapper.frame(decoded, None)
    return events


def init(session: str = SESSION, version: str = "2.1.327") -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "init",
        "session_id": session,
        "model": "claude-sonnet-4-5",
        "claude_code_version": version,
        "uuid": "u-init",
    }


def stream(message_id: str, event: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "stream_event",
        "event": event,
        "api_message_id": message_id,
        "session_id": SESSION,
    }


def block_start(message_id: str, index: int, block: dict[str, Any]) -> dict[str, Any]:
    return stream(
        message_id, {"type": "content_block_start", "index": index, "content_block": block}
    )


def text_delta(message_id: str, index: int, text: str) -> dict[str, Any]:
    return stream(
        message_id,
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        },
    )


def assistant(message_id: str, block: dict[str, Any], uuid: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {"id": message_id, "model": "claude-sonnet-4-5", "content": [block]},
        "session_id": SESSION,
        "uuid": uuid,
        "parent_tool_use_id": None,
        **extra,
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def tool_result(
    tool_id: str, content: Any, *, is_error: bool = False, tool_use_result: Any = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_id,
                    "content": content,
                    "is_error": is_error,
                }
            ],
        },
        "session_id": SESSION,
    }
    if tool_use_result is not None:
        frame["tool_use_result"] = tool_use_result
    return frame


def result(
    *,
    subtype: str = "success",
    is_error: bool = False,
    terminal_reason: str = "completed",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "terminal_reason": terminal_reason,
        "num_turns": 1,
        "session_id": SESSION,
        "total_cost_usd": 0.0001,
        "duration_ms": 12,
        "usage": {"input_tokens": 10, "output_tokens": 3},
        **extra,
    }


def can_use_tool(
    request_id: str, tool: str, tool_input: dict[str, Any], tool_use_id: str
) -> dict[str, Any]:
    return {
        "type": "control_request",
        "request_id": request_id,
        "request": {
            "subtype": "can_use_tool",
            "tool_name": tool,
            "input": tool_input,
            "tool_use_id": tool_use_id,
        },
    }


def types(events: Iterable[ProviderEvent]) -> list[str]:
    return [str(type(e).__struct_config__.tag) for e in events]


def plain(events: Sequence[ProviderEvent]) -> list[dict[str, Any]]:
    """Events as JSON-ready dicts without raw ids (stable across runs)."""
    out = []
    for event in events:
        data = msgspec.to_builtins(event)
        data.pop("rawEventId", None)
        out.append(data)
    return out


class Events(QueuedEvents):
    """Collects a runtime's events; waits for one kind (bounded)."""

    def __init__(self, queue: EventQueue | None = None, wait_s: float = WAIT_S) -> None:
        super().__init__(queue, wait_s=wait_s)

    async def until(self, kind: type[Any]) -> Any:
        with trio.fail_after(self.wait_s):
            for event in self.seen:
                if isinstance(event, kind):
                    return event
            while True:
                event = await self.next()
                if isinstance(event, kind):
                    return event

    async def all_of(self, kind: type[Any], count: int) -> list[Any]:
        with trio.fail_after(self.wait_s):
            while sum(isinstance(e, kind) for e in self.seen) < count:
                await self.next()
        return [e for e in self.seen if isinstance(e, kind)]
