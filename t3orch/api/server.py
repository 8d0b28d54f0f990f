"""The API server: one :class:`Connection` per client, on either transport.

Per connection: requests are read and answered in order by one task; every
outgoing frame (responses and stream frames alike) goes through one bounded
queue drained by one writer task, so frames never interleave and a client that
stops reading stalls only itself: its queue fills, its streams block, their
broadcast buffers overflow and they end with ``resync``. Memory stays bounded.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from typing import Any

import attrs
import trio
import trio_websocket

from t3orch.api import methods
from t3orch.api.auth import bearer_matches
from t3orch.api.operations import Operations
from t3orch.api.protocol import (
    COMMAND_REJECTED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    UNAUTHORIZED,
    RpcError,
    decode_request,
    error_frame,
    result_frame,
    salvage_id,
)
from t3orch.api.reads import ApiReader
from t3orch.api.streamed import StreamedItems
from t3orch.api.streaming import StreamPlan, pump
from t3orch.api.topics import TopicFilter
from t3orch.api.transport import (
    Admission,
    ConnectionGone,
    FrameChannel,
    FrameTooLarge,
    LineChannel,
    Ticket,
    WebSocketChannel,
)
from t3orch.core import Core
from t3orch.live import LiveSubscription
from t3orch.store.broadcast import Subscription
from t3orch.store.errors import CommandRejected, StoreError
from t3orch.web.session import WebAuth

log = logging.getLogger(__name__)

#: A write loop joins queued frames into one socket write up to about this size.
WRITE_BATCH_BYTES = 256 * 1024
#: Queued when a direct write left a rest in the channel: the write loop sends it.
_FLUSH = b""


@attrs.frozen
class ApiLimits:
    max_frame_bytes: int = 1024 * 1024
    #: Events a subscription may have waiting before it is ended with ``resync``.
    subscription_buffer: int = 4096
    #: Outgoing frames a connection may have waiting for its socket.
    send_queue: int = 64


class ApiServer:
    def __init__(
        self,
        core: Core,
        ops: Operations,
        token: str,
        reader: ApiReader,
        limits: ApiLimits,
        admission: Admission,
    ) -> None:
        self.core = core
        self.admission = admission
        self.ops = ops
        self.reader = reader
        self.limits = limits
        self._token = token
        #: The browser's way in: login codes, the session cookie, the Origin check.
        self.web = WebAuth(token)
        self.connections: set[Connection] = set()
        #: Filled in by the runner once the listeners are bound.
        self.endpoints: dict[str, Any] = {}
        #: Follows committed events so live streams can leave out text clients hold.
        self.streamed = StreamedItems()
        core.broadcast.listen(self.streamed.observe)

    def close(self) -> None:
        self.core.broadcast.unlisten(self.streamed.observe)

    def status(self) -> dict[str, Any]:
        return {
            **self.endpoints,
            "connections": len(self.connections),
            "subscriptions": sum(len(c.subscriptions) for c in self.connections),
            **self.admission.status(),
        }

    async def handle_websocket(
        self, request: trio_websocket.WebSocketRequest, ticket: Ticket
    ) -> None:
        # The connection is accepted either way so that an unauthenticated client
        # gets JSON-RPC errors (naming the fix) rather than a bare HTTP refusal;
        # until its ticket's deadline only, then it is closed (1008). A handshake
        # from a page of another origin is refused outright: the browser would send
        # the session cookie with it (SameSite does not tell ports apart).
        headers = _with_host(request)
        if not self.web.origin_ok(headers):
            with contextlib.suppress(trio_websocket.ConnectionClosed):
                await request.reject(403, body=b"cross-origin WebSocket refused\n")
            return
        authorized = bearer_matches(request.headers, self._token) or (
            self.web.browser_ok(headers) and self.web.cookie_valid(headers)
        )
        try:
            ws = await request.accept()
        except trio_websocket.ConnectionClosed:
            return
        channel = WebSocketChannel(ws, self.limits.max_frame_bytes)
        conn = Connection(self, channel, authorized)
        if authorized:
            ticket.authenticate()
            await self._serve(conn)
            return
        channel.close_code = 1008
        channel.close_reason = (
            f"unauthorized: no valid token within {ticket.admission.auth_timeout_s:g} s"
        )
        with trio.move_on_at(ticket.deadline):
            await self._serve(conn)

    async def handle_unix(self, stream: trio.SocketStream) -> None:
        # The socket file is 0600 in a 0700 directory: reaching it is the auth.
        await self._serve(Connection(self, LineChannel(stream, self.limits.max_frame_bytes), True))

    async def _serve(self, conn: Connection) -> None:
        try:
            await conn.run()
        except Exception:
            # One connection's failure must never take the listener (or the daemon) down.
            log.exception("API connection failed")


def _with_host(request: trio_websocket.WebSocketRequest) -> list[tuple[bytes, bytes]]:
    """The handshake's headers with its ``Host``, which wsproto keeps apart (and which
    trio-websocket does not expose): without it a browser's Origin cannot match."""
    host = getattr(getattr(request, "_event", None), "host", None)
    extra = [(b"host", host.encode("latin-1"))] if isinstance(host, str) else []
    return [*extra, *request.headers]


