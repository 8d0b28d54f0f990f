"""The JSON-RPC conversation with one ``codex app-server`` process.

Outgoing requests are built by jsonrpcclient (Codex tolerates its ``"jsonrpc"``
field) with our own id counter; replies are parsed back through it into
``Ok``/``Error``. The client does not read: the runtime's reader
(:meth:`CodexRuntime.run <adapters.codex.runtime.CodexRuntime.run>`) decodes
stdout a read at a time, and for a response takes the call it answers
(:meth:`CodexClient.answered`) and settles it (:meth:`CodexClient.settle`) once
the events the reply implies (the thread ref of ``thread/start``) are queued, so
they keep their place among the notifications around it: the waiter runs only
when the reader yields. When stdout ends the reader calls :meth:`CodexClient.closed`.

Outgoing raw frames go to the :class:`RawFrameSink` here; incoming ones in the
reader, whose raw event id travels with the frame's events.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import attrs
import jsonrpcclient
import msgspec
import trio

from adapters.codex.frames import Malformed, Response, decode_params
from adapters.errors import ProviderGone, ProviderProtocolError, ProviderTimeout
from adapters.protocol import RawFrameSink
from adapters.transport import ProviderProcess


@attrs.define
class Call:
    """One of our requests, waiting for its response."""

    id: int
    method: str
    params: dict[str, Any]
    done: trio.Event = attrs.field(factory=trio.Event)
    result: Any = None
    error: ProviderProtocolError | ProviderGone | None = None


class CodexClient:
    def __init__(
        self,
        process: ProviderProcess,
        raw: RawFrameSink,
        *,
        request_timeout_s: float = 30.0,
    ) -> None:
        self._process = process
        self._raw = raw
        self._timeout = request_timeout_s
        self._ids = itertools.count(1)
        #: Past the ids a replayed journal shows in use.
        self._next_id = 1
        self._pending: dict[int, Call] = {}
        self._send_lock = trio.Lock()
        self._gone: str | None = None

    @property
    def gone(self) -> bool:
        return self._gone is not None

    def replayed(self, offset: int, line: bytes) -> None:
        """A request an earlier daemon sent this process (its holder's journal): its
        answer is still to pair with it, and our ids go on after it."""
        try:
            frame = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("id"), int):
            return
        call_id: int = frame["id"]
        method = frame.get("method")
        if isinstance(method, str):
            params = frame.get("params")
            self._pending[call_id] = Call(
                call_id, method, params if isinstance(params, dict) else {}
            )
            if call_id >= self._next_id:
                self._next_id = call_id + 1
                self._ids = itertools.count(self._next_id)

    def answered(self, frame: Response) -> Call | None:
        """The pending request ``frame`` answers (no longer pending), if any."""
        return self._pending.pop(frame.id, None) if isinstance(frame.id, int) else None

    def settle(self, call: Call, frame: Response) -> None:
        """Hand ``frame`` to the waiter of ``call``; it runs once the reader yields."""
        body: dict[str, Any] = {"id": call.id}
        if frame.error is not None:
            body["error"] = {
                "code": frame.error.code,
                "message": frame.error.message,
                "data": frame.error.data,
            }
        else:
            body["result"] = decode_params(frame.result) if frame.result is not None else None
        parsed = jsonrpcclient.parse(body)
        if isinstance(parsed, jsonrpcclient.Ok):
            call.result = parsed.result
        else:
            assert isinstance(parsed, jsonrpcclient.Error)
            call.error = ProviderProtocolError(call.method, parsed.code, parsed.message)
        call.done.set()

    def closed(self) -> None:
        """Stdout has ended: every waiting request, and every later one, fails with ProviderGone."""
        self._fail_pending("the codex process closed its stdout")

    def _fail_pending(self, why: str) -> None:
        self._gone = why
        for call in self._pending.values():
            call.error = ProviderGone(f"codex: {call.method}: {why}")
            call.done.set()
        self._pending.clear()

    async def send(self, frame: dict[str, Any]) -> str:
        """Write one frame; returns its raw event id. ProviderGone if the pipe is closed."""
        line = msgspec.json.encode(frame)
        raw_id = self._raw.record("outgoing", line)
        async with self._send_lock:
            try:
                await self._process.send_line(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ProviderGone(f"codex: cannot write to the process: {exc!r}") from exc
        return raw_id

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, limit_s: float | None = None
    ) -> Any:
        """Send a request and return its result; raises the adapters' error types."""
        if self._gone is not None:
            raise ProviderGone(f"codex: {method}: {self._gone}")
        call = Call(id=next(self._ids), method=method, params=params or {})
        frame = jsonrpcclient.request(method, params, id=call.id)
        self._pending[call.id] = call
        try:
            await self.send(frame)
            limit = self._timeout if limit_s is None else limit_s
            with trio.move_on_after(limit if limit > 0 else math.inf):
                await call.done.wait()
        finally:
            self._pending.pop(call.id, None)
        if not call.done.is_set():
            raise ProviderTimeout(f"codex: {method}: no answer within {limit} s")
        if call.error is not None:
            raise call.error
        return call.result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self.send(jsonrpcclient.notification(method, params))

    async def reply(self, request_id: int | str, result: Any) -> str:
        return await self.send({"id": request_id, "result": result})

    async def reply_error(self, request_id: int | str, code: int, message: str) -> str:
        return await self.send({"id": request_id, "error": {"code": code, "message": message}})


__all__ = ["Call", "CodexClient", "Malformed"]
