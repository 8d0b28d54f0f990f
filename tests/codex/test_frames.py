"""Decoding one stdout line: routing by shape, tolerance, bad lines."""

from __future__ import annotations

import msgspec
import pytest

from adapters.codex.frames import (
    Delta,
    ItemFrame,
    Malformed,
    Notification,
    Response,
    ServerRequest,
    decode_frame,
    decode_params,
)
from adapters.transport import OversizedLine


def test_method_and_id_is_a_request_to_us() -> None:
    frame = decode_frame(b'{"id":0,"method":"item/tool/call","params":{"a":1}}')
    assert isinstance(frame, ServerRequest)
    assert (frame.id, frame.method, decode_params(frame.params)) == (0, "item/tool/call", {"a": 1})


def test_string_request_ids_are_kept() -> None:
    frame = decode_frame(b'{"id":"r-1","method":"m"}')
    assert isinstance(frame, ServerRequest) and frame.id == "r-1"
    assert decode_params(frame.params) is None  # absent params read as null


def test_id_and_result_is_a_response() -> None:
    frame = decode_frame(b'{"id":3,"result":{"turn":{"id":"t"}}}')
    assert isinstance(frame, Response) and frame.id == 3 and frame.error is None
    assert frame.result is not None
    assert decode_params(frame.result) == {"turn": {"id": "t"}}


def test_null_result_is_still_a_response() -> None:
    frame = decode_frame(b'{"id":3,"result":null}')
    assert isinstance(frame, Response) and frame.error is None


def test_error_response() -> None:
    frame = decode_frame(
        b'{"id":2,"error":{"code":-32600,"message":"thread x already has an active writer"}}'
    )
    assert isinstance(frame, Response) and frame.result is None
    assert frame.error is not None and frame.error.code == -32600


def test_notification_tolerates_emitted_at_and_unknown_fields() -> None:
    line = (
        b'{"method":"turn/started","params":{"turn":{}},"emittedAtMs":1796053559019,'
        b'"trace":{"x":1},"jsonrpc":"2.0"}'
    )
    frame = decode_frame(line)
    assert isinstance(frame, Notification) and frame.method == "turn/started"


def test_unknown_method_decodes_as_a_notification() -> None:
    frame = decode_frame(b'{"method":"brand/new/thing","params":{}}')
    assert isinstance(frame, Notification) and frame.method == "brand/new/thing"


def test_malformed_lines_never_raise() -> None:
    for line in (
        b"not json {{{",
        b'{"method":"x","par',
        b"[1,2]",
        b'"str"',
        b"{}",
        b'{"id":1}',
        b"",
    ):
        frame = decode_frame(line)
        assert isinstance(frame, Malformed), line
        assert frame.code == "malformed_frame"


def test_request_with_null_id_is_malformed() -> None:
    assert isinstance(decode_frame(b'{"id":null,"method":"m"}'), Malformed)


def test_oversized_line_is_reported_with_its_head() -> None:
    frame = decode_frame(
        OversizedLine(length=10_000_000, head=b'{"method":"item/agentMessage/delta"')
    )
    assert isinstance(frame, Malformed)
    assert frame.code == "oversized_frame" and frame.length == 10_000_000
    assert frame.head.startswith('{"method"')


def test_bad_utf8_is_malformed_not_a_crash() -> None:
    frame = decode_frame(b'{"method":"\xff\xfe"}')
    assert isinstance(frame, Malformed | Notification)
    assert msgspec.json.encode(frame)  # whatever it is, it stays encodable


def test_hot_deltas_take_the_one_pass_path() -> None:
    line = (
        b'{"method":"item/agentMessage/delta",'
        b'"params":{"threadId":"t","turnId":"u","itemId":"m","delta":"hi"},"emittedAtMs":1}'
    )
    frame = decode_frame(line)
    assert isinstance(frame, Delta)
    assert (frame.method, frame.params.item_id, frame.params.delta) == (
        "item/agentMessage/delta",
        "m",
        "hi",
    )


def test_unusual_deltas_fall_back_to_the_general_path() -> None:
    spaced = b'{"method": "item/agentMessage/delta", "params": {"itemId": "m", "delta": "hi"}}'
    wrong = b'{"method":"item/agentMessage/delta","params":{"itemId":"m","delta":5}}'
    other = b'{"method":"item/updated","params":{"item":{}}}'
    not_an_object = b'{"method":"item/started","params":[1]}'
    for line in (spaced, wrong, other, not_an_object):
        assert isinstance(decode_frame(line), Notification), line


@pytest.mark.parametrize("method", ["item/started", "item/completed"])
def test_item_frames_are_decoded_in_one_pass(method: str) -> None:
    line = (
        b'{"method":"' + method.encode() + b'","params":{"threadId":"t","turnId":"u",'
        b'"item":{"type":"agentMessage","id":"m","text":"a\\nb"}},"emittedAtMs":1}'
    )
    frame = decode_frame(line)
    assert isinstance(frame, ItemFrame)
    assert frame.method == method
    assert frame.params == {
        "threadId": "t",
        "turnId": "u",
        "item": {"type": "agentMessage", "id": "m", "text": "a\nb"},
    }
