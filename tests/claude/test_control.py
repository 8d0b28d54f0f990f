"""The control-protocol bookkeeping on its own: ids, responses, timeouts, exactly-once answers."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from adapters.claude.control import ControlChannel
from adapters.claude.frames import ControlRequestBody, ControlResponseBody, ControlResponseFrame
from adapters.errors import ProviderGone, ProviderProtocolError, ProviderTimeout, StaleRequest


class Wire:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.sent = trio.Event()

    async def send(self, frame: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        self.frames.append(frame)
        self.sent.set()
        self.sent = trio.Event()

    async def frame(self, index: int) -> dict[str, Any]:
        with trio.fail_after(5):
            while len(self.frames) <= index:
                await self.sent.wait()
        return self.frames[index]


def response(request_id: str, subtype: str = "success", **body: Any) -> ControlResponseFrame:
    return ControlResponseFrame(
        response=ControlResponseBody(subtype=subtype, request_id=request_id, **body)
    )


async def test_request_ids_are_ours_and_increase() -> None:
    channel = ControlChannel(Wire().send, timeout_s=1)
    first, second = channel.next_request_id(), channel.next_request_id()
    assert first.startswith("req_1_") and second.startswith("req_2_")


async def test_response_completes_the_request() -> None:
    wire = Wire()
    channel = ControlChannel(wire.send, timeout_s=5)
    got: list[dict[str, Any]] = []

    async def ask() -> None:
        got.append(await channel.request("set_model", {"model": "m"}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        frame = await wire.frame(0)
        assert frame["request"] == {"subtype": "set_model", "model": "m"}
        assert channel.on_response(response(frame["request_id"], response={"ok": 1}))
    assert got == [{"ok": 1}]
    assert not channel.on_response(response(frame["request_id"]))  # late duplicate


async def test_error_response_raises_protocol_error() -> None:
    wire = Wire()
    channel = ControlChannel(wire.send, timeout_s=5)

    async def refuse() -> None:
        frame = await wire.frame(0)
        channel.on_response(response(frame["request_id"], "error", error="nope"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(refuse)
        with pytest.raises(ProviderProtocolError, match="nope"):
            await channel.request("mcp_status")


async def test_no_response_is_a_timeout() -> None:
    channel = ControlChannel(Wire().send, timeout_s=0.05)
    with pytest.raises(ProviderTimeout):
        await channel.request("interrupt")


async def test_process_gone_fails_waiters_and_later_requests() -> None:
    wire = Wire()
    channel = ControlChannel(wire.send, timeout_s=5)

    async def die() -> None:
        await wire.frame(0)
        channel.fail_all(ProviderGone("exited"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(die)
        with pytest.raises(ProviderGone):
            await channel.request("interrupt")
    with pytest.raises(ProviderGone):
        await channel.request("interrupt")


async def test_incoming_requests_are_answered_once_and_never_after_cancel() -> None:
    wire = Wire()
    channel = ControlChannel(wire.send, timeout_s=5)
    body = ControlRequestBody(subtype="can_use_tool", tool_name="Bash")
    channel.open_incoming("a", body)
    channel.open_incoming("b", body)
    await channel.answer("a", {"behavior": "allow", "updatedInput": {}})
    assert wire.frames[-1] == {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "response": {"behavior": "allow", "updatedInput": {}},
            "request_id": "a",
        },
    }
    with pytest.raises(StaleRequest):
        await channel.answer("a", {})
    assert channel.cancel_incoming("b") is not None
    with pytest.raises(StaleRequest):
        await channel.answer_error("b", "late")
    assert len(wire.frames) == 1