class Connection:
    def __init__(self, server: ApiServer, channel: FrameChannel, authorized: bool) -> None:
        self.server = server
        self.core = server.core
        self.ops = server.ops
        self.reader = server.reader
        self.channel = channel
        self.authorized = authorized
        self.subscriptions: dict[str, trio.CancelScope] = {}
        self._ids = itertools.count(1)
        self._out_send, self._out_recv = trio.open_memory_channel[bytes](server.limits.send_queue)
        #: Frames queued and not yet written (a write in progress counts).
        self._unsent = 0
        self._starting: list[StreamPlan] = []
        self._nursery: trio.Nursery | None = None

    async def run(self) -> None:
        self.server.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop, nursery.cancel_scope)
                try:
                    await self._read_loop()
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self.server.connections.discard(self)
            for plan in self._starting:
                plan.close()
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                with contextlib.suppress(ConnectionGone, trio.BrokenResourceError):
                    await self.channel.aclose()

    async def _queue(self, frame: bytes) -> None:
        """Queues a frame, waiting only while the connection's queue is full: a stream
        then gets a whole batch of events through in one task step instead of
        passing through the scheduler (behind every other subscriber) once per frame."""
        self._unsent += 1
        try:
            self._out_send.send_nowait(frame)
        except trio.WouldBlock:
            try:
                await self._out_send.send(frame)
            except BaseException:
                self._unsent -= 1
                raise

    def _write_now(self, frames: list[bytes]) -> None:
        if not self.channel.write_now(frames):
            # The socket took part of it; the rest waits in the channel, ahead of
            # every other write, until the write loop sends it.
            self._unsent += 1
            self._out_send.send_nowait(_FLUSH)

    async def _write_loop(self, scope: trio.CancelScope) -> None:
        try:
            async for frame in self._out_recv:
                # Whatever else is queued goes in the same write: one system call and
                # one task step for a commit's events instead of one per frame.
                frames = [frame]
                size = len(frame)
                while size < WRITE_BATCH_BYTES:
                    try:
                        frame = self._out_recv.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    frames.append(frame)
                    size += len(frame)
                await self.channel.send_many(frames)
                self._unsent -= len(frames)
        except ConnectionGone:
            scope.cancel()

    async def _read_loop(self) -> None:
        while True:
            try:
                frame = await self.channel.receive()
            except ConnectionGone:
                return
            except FrameTooLarge as exc:
                # That connection only: say why when the transport still can, then close.
                with trio.move_on_after(1), contextlib.suppress(ConnectionGone):
                    await self.channel.send(
                        error_frame(None, RpcError(INVALID_REQUEST, f"{exc}; closing"))
                    )
                return
            reply = await self._handle(frame)
            if reply is not None:
                await self._queue(reply)
            # Streams start after their subscribe response is queued: it goes out first.
            starting, self._starting = self._starting, []
            for plan in starting:
                assert self._nursery is not None
                self._nursery.start_soon(self._stream, plan, self.subscriptions[plan.subscription])

    async def _handle(self, frame: bytes | str) -> bytes | None:
        try:
            req = decode_request(frame)
        except RpcError as err:
            return error_frame(salvage_id(frame), err)
        rid = req.reply_id
        try:
            if not self.authorized:
                raise RpcError(
                    UNAUTHORIZED,
                    "unauthorized: send 'Authorization: Bearer <token>' (the token is in "
                    "<state-dir>/api-token) with the WebSocket handshake, or log the "
                    "browser in with the URL `t3orch web` prints",
                )
            result = await methods.call(self, req.method, req.params)
        except RpcError as err:
            reply = error_frame(rid, err)
        except CommandRejected as exc:
            data = {"code": exc.code, "message": exc.message}
            reply = error_frame(rid, RpcError(COMMAND_REJECTED, str(exc), data))
        except StoreError as exc:
            name = type(exc).__name__
            data = {"code": "store_error", "type": name, "message": str(exc)}
            reply = error_frame(rid, RpcError(INTERNAL_ERROR, f"{name}: {exc}", data))
        except Exception as exc:
            # A bug in one method must not take the connection (or the daemon) down.
            log.exception("API method %s failed", req.method)
            name = type(exc).__name__
            data = {"code": "internal_error", "type": name}
            reply = error_frame(rid, RpcError(INTERNAL_ERROR, f"internal error: {name}", data))
        else:
            reply = result_frame(rid, result)
        return None if req.is_notification else reply

    # -- subscriptions (called by methods.subscribe / unsubscribe) ------------------

    def start_stream(
        self,
        flt: TopicFilter,
        live: Subscription,
        cursor: int,
        snapshot: Any,
        text: LiveSubscription | None = None,
    ) -> str:
        sub_id = f"s{next(self._ids)}"
        self.subscriptions[sub_id] = trio.CancelScope()
        self._starting.append(StreamPlan(sub_id, flt, live, cursor, snapshot, text))
        return sub_id

    def stop_stream(self, sub_id: str) -> bool:
        scope = self.subscriptions.pop(sub_id, None)
        if scope is None:
            return False
        scope.cancel()
        for plan in [p for p in self._starting if p.subscription == sub_id]:
            self._starting.remove(plan)
            plan.close()
        return True

    async def _stream(self, plan: StreamPlan, scope: trio.CancelScope) -> None:
        with scope:
            direct = _DirectSend(self, scope)
            await pump(plan, self.reader, self._queue, self.server.streamed, direct)
        if self.subscriptions.get(plan.subscription) is scope:
            del self.subscriptions[plan.subscription]


@attrs.define
class _DirectSend:
    """A stream's frames written from the publishing task, while the connection is idle."""

    conn: Connection
    scope: trio.CancelScope

    def ready(self) -> bool:
        conn = self.conn
        return not self.scope.cancel_called and conn._unsent == 0 and conn.channel.idle()

    def backlog(self) -> int:
        return self.conn._unsent

    def write(self, frames: list[bytes]) -> None:
        self.conn._write_now(frames)
