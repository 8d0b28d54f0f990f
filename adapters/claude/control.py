"""Both halves of the Claude control protocol over one CLI process.

*Ours*: ``control_request`` frames we send (``initialize``, ``interrupt``,
``set_permission_mode``, ``set_model``), each with our own ``req_<n>_<hex>`` id
and a pending slot the matching ``control_response`` fills; every wait is
bounded (:class:`~adapters.errors.ProviderTimeout`), an ``error`` response raises
:class:`~adapters.errors.ProviderProtocolError`, and the process going away fails
every waiter with :class:`~adapters.errors.ProviderGone`.

*Theirs*: ``control_request`` frames the CLI sends (``can_use_tool``,
``hook_callback``, ``mcp_message``). Each is answered exactly once: the slot is
claimed before the answer is written, so two racing answers cannot both go out,
and a request the CLI withdrew with ``control_cancel_request`` is dropped and
never answered (answering it would be a protocol error on the CLI's side). A
request whose fields do not decode is refused with an error response at once.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from adapters.claude.frames import ControlRequestBody, ControlResponseFrame
from adapters.errors import (
    AdapterError,
    ProviderGone,
    ProviderProtocolError,
    ProviderTimeout,
    StaleRequest,
)

Json = dict[str, Any]
SendFrame = Callable[[Json], Awaitable[None]]


@attrs.frozen
class HookCall:
    """A ``hook_callback`` from the CLI: the callback id we registered in ``initialize``."""

    request_id: str
    callback_id: str
    tool_use_id: str | None
    input: Mapping[str, Any]


@attrs.frozen
class McpCall:
    """An ``mcp_message`` for one of our in-process (``type: sdk``) MCP servers."""

    request_id: str
    server_name: str
    message: Mapping[str, Any]


#: Returns the hook output, e.g. ``{"continue": True}``.
HookHandler = Callable[[HookCall], Awaitable[Mapping[str, Any]]]
#: Returns the JSON-RPC reply, or ``None`` for a notification (acked empty).
McpHandler = Callable[[McpCall], Awaitable[Mapping[str, Any] | None]]


async def continue_hook(call: HookCall) -> Mapping[str, Any]:
    """The default hook handler: let the CLI carry on."""
    return {"continue": True}


async def no_mcp_server(call: McpCall) -> Mapping[str, Any] | None:
    """The default MCP handler: we host no in-process server, so every request fails."""
    if "id" not in call.message:
        return None
    return {
        "jsonrpc": "2.0",
        "id": call.message["id"],
        "error": {"code": -32601, "message": f"no in-process MCP server {call.server_name!r}"},
    }


def mcp_response(reply: Mapping[str, Any] | None) -> Json:
    """The control-response payload carrying an MCP reply (a notification gets an empty ack)."""
    return {"mcp_response": dict(reply) if reply is not None else {"jsonrpc": "2.0", "result": {}}}


def allow(updated_input: Any, updated_permissions: Any = None) -> Json:
    """A ``can_use_tool`` answer letting the tool run (with possibly edited input)."""
    answer: Json = {"behavior": "allow", "updatedInput": updated_input}
    if updated_permissions:
        answer["updatedPermissions"] = updated_permissions
    return answer


def deny(message: str, *, interrupt: bool = False) -> Json:
    """A ``can_use_tool`` answer refusing the tool; ``interrupt`` also stops the turn."""
    answer: Json = {"behavior": "deny", "message": message}
    if interrupt:
        answer["interrupt"] = True
    return answer


class _Pending:
    """One of our requests waiting for its response."""

    def __init__(self, subtype: str) -> None:
        self.subtype = subtype
        self.done = trio.Event()
        self.response: Json | None = None
        self.error: AdapterError | None = None


@attrs.define
class IncomingRequest:
    """A request from the CLI we have not answered yet."""

    request_id: str
    body: ControlRequestBody


class ControlChannel:
    """Request/response bookkeeping for one process; frames go out through ``send``."""

    def __init__(self, send: SendFrame, *, timeout_s: float) -> None:
        self._send = send
        self._timeout_s = timeout_s
        self._numbers = itertools.count(1)
        self._pending: dict[str, _Pending] = {}
        self._incoming: dict[str, IncomingRequest] = {}
        self._gone: AdapterError | None = None

    # -- our requests ----------------------------------------------------------

    def next_request_id(self) -> str:
        # The CLI treats ids as opaque strings; the hex part keeps ids of two
        # processes of one thread from looking alike in the raw log.
        return f"req_{next(self._numbers)}_{secrets.token_hex(4)}"

    async def request(
        self,
        subtype: str,
        payload: Mapping[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Json:
        """Send a control request and wait for its response payload."""
        if self._gone is not None:
            raise self._gone
        request_id = self.next_request_id()
        pending = _Pending(subtype)
        self._pending[request_id] = pending
        frame = {
            "type": "control_request",
            "request_id": request_id,
            "request": {"subtype": subtype, **(payload or {})},
        }
        try:
            try:
                await self._send(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ProviderGone(f"claude: process gone before {subtype!r} was sent") from exc
            with trio.move_on_after(self._timeout_s if timeout_s is None else timeout_s):
                await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        if pending.response is None:
            raise ProviderTimeout(f"claude: no response to control request {subtype!r}")
        return pending.response

    def on_response(self, frame: ControlResponseFrame) -> bool:
        """Complete the matching request; False if none waits (late or foreign)."""
        body = frame.response
        pending = self._pending.pop(body.request_id, None)
        if pending is None:
            return False
        if body.subtype == "success":
            pending.response = dict(body.response or {})
        else:
            pending.error = ProviderProtocolError(
                pending.subtype, body.subtype, body.error or "error response"
            )
        pending.done.set()
        return True

    def replayed_request(self, request_id: str, subtype: str) -> None:
        """A request an earlier daemon sent this process (a reattach replays its journal):
        its response, when it comes, is taken here, with nobody waiting on it."""
        self._pending[request_id] = _Pending(subtype)

    def fail_all(self, error: AdapterError) -> None:
        """The process is gone: every waiter and every later request fails with ``error``."""
        self._gone = error
        for pending in self._pending.values():
            pending.error = error
            pending.done.set()
        self._pending.clear()
        self._incoming.clear()

    # -- their requests --------------------------------------------------------

    def open_incoming(self, request_id: str, body: ControlRequestBody) -> IncomingRequest:
        request = IncomingRequest(request_id, body)
        self._incoming[request_id] = request
        return request

    def incoming(self, request_id: str) -> IncomingRequest | None:
        return self._incoming.get(request_id)

    def pending_incoming(self) -> list[IncomingRequest]:
        return list(self._incoming.values())

    def cancel_incoming(self, request_id: str) -> IncomingRequest | None:
        """The CLI withdrew the request: forget it, so it is never answered."""
        return self._incoming.pop(request_id, None)

    def replayed_answer(self, request_id: str) -> IncomingRequest | None:
        """An earlier daemon answered the request (a reattach replays its journal): it
        waits no more, and is never answered again."""
        return self._incoming.pop(request_id, None)

    async def answer(self, request_id: str, payload: Mapping[str, Any]) -> IncomingRequest:
        """Answer a CLI request with success, exactly once; StaleRequest otherwise."""
        return await self._reply(request_id, {"subtype": "success", "response": dict(payload)})

    async def answer_error(self, request_id: str, message: str) -> IncomingRequest:
        return await self._reply(request_id, {"subtype": "error", "error": message})

    async def refuse(self, request_id: str | int, message: str) -> None:
        """An error response to a request that could not be opened (it did not decode)."""
        frame = {
            "type": "control_response",
            "response": {"subtype": "error", "error": message, "request_id": request_id},
        }
        try:
            await self._send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ProviderGone(f"claude: process gone while refusing {request_id}") from exc

    async def _reply(self, request_id: str, response: Json) -> IncomingRequest:
        # Claim first: after this no other task can answer the same request.
        request = self._incoming.pop(request_id, None)
        if request is None:
            raise StaleRequest(
                f"claude: request {request_id} is not waiting (answered, cancelled or unknown)"
            )
        frame = {
            "type": "control_response",
            "response": {**response, "request_id": request_id},
        }
        try:
            await self._send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ProviderGone(f"claude: process gone while answering {request_id}") from exc
        return request
