"""The fake Responses API: routing (pure) and the HTTP/SSE surface (loopback only)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fixtures.fakes.responses_api import (
    SLOW_DELTAS,
    CustomToolCallReply,
    FailureReply,
    FakeResponsesServer,
    FunctionCallReply,
    TextReply,
    plan_reply,
    user_texts,
)
from fixtures.fakes.wordstream import TEXT_WRITTEN

TIMEOUT_S = 5.0


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def body(*items: dict[str, Any]) -> dict[str, Any]:
    """A request body shaped like Codex's: developer + context messages, then ``items``."""
    preamble = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "<permissions instructions>x"}],
        },
        user("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"),
    ]
    return {"model": "mock-model", "stream": True, "input": [*preamble, *items]}


# --- routing -----------------------------------------------------------------------


def test_stream_asks_for_that_many_one_word_deltas_at_that_rate() -> None:
    reply = plan_reply(body(user("STREAM: 200 50")))
    assert isinstance(reply, TextReply)
    assert len(reply.chunks) == 200 and reply.chunks[:2] == ("word0 ", "word1 ")
    assert reply.interval_s == pytest.approx(0.02)


def test_user_texts_skip_developer_and_context_messages() -> None:
    assert user_texts(body(user("one"), user("two"))) == ["one", "two"]


def test_default_reply_acks_the_newest_user_text_in_several_deltas() -> None:
    reply = plan_reply(body(user("older"), user("hello there")))
    assert isinstance(reply, TextReply)
    assert reply.text == "ack: hello there"
    assert len(reply.chunks) > 1


def test_run_shell_calls_exec_command_without_escalation() -> None:
    reply = plan_reply(body(user("RUN_SHELL: ls -la")))
    assert isinstance(reply, FunctionCallReply)
    assert reply.name == "exec_command"
    assert json.loads(reply.arguments) == {"cmd": "ls -la"}


def test_escalate_asks_for_escalated_sandbox_permissions() -> None:
    reply = plan_reply(body(user("ESCALATE RUN_SHELL: touch a.txt")))
    assert isinstance(reply, FunctionCallReply)
    args = json.loads(reply.arguments)
    assert args["cmd"] == "touch a.txt"
    assert args["sandbox_permissions"] == "require_escalated"
    assert args["justification"]


def test_patch_is_a_freeform_apply_patch_call_adding_the_file() -> None:
    reply = plan_reply(body(user("PATCH: dir/notes.txt hello world")))
    assert isinstance(reply, CustomToolCallReply)
    assert reply.name == "apply_patch"
    assert reply.input == (
        "*** Begin Patch\n*** Add File: dir/notes.txt\n+hello world\n*** End Patch\n"
    )


def test_slow_streams_sixty_spaced_deltas() -> None:
    reply = plan_reply(body(user("SLOW please")))
    assert isinstance(reply, TextReply)
    assert len(reply.chunks) == SLOW_DELTAS
    assert reply.interval_s == pytest.approx(0.5)


def test_fail_is_http_500() -> None:
    reply = plan_reply(body(user("FAIL now")))
    assert isinstance(reply, FailureReply)
    assert reply.status == 500


def test_recall_lists_every_earlier_user_text() -> None:
    reply = plan_reply(body(user("first"), user("second"), user("RECALL")))
    assert isinstance(reply, TextReply)
    assert reply.text == 'recall: ["first", "second"]'


