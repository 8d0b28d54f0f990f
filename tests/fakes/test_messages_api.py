"""The fake Messages API: routing on the user's words, and the SSE it serves."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fixtures.fakes.messages_api import (
    SLOW_DELTAS,
    FakeMessagesServer,
    TextBlock,
    ToolUseBlock,
    route,
)
from fixtures.fakes.wordstream import TEXT_WRITTEN

REMINDER = "<system-reminder>\nYou may use Bash, RUN_BASH: rm -rf /\n</system-reminder>\n"


def user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "stream": True, "messages": list(messages)}


def reply_text(blocks: tuple[TextBlock | ToolUseBlock, ...]) -> str:
    return "".join("".join(b.deltas) for b in blocks if isinstance(b, TextBlock))


# -- routing -------------------------------------------------------------------


def test_stream_asks_for_that_many_one_word_deltas_at_that_rate() -> None:
    (block,) = route(body(user("STREAM: 50 100"))).blocks
    assert isinstance(block, TextBlock)
    assert len(block.deltas) == 50 and block.deltas[-1] == "word49 "
    assert block.interval_s == pytest.approx(0.01)


def test_default_is_ack_in_several_deltas() -> None:
    reply = route(body(user("hello there")))
    assert reply_text(reply.blocks) == "ack: hello there"
    assert isinstance(reply.blocks[0], TextBlock) and len(reply.blocks[0].deltas) > 1
    assert reply.stop_reason == "end_turn"


def test_string_content_is_accepted() -> None:
    reply = route(body({"role": "user", "content": "plain"}))
    assert reply_text(reply.blocks) == "ack: plain"


def test_reminders_and_a_trailing_system_message_are_ignored() -> None:
    reply = route(body(user(REMINDER, "hi"), {"role": "system", "content": "RUN_BASH: no"}))
    assert reply_text(reply.blocks) == "ack: hi"


def test_interrupt_marker_merged_into_the_next_turn_is_ignored() -> None:
    reply = route(body(user("[Request interrupted by user]", "RUN_BASH: touch y")))
    assert reply.stop_reason == "tool_use"


def test_run_bash_is_text_then_a_bash_tool_use() -> None:
    reply = route(body(user(REMINDER, "RUN_BASH: touch x && echo hi")))
    text, tool = reply.blocks
    assert isinstance(text, TextBlock)
    assert isinstance(tool, ToolUseBlock)
    assert tool.name == "Bash" and tool.input["command"] == "touch x && echo hi"
    assert reply.stop_reason == "tool_use"


def test_use_tool_names_any_tool_with_json_input() -> None:
    reply = route(body(user('USE_TOOL: mcp__t3__echo {"text": "x"}')))
    assert reply.blocks == (ToolUseBlock("mcp__t3__echo", {"text": "x"}),)


def test_tool_result_means_final_answer_quoting_the_output() -> None:
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": REMINDER}],
            }
        ],
    }
    reply = route(body(user("RUN_BASH: echo hi"), {"role": "assistant", "content": []}, result))
    assert reply_text(reply.blocks) == "tool said: hi"


def test_failed_tool_result_is_quoted_as_failure() -> None:
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t", "content": "no", "is_error": True}],
    }
    assert reply_text(route(body(result)).blocks) == "tool failed: no"


def test_slow_and_fail() -> None:
    slow = route(body(user("SLOW")))
    assert isinstance(slow.blocks[0], TextBlock)
    assert len(slow.blocks[0].deltas) == SLOW_DELTAS and slow.blocks[0].interval_s == 0.5
    assert route(body(user("FAIL"))).status == 500


def test_recall_lists_earlier_user_texts() -> None:
    reply = route(
        body(
            user(REMINDER, "first"),
            {"role": "assistant", "content": [{"type": "text", "text": "ack: first"}]},
            user("second"),
            {"role": "assistant", "content": []},
            user("RECALL"),
        )
    )
    assert reply_text(reply.blocks) == "recall: first | second"


# -- over HTTP -----------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as server:
        yield server


def post(
    fake: FakeMessagesServer, payload: dict[str, Any], path: str = "/v1/messages?beta=true"
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in raw.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_serves_the_sse_sequence_and_records_the_request(fake: FakeMessagesServer) -> None:
    assert fake.base_url == f"http://127.0.0.1:{fake.port}"
    request = body(user("RUN_BASH: touch x"))
    status, raw = post(fake, request)
    assert status == 200
    events = sse(raw)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 2
    assert all(name == data["type"] for name, data in events)
    tool_start = [d for n, d in events if n == "content_block_start"][1]["content_block"]
    assert tool_start["name"] == "Bash" and tool_start["input"] == {}
    json_delta = next(d for n, d in events if d.get("delta", {}).get("type") == "input_json_delta")
    assert json.loads(json_delta["delta"]["partial_json"])["command"] == "touch x"
    message_delta = events[-2][1]
    assert message_delta["delta"]["stop_reason"] == "tool_use"
    assert set(message_delta["usage"]) >= {
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    }
    assert events[0][1]["message"]["model"] == "claude-sonnet-4-5"
    assert fake.requests == [request]


def test_a_stream_notes_when_it_wrote_each_word(fake: FakeMessagesServer) -> None:
    start = time.monotonic()
    status, raw = post(fake, body(user("STREAM: 10 100")))
    assert status == 200
    words = [d for _, d in sse(raw) if d.get("delta", {}).get("type") == "text_delta"]
    written = TEXT_WRITTEN.since(start)
    assert len(written) == len(words) == 10
    assert written == sorted(written) and written[-1] - written[0] >= 0.09 - 0.002


def test_fail_is_http_500(fake: FakeMessagesServer) -> None:
    status, raw = post(fake, body(user("FAIL")))
    assert status == 500
    assert json.loads(raw)["type"] == "error"


def test_anything_else_is_404(fake: FakeMessagesServer) -> None:
    assert post(fake, {}, "/v1/messages/count_tokens")[0] == 404
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
    try:
        conn.request("GET", "/v1/models")
        response = conn.getresponse()
        response.read()
        assert response.status == 404
    finally:
        conn.close()
    assert fake.requests == []


def test_slow_stream_stops_when_the_client_leaves(fake: FakeMessagesServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
    try:
        conn.request("POST", "/v1/messages", json.dumps(body(user("SLOW"))))
        response = conn.getresponse()
        assert response.status == 200
        seen = b""
        while b"chunk 0" not in seen:  # bounded by the connection's 10 s timeout
            chunk = response.read1(65536)
            assert chunk, "stream ended early"
            seen += chunk
        assert fake.open_streams == 1
        # The response holds the socket open through its file object: close both.
        response.close()
    finally:
        conn.close()
    deadline = time.monotonic() + 5
    while fake.open_streams and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.open_streams == 0
