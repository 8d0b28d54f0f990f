"""Decoding the CLI's stdout lines: known frames typed, everything else a Diagnostic."""

from __future__ import annotations

import json

import pytest

from adapters.claude.frames import (
    AssistantFrame,
    ControlCancelFrame,
    ControlRequestFrame,
    ControlResponseFrame,
    RateLimitFrame,
    ResultFrame,
    StreamEventFrame,
    SystemFrame,
    UserFrame,
    decode_line,
)
from adapters.line_reader import oversized
from t3orch.provider_events import Diagnostic


def line(frame: dict[str, object]) -> bytes:
    return json.dumps(frame).encode()


def test_system_init_keeps_session_model_and_version() -> None:
    frame = decode_line(
        line(
            {
                "type": "system",
                "subtype": "init",
                "session_id": "s1",
                "model": "claude-sonnet-4-5",
                "claude_code_version": "2.1.327",
                "permissionMode": "default",
                "tools": ["Bash", "Read"],
                "slash_commands": ["compact"],  # unknown keys are ignored
            }
        )
    )
    assert isinstance(frame, SystemFrame)
    assert (frame.subtype, frame.session_id, frame.model) == ("init", "s1", "claude-sonnet-4-5")
    assert frame.claude_code_version == "2.1.327"
    assert frame.permission_mode == "default"
    assert frame.tools == ["Bash", "Read"]


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        ({"type": "system", "subtype": "status", "status": "requesting"}, SystemFrame),
        (
            {
                "type": "stream_event",
                "event": {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "hi"},
                },
            },
            StreamEventFrame,
        ),
        (
            {
                "type": "assistant",
                "message": {"id": "m", "content": [{"type": "text", "text": "x"}]},
            },
            AssistantFrame,
        ),
        (
            {
                "type": "user",
                "message": {"role": "user", "content": "[Request interrupted by user]"},
            },
            UserFrame,
        ),
        (
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "terminal_reason": "api_error",
            },
            ResultFrame,
        ),
        (
            {
                "type": "control_request",
                "request_id": "u1",
                "request": {"subtype": "can_use_tool", "tool_name": "Bash"},
            },
            ControlRequestFrame,
        ),
        (
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": "req_1_ab", "response": {}},
            },
            ControlResponseFrame,
        ),
        ({"type": "control_cancel_request", "request_id": "u1"}, ControlCancelFrame),
        ({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}}, RateLimitFrame),
    ],
)
def test_known_frames_decode_to_their_struct(frame: dict[str, object], kind: type) -> None:
    assert isinstance(decode_line(line(frame)), kind)


def test_user_frame_with_tool_result_blocks() -> None:
    frame = decode_line(
        line(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": "hi",
                            "is_error": False,
                        }
                    ],
                },
                "tool_use_result": {"stdout": "hi", "stderr": "", "interrupted": False},
            }
        )
    )
    assert isinstance(frame, UserFrame)
    assert not isinstance(frame.message.content, str)
    assert frame.message.content[0].tool_use_id == "t1"
    assert frame.tool_use_result == {"stdout": "hi", "stderr": "", "interrupted": False}


def test_blank_line_is_nothing() -> None:
    assert decode_line(b"") is None
    assert decode_line(b"   ") is None


def test_line_not_starting_with_brace_is_an_info_diagnostic() -> None:
    diag = decode_line(b"[debug] starting up")
    assert isinstance(diag, Diagnostic)
    assert (diag.level, diag.code) == ("info", "claude.non_json_line")
    assert diag.detail["head"] == "[debug] starting up"


def test_malformed_json_is_an_error_diagnostic() -> None:
    diag = decode_line(b'{"type": "assistant", "message": {')
    assert isinstance(diag, Diagnostic)
    assert (diag.level, diag.code) == ("error", "claude.malformed_line")


def test_oversized_line_is_an_error_diagnostic_with_its_length() -> None:
    diag = decode_line(oversized(b'{"type":"assistant"' + b"x" * 10_000))
    assert isinstance(diag, Diagnostic)
    assert diag.code == "claude.oversized_line"
    assert diag.detail["length"] == 10_019
    assert len(diag.detail["head"]) <= 300


def test_unknown_type_is_a_warning_not_a_crash() -> None:
    diag = decode_line(line({"type": "brand_new_frame", "x": 1}))
    assert isinstance(diag, Diagnostic)
    assert (diag.level, diag.code) == ("warning", "claude.unknown_frame")
    assert diag.detail["type"] == "brand_new_frame"


def test_known_type_with_wrong_shape_is_an_invalid_frame() -> None:
    diag = decode_line(line({"type": "control_cancel_request"}))  # no request_id
    assert isinstance(diag, Diagnostic)
    assert (diag.level, diag.code) == ("error", "claude.invalid_frame")


def test_frame_without_type_is_invalid() -> None:
    diag = decode_line(line({"hello": "world"}))
    assert isinstance(diag, Diagnostic)
    assert diag.code == "claude.invalid_frame"


def test_json_that_is_not_an_object_but_starts_with_brace_never_raises() -> None:
    for raw in (b"{", b"{}}", b'{"type": 3}', b"{\xff\xfe}"):
        assert isinstance(decode_line(raw), Diagnostic)