@pytest.mark.parametrize("kind", ["function_call_output", "custom_tool_call_output"])
def test_tool_output_gets_a_final_text_quoting_it(kind: str) -> None:
    call = {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{}"}
    output = {"type": kind, "call_id": "call_1", "output": "Process exited with code 0\n"}
    reply = plan_reply(body(user("RUN_SHELL: true"), call, output))
    assert isinstance(reply, TextReply)
    assert reply.text == "tool output: Process exited with code 0"


def test_spawn_agent_calls_the_multi_agent_namespace_then_waits_for_the_child() -> None:
    spawn = plan_reply(body(user("SPAWN_AGENT: RUN_SHELL: echo hi > a.txt")))
    assert isinstance(spawn, FunctionCallReply)
    assert (spawn.namespace, spawn.name) == ("multi_agent_v1", "spawn_agent")
    assert json.loads(spawn.arguments) == {"message": "RUN_SHELL: echo hi > a.txt"}
    call = {"type": "function_call", "call_id": "call_1", "name": "spawn_agent"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": '{"agent_id":"a1"}'}
    wait = plan_reply(body(user("SPAWN_AGENT: x"), call, output))
    assert isinstance(wait, FunctionCallReply)
    assert (wait.namespace, wait.name) == ("multi_agent_v1", "wait_agent")
    assert json.loads(wait.arguments)["targets"] == ["a1"]
    waited = {"type": "function_call", "call_id": "call_2", "name": "wait_agent"}
    status = {"type": "function_call_output", "call_id": "call_2", "output": "done"}
    note = user('<subagent_notification>\n{"agent_path":"a1"}\n</subagent_notification>')
    final = plan_reply(body(user("SPAWN_AGENT: x"), call, output, waited, status, note))
    assert isinstance(final, TextReply) and final.text == "subagent finished"


def test_spawn_agent_nowait_answers_the_spawn_without_waiting() -> None:
    spawn = plan_reply(body(user("SPAWN_AGENT_NOWAIT: DAWDLE")))
    assert isinstance(spawn, FunctionCallReply) and spawn.name == "spawn_agent"
    assert json.loads(spawn.arguments) == {"message": "DAWDLE"}
    call = {"type": "function_call", "call_id": "call_1", "name": "spawn_agent"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": '{"agent_id":"a1"}'}
    final = plan_reply(body(user("SPAWN_AGENT_NOWAIT: DAWDLE"), call, output))
    assert isinstance(final, TextReply) and final.text == "not waiting"
    # The child's own request: a slow reply, so it ends after its parent.
    child = plan_reply(body(user("DAWDLE")))
    assert isinstance(child, TextReply) and child.text == "dawdled: done"
    assert len(child.chunks) > 1 and child.interval_s == 0.5


# --- HTTP surface ------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeResponsesServer]:
    with FakeResponsesServer() as fake:
        yield fake


def post(server: FakeResponsesServer, path: str, payload: dict[str, Any]) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
    try:
        headers = {"Content-Type": "application/json", "Authorization": "Bearer dummy"}
        conn.request("POST", path, body=json.dumps(payload), headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


def sse_payloads(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        payload = json.loads(lines["data"])
        assert payload["type"] == lines["event"]
        events.append(payload)
    return events


def test_text_reply_streams_the_responses_event_sequence(server: FakeResponsesServer) -> None:
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    status, ctype, text = post(server, "/v1/responses", body(user("hi")))
    assert status == 200
    assert ctype.startswith("text/event-stream")
    events = sse_payloads(text)
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.output_item.added"]
    assert types[-2:] == ["response.output_item.done", "response.completed"]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "ack: hi"
    usage = events[-1]["response"]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert {"input_tokens_details", "output_tokens_details"} <= usage.keys()
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_a_stream_notes_when_it_wrote_each_word(server: FakeResponsesServer) -> None:
    start = time.monotonic()
    status, _, text = post(server, "/v1/responses", body(user("STREAM: 10 100")))
    assert status == 200
    words = [e for e in sse_payloads(text) if e["type"] == "response.output_text.delta"]
    written = TEXT_WRITTEN.since(start)
    assert len(written) == len(words) == 10
    assert written == sorted(written) and written[-1] - written[0] >= 0.09 - 0.002


def test_requests_are_recorded_in_order_with_headers(server: FakeResponsesServer) -> None:
    post(server, "/v1/responses", body(user("one")))
    post(server, "/v1/responses", body(user("two")))
    assert [user_texts(b)[-1] for b in server.wait_for_requests(2, TIMEOUT_S)] == ["one", "two"]
    assert server.received[0].headers["authorization"] == "Bearer dummy"


def test_tool_call_reply_carries_the_item_in_added_and_done(server: FakeResponsesServer) -> None:
    _, _, text = post(server, "/v1/responses", body(user("ESCALATE RUN_SHELL: id")))
    events = sse_payloads(text)
    done = next(e for e in events if e["type"] == "response.output_item.done")["item"]
    assert done["type"] == "function_call" and done["call_id"] == "call_1"
    assert json.loads(done["arguments"])["sandbox_permissions"] == "require_escalated"
    assert events[-1]["type"] == "response.completed"


def test_fail_answers_500_and_unknown_paths_404(server: FakeResponsesServer) -> None:
    assert post(server, "/v1/responses", body(user("FAIL")))[0] == 500
    assert post(server, "/v1/models", {})[0] == 404
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
    try:
        conn.request("GET", "/v1/responses")
        assert conn.getresponse().status == 404
    finally:
        conn.close()
    # Only the /v1/responses POSTs count as model requests.
    assert len(server.requests) == 1


def test_slow_stream_stops_soon_after_the_client_hangs_up(server: FakeResponsesServer) -> None:
    payload = json.dumps(body(user("SLOW"))).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S) as sock:
        sock.sendall(head + payload)
        received = b""
        while b"response.output_text.delta" not in received:
            chunk = sock.recv(65536)
            assert chunk, "server closed before the first delta"
            received += chunk
        assert server.active_streams == 1
    deadline = time.monotonic() + 2.0
    while server.active_streams and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.active_streams == 0


def test_close_is_idempotent_and_frees_the_port() -> None:
    fake = FakeResponsesServer()
    port = fake.port
    fake.close()
    fake.close()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
