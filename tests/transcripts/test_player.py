"""The transcript player: shape matching, id remapping, strict and lenient modes."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import pytest
import trio

from adapters.transcript import Transcript, parse_transcript
from adapters.transcript_player import TranscriptMismatch, TranscriptPlayer, frame_key
from adapters.transport import ExitStatus


def transcript(provider: str, *steps: dict[str, Any], synthetic: bool = False) -> Transcript:
    header = {"step": "transcript_start", "provider": provider, "synthetic": synthetic}
    return parse_transcript([json.dumps(header), *(json.dumps(s) for s in steps)])


def expect(frame: dict[str, Any]) -> dict[str, Any]:
    return {"step": "expect_outbound", "frame": frame}


def emit(frame: dict[str, Any], after_ms: float = 0) -> dict[str, Any]:
    return {"step": "emit_inbound", "afterMs": after_ms, "frame": frame}


class ListSink:
    def __init__(self) -> None:
        self.stdout: list[Any] = []
        self.stderr: list[str] = []

    async def stdout_line(self, line: bytes) -> None:
        try:
            self.stdout.append(json.loads(line))
        except ValueError:
            self.stdout.append(line)
        await trio.lowlevel.checkpoint()

    async def stderr_text(self, text: str) -> None:
        self.stderr.append(text)
        await trio.lowlevel.checkpoint()


async def play(
    player: TranscriptPlayer, *client: dict[str, Any] | bytes, close: bool = True
) -> tuple[ExitStatus, ListSink]:
    """Feed ``client`` frames up front (then close stdin) and play to the end."""
    send, receive = trio.open_memory_channel[bytes](math.inf)
    for frame in client:
        send.send_nowait(frame if isinstance(frame, bytes) else json.dumps(frame).encode())
    if close:
        send.close()
    sink = ListSink()
    with trio.fail_after(5):
        status = await player.play(receive, sink)
    return status, sink


CODEX = transcript(
    "codex",
    expect({"id": 0, "method": "initialize", "params": {"clientInfo": {"name": "rec"}}}),
    emit({"id": 0, "result": {"userAgent": "codex"}}),
    expect({"method": "initialized"}),
    expect({"id": 1, "method": "turn/start", "params": {"threadId": "t"}}),
    emit({"id": 1, "result": {"turn": {"id": "turn-1"}}}),
    # The provider's own request: id 0 in *its* id space, which must not be
    # confused with the client's recorded id 0.
    emit({"id": 0, "method": "item/commandExecution/requestApproval", "params": {}}),
    expect({"id": 0, "result": {"decision": "accept"}}),
    emit({"method": "turn/completed", "params": {"turn": {"status": "completed"}}}),
    {"step": "runtime_exit", "afterMs": 5, "code": 0},
)


def test_frame_keys_route_by_shape() -> None:
    assert frame_key({"id": 3, "method": "turn/start"}) == ("method", "turn/start")
    assert frame_key({"method": "initialized"}) == ("method", "initialized")
    assert frame_key({"id": 0, "result": {}}) == ("response", ("int", 0))
    assert frame_key({"id": "0", "error": {}}) == ("response", ("str", "0"))
    request = {"type": "control_request", "request_id": "r", "request": {"subtype": "interrupt"}}
    assert frame_key(request) == ("control_request", ("str", "interrupt"))
    response = {"type": "control_response", "response": {"request_id": "cli-1"}}
    assert frame_key(response) == ("control_response", ("str", "cli-1"))
    assert frame_key({"type": "user", "message": {}}) == ("type", "user")
    assert frame_key({"hello": 1}) is None
    assert frame_key([1]) is None


async def test_codex_client_ids_are_remapped_and_provider_requests_are_not() -> None:
    player = TranscriptPlayer(CODEX, strict=True, speed=0)
    status, sink = await play(
        player,
        {"id": 10, "method": "initialize", "params": {"clientInfo": {"name": "live"}}},
        {"method": "initialized"},
        {"id": 11, "method": "turn/start", "params": {"threadId": "t"}},
        {"id": 0, "result": {"decision": "decline"}},  # matched by the provider's id only
    )
    assert status == ExitStatus(code=0, signal=None)
    assert sink.stdout == [
        {"id": 10, "result": {"userAgent": "codex"}},
        {"id": 11, "result": {"turn": {"id": "turn-1"}}},
        {"id": 0, "method": "item/commandExecution/requestApproval", "params": {}},
        {"method": "turn/completed", "params": {"turn": {"status": "completed"}}},
    ]
    assert player.skipped == []


async def test_string_and_number_ids_are_not_confused() -> None:
    player = TranscriptPlayer(CODEX, speed=0)
    _, sink = await play(
        player,
        {"id": "init", "method": "initialize"},
        {"method": "initialized"},
        {"id": 1, "method": "turn/start"},
        {"id": "0", "result": {}},  # a string id is not the provider's request 0
    )
    # The recorded id 1 stays 1 (the live id was 1 too); "init" replaced 0.
    assert sink.stdout[0]["id"] == "init"
    assert sink.stdout[1]["id"] == 1
    assert player.skipped == [b'{"id": "0", "result": {}}']


CLAUDE = transcript(
    "claude",
    expect(
        {"type": "control_request", "request_id": "req_1_aa", "request": {"subtype": "initialize"}}
    ),
    emit(
        {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": "req_1_aa", "response": {}},
        }
    ),
    expect({"type": "user", "session_id": "", "message": {"role": "user", "content": "hi"}}),
    emit(
        {
            "type": "control_request",
            "request_id": "cli-uuid-1",
            "request": {"subtype": "can_use_tool", "tool_name": "Bash"},
        }
    ),
    expect(
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "cli-uuid-1",
                "response": {"behavior": "allow"},
            },
        }
    ),
    expect(
        {"type": "control_request", "request_id": "req_2_bb", "request": {"subtype": "interrupt"}}
    ),
    emit(
        {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": "req_2_bb", "response": {}},
        }
    ),
    emit({"type": "result", "subtype": "success", "is_error": False}),
)


async def test_claude_request_ids_are_remapped() -> None:
    player = TranscriptPlayer(CLAUDE, strict=True, speed=0)
    status, sink = await play(
        player,
        {"type": "control_request", "request_id": "req_7_ff", "request": {"subtype": "initialize"}},
        {"type": "user", "session_id": "", "message": {"role": "user", "content": "other words"}},
        {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": "cli-uuid-1", "response": {}},
        },
        {"type": "control_request", "request_id": "req_8_ee", "request": {"subtype": "interrupt"}},
    )
    assert status == ExitStatus(code=0, signal=None)  # no recorded exit: stdin closed
    assert [frame.get("response", {}).get("request_id") for frame in sink.stdout] == [
        "req_7_ff",
        None,
        "req_8_ee",
        None,
    ]
    # The CLI's own request keeps its id.
    assert sink.stdout[1]["request_id"] == "cli-uuid-1"


async def test_a_response_to_the_wrong_provider_request_is_a_strict_mismatch() -> None:
    player = TranscriptPlayer(CLAUDE, strict=True, speed=0)
    with pytest.raises(TranscriptMismatch) as info:
        await play(
            player,
            {"type": "control_request", "request_id": "x", "request": {"subtype": "initialize"}},
            {"type": "user", "message": {}},
            {"type": "control_response", "response": {"request_id": "someone-else"}},
        )
    message = str(info.value)
    assert "segment 0 step 4 (line 6)" in message
    assert "expected outbound control_response 'cli-uuid-1'" in message
    assert "got control_response 'someone-else'" in message


async def test_strict_mismatch_names_step_expected_and_actual() -> None:
    player = TranscriptPlayer(CODEX, strict=True, speed=0)
    with pytest.raises(TranscriptMismatch) as info:
        await play(player, {"id": 1, "method": "thread/start"})
    message = str(info.value)
    assert message.startswith("<transcript>: segment 0 step 0 (line 2): ")
    assert "expected outbound method 'initialize'" in message
    assert "got method 'thread/start'" in message


async def test_strict_mode_refuses_non_json_and_early_stdin_close() -> None:
    with pytest.raises(TranscriptMismatch, match="non-JSON line b'hello'"):
        await play(TranscriptPlayer(CODEX, strict=True, speed=0), b"hello")
    with pytest.raises(TranscriptMismatch, match=r"step 2 .*stdin closed while expecting"):
        await play(TranscriptPlayer(CODEX, strict=True, speed=0), {"id": 1, "method": "initialize"})


async def test_lenient_mode_logs_and_skips_unknown_frames(
    caplog: pytest.LogCaptureFixture,
) -> None:
    player = TranscriptPlayer(CODEX, speed=0)
    with caplog.at_level(logging.WARNING, logger="adapters.transcript_player"):
        status, sink = await play(
            player,
            {"id": 5, "method": "thread/list"},
            b"garbage",
            {"id": 6, "method": "initialize"},
            {"method": "initialized"},
        )
    assert player.skipped == [b'{"id": 5, "method": "thread/list"}', b"garbage"]
    assert "expected outbound method 'initialize'" in caplog.text
    assert "got method 'thread/list'" in caplog.text
    # Stdin closed while turn/start was expected: lenient mode skips to the exit.
    assert status == ExitStatus(code=0, signal=None)
    assert sink.stdout == [{"id": 6, "result": {"userAgent": "codex"}}]


async def test_consecutive_expectations_match_in_any_order() -> None:
    player = TranscriptPlayer(CODEX, strict=True, speed=0)
    _, sink = await play(
        player,
        {"id": 1, "method": "initialize"},
        {"id": 2, "method": "turn/start"},  # written before `initialized`
        {"method": "initialized"},
        {"id": 0, "result": {}},
    )
    assert sink.stdout[1] == {"id": 2, "result": {"turn": {"id": "turn-1"}}}


async def test_an_exit_on_stdin_close_waits_for_the_close() -> None:
    script = transcript(
        "codex",
        emit({"method": "ready"}),
        {"step": "runtime_exit", "afterMs": 40, "code": 3, "onStdinClose": True},
    )
    player = TranscriptPlayer(script, speed=1)
    send, receive = trio.open_memory_channel[bytes](1)
    sink = ListSink()
    result: list[ExitStatus] = []

    async def run() -> None:
        result.append(await player.play(receive, sink))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.sleep(0.2)
            assert sink.stdout == [{"method": "ready"}]
            assert not result, "the process must not exit before stdin closes"
            closed_at = trio.current_time()
            await send.aclose()
    assert result == [ExitStatus(code=3, signal=None)]
    assert trio.current_time() - closed_at >= 0.04


async def test_loop_turns_replays_the_turn_with_fresh_ids() -> None:
    script = transcript(
        "codex",
        expect({"id": 1, "method": "initialize"}),
        emit({"id": 1, "result": {}}),
        expect({"id": 2, "method": "turn/start"}),
        emit({"id": 2, "result": {"turn": {"id": "turn-{{turn}}"}}}),
        emit({"method": "turn/completed", "params": {"turn": {"id": "turn-{{turn}}"}}}),
        {"step": "runtime_exit", "code": 0},
        synthetic=True,
    )
    player = TranscriptPlayer(script, speed=0, strict=True, loop_turns=True)
    status, sink = await play(
        player,
        {"id": 1, "method": "initialize"},
        {"id": 2, "method": "turn/start"},
        {"id": 3, "method": "turn/start"},
        {"id": 4, "method": "turn/start"},
    )
    assert status == ExitStatus(code=0, signal=None)
    assert sink.stdout[1:] == [
        {"id": 2, "result": {"turn": {"id": "turn-1"}}},
        {"method": "turn/completed", "params": {"turn": {"id": "turn-1"}}},
        {"id": 3, "result": {"turn": {"id": "turn-2"}}},
        {"method": "turn/completed", "params": {"turn": {"id": "turn-2"}}},
        {"id": 4, "result": {"turn": {"id": "turn-3"}}},
        {"method": "turn/completed", "params": {"turn": {"id": "turn-3"}}},
    ]


def test_loop_turns_needs_a_turn_request() -> None:
    with pytest.raises(ValueError, match="no turn request"):
        TranscriptPlayer(transcript("codex", emit({"method": "x"})), loop_turns=True)


def test_speed_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="speed"):
        TranscriptPlayer(CODEX, speed=-1)


async def test_recorded_transcripts_keep_turn_tokens_verbatim() -> None:
    script = transcript("codex", emit({"method": "x", "params": {"text": "{{turn}}"}}))
    _, sink = await play(TranscriptPlayer(script, speed=0))
    assert sink.stdout == [{"method": "x", "params": {"text": "{{turn}}"}}]
