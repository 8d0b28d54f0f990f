"""The two transports under one frame interface: WebSocket messages and JSON lines.

A :class:`FrameChannel` yields whole incoming frames and sends whole outgoing
ones. Incoming frames are bounded (``max_frame_bytes``): an oversized one ends
that connection only (:class:`FrameTooLarge`), never the server, and is never
buffered whole. Outgoing frames are not bounded here: they are ours (snapshots
can legitimately be large).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import resource
import socket
import stat
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

import attrs
import trio
import trio_websocket

from t3orch.store.errors import StateDirInvalid

log = logging.getLogger(__name__)

#: The longest path a Unix socket address can hold (sun_path, with its NUL).
UNIX_PATH_MAX = 107


class ConnectionGone(Exception):
    """The peer closed the connection (or it broke)."""


class FrameTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"frame exceeds {limit} bytes")
        self.limit = limit


class FrameChannel(Protocol):
    async def receive(self) -> bytes | str:
        """The next whole frame; raises ConnectionGone or FrameTooLarge."""

    async def send(self, frame: bytes) -> None:
        """Raises ConnectionGone when the peer is gone."""

    async def send_many(self, frames: Sequence[bytes]) -> None:
        """Several frames in order, in as few writes as the transport allows; first
        whatever ``write_now`` left (even with no frames)."""

    def idle(self) -> bool:
        """Whether ``write_now`` may be called: nothing is being written and the
        transport can write without a task."""

    def write_now(self, frames: Sequence[bytes]) -> bool:
        """Writes the frames without waiting (only when ``idle``). False when the socket
        took only part: the rest is held, writers are kept out, and the next
        ``send_many`` must send it."""

    async def aclose(self) -> None: ...


class SocketWrites:
    """The writes to one stream: awaited, or at once from synchronous code.

    Writers take ``gate``, a semaphore rather than a lock: when a synchronous write
    (``write_now``) fits only partly into the socket, the gate stays closed for the
    rest, and the task that sends it later (``send_all``) opens it. A lock would
    belong to the task that took it, and no other writer (a WebSocket pong, say) may
    get between a frame's two halves.
    """

    #: writev takes at most IOV_MAX (1024) buffers; longer lists are joined first.
    MAX_PARTS = 64

    def __init__(self, stream: trio.abc.Stream, gate: trio.Semaphore) -> None:
        self._stream = stream
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.gate = gate
        self._rest: bytes | None = None

    def idle(self) -> bool:
        # fileno() is -1 once the socket is closed: its number may belong to another.
        return self._socket is not None and self.gate.value > 0 and self._socket.fileno() >= 0

    def write_now(self, parts: list[bytes]) -> bool:
        assert self._socket is not None
        self.gate.acquire_nowait()
        if len(parts) > self.MAX_PARTS:
            parts = [b"".join(parts)]
        size = sum(map(len, parts))
        try:
            written = os.writev(self._socket.fileno(), parts)
        except OSError:
            # Full (EAGAIN) or broken: the awaited write waits, or meets the error and
            # ends the connection as it always has.
            written = 0
        if written == size:
            self.gate.release()
            return True
        self._rest = b"".join(parts)[written:]
        return False

    async def send_all(self, data: bytes) -> None:
        rest, self._rest = self._rest, None
        try:
            if rest is None:
                if data:
                    async with self.gate:
                        await self._stream.send_all(data)
                return
            try:
                # The gate has stayed closed since write_now left this.
                await self._stream.send_all(rest + data)
            finally:
                self.gate.release()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ConnectionGone() from None


def text_frame_header(length: int) -> bytes:
    """RFC 6455 header of one unfragmented, unmasked (server to client) text frame."""
    if length < 126:
        return bytes((0x81, length))
    if length < 1 << 16:
        return b"\x81\x7e" + length.to_bytes(2, "big")
    return b"\x81\x7f" + length.to_bytes(8, "big")


class WebSocketChannel:
    """One WebSocket connection; trio-websocket enforces the message size (close 1009).

    Outgoing frames are already UTF-8 JSON. trio-websocket only sends text from a
    ``str``, which would cost a decode here and an encode plus a copy in wsproto per
    frame and per subscriber (~0.5 ms for 100 KB of non-ASCII text). So text frames
    are framed here from the bytes and written to the connection's stream; that is
    exact only while no extension (permessage-deflate) rewrites payloads, which the
    server never negotiates. trio-websocket's send lock is replaced by the gate of
    :class:`SocketWrites`, so its own writes (pongs, the close) never land inside a
    frame that a synchronous write left half-sent. Without these internals (checked
    at connect time) frames go through ``send_message``, and never synchronously.
    """

    def __init__(self, ws: trio_websocket.WebSocketConnection, max_frame_bytes: int) -> None:
        self._ws = ws
        self._limit = max_frame_bytes
        #: The close frame ``aclose`` sends.
        self.close_code = 1000
        self.close_reason: str | None = None
        self._writes: SocketWrites | None = None
        if _raw_frames_possible(ws) and not ws._stream_lock.locked():
            # trio-websocket's own writes (pongs, the close) take our gate from now on.
            self._writes = SocketWrites(ws._stream, trio.Semaphore(1, max_value=1))
            setattr(ws, "_stream_lock", self._writes.gate)  # noqa: B010 (mypy: other type)

    async def receive(self) -> bytes | str:
        try:
            return await self._ws.get_message()
        except trio_websocket.ConnectionClosed as exc:
            reason = exc.reason
            if reason is not None and reason.code == 1009:
                raise FrameTooLarge(self._limit) from None
            raise ConnectionGone() from None

    async def send(self, frame: bytes) -> None:
        await self.send_many((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        if self._writes is None:
            try:
                for frame in frames:
                    # Text frames: JSON-RPC over WebSocket is text by convention.
                    await self._ws.send_message(frame.decode())
            except trio_websocket.ConnectionClosed:
                raise ConnectionGone() from None
            return
        if self._ws.closed is not None:
            raise ConnectionGone()
        await self._writes.send_all(b"".join(_framed(frames)))

    def idle(self) -> bool:
        return self._writes is not None and self._ws.closed is None and self._writes.idle()

    def write_now(self, frames: Sequence[bytes]) -> bool:
        assert self._writes is not None
        return self._writes.write_now(_framed(frames))

    async def aclose(self) -> None:
        await self._ws.aclose(self.close_code, self.close_reason)


def _framed(frames: Sequence[bytes]) -> list[bytes]:
    parts: list[bytes] = []
    for frame in frames:
        if frame:
            parts.append(text_frame_header(len(frame)))
            parts.append(frame)
    return parts


def _raw_frames_possible(ws: trio_websocket.WebSocketConnection) -> bool:
    """Whether this trio-websocket has the internals framing relies on, and no extension."""
    proto = getattr(getattr(getattr(ws, "_wsproto", None), "connection", None), "_proto", None)
    return (
        isinstance(getattr(ws, "_stream_lock", None), trio.StrictFIFOLock)
        and hasattr(ws, "_stream")
        and proto is not None
        and not getattr(proto, "extensions", True)
    )


class LineChannel:
    """Newline-delimited frames over a byte stream (the Unix socket; the CLI client)."""

    def __init__(self, stream: trio.abc.Stream, max_frame_bytes: int) -> None:
        self._stream = stream
        self._limit = max_frame_bytes
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no newline
        self._writes = SocketWrites(stream, trio.Semaphore(1, max_value=1))

    async def receive(self) -> bytes:
        while True:
            idx = self._buf.find(b"\n", self._scanned)
            if idx >= 0:
                line = bytes(self._buf[:idx]).rstrip(b"\r")
                del self._buf[: idx + 1]
                self._scanned = 0
                if len(line) > self._limit:
                    raise FrameTooLarge(self._limit)
                if line.strip():
                    return line
                continue
            self._scanned = len(self._buf)
            if len(self._buf) > self._limit:
                raise FrameTooLarge(self._limit)
            try:
                data = await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise ConnectionGone() from None
            if not data:
                raise ConnectionGone()
            self._buf += data

    async def send(self, frame: bytes) -> None:
        await self.send_many((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        await self._writes.send_all(b"".join(_lines(frames)))

    def idle(self) -> bool:
        return self._writes.idle()

    def write_now(self, frames: Sequence[bytes]) -> bool:
        return self._writes.write_now(_lines(frames))

    async def aclose(self) -> None:
        await self._stream.aclose()


def _lines(frames: Sequence[bytes]) -> list[bytes]:
    return [part for frame in frames if frame for part in (frame, b"\n")]


# -- listeners --------------------------------------------------------------------
# Listeners are opened before anything is served, so a setup failure (port in use,
# another daemon on the socket) surfaces as itself, not inside a nursery's group.


async def open_websocket_listeners(host: str, port: int) -> list[trio.SocketListener]:
    return await trio.open_tcp_listeners(port, host=host)


def bound_port(listeners: list[trio.SocketListener]) -> int:
    return int(listeners[0].socket.getsockname()[1])


#: Descriptors kept out of the WebSocket budget: the Unix socket's clients, the
#: store's files, every provider's pipes and raw-frame log.
FD_RESERVE = 128
#: Sent to a connection refused past a bound, before it is closed.
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n"
    b"X-T3orch-Refused: too many WebSocket connections\r\n\r\n"
)
#: At most one warning per this many seconds while connections are being refused.
_REFUSAL_LOG_EVERY_S = 10.0


def descriptor_limit() -> int:
    """This process's soft RLIMIT_NOFILE (a large number when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


@attrs.define
class Admission:
    """The bounds on WebSocket connections, so a local flood cannot take the descriptors
    the Unix socket, the store and the providers need.

    A TCP connection is *unauthenticated* from its accept until its handshake has
    carried the right token, and is closed ``auth_timeout_s`` after its accept if it
    has not (a handshake that never ends included). Past ``max_unauthenticated`` such
    connections, or ``max_connections`` in all, a new one is answered 503 and closed
    at once: that frees its descriptor and drains the listen backlog, so a flood
    costs the daemon a bounded number of descriptors and never blocks the accept
    loop of the Unix socket.
    """

    max_connections: int
    max_unauthenticated: int
    auth_timeout_s: float
    open: int = 0
    unauthenticated: int = 0
    refused: int = 0
    _warned_at: float = -math.inf

    @classmethod
    def within(
        cls, max_connections: int, max_unauthenticated: int, auth_timeout_s: float, nofile: int
    ) -> Admission:
        """The configured bounds, cut to fit ``nofile`` descriptors less the reserve."""
        total = max(1, min(max_connections, nofile - FD_RESERVE))
        return cls(total, max(1, min(max_unauthenticated, total)), auth_timeout_s)

    def admit(self) -> Ticket | None:
        if self.open >= self.max_connections or self.unauthenticated >= self.max_unauthenticated:
            self.refused += 1
            now = trio.current_time()
            if now - self._warned_at >= _REFUSAL_LOG_EVERY_S:
                self._warned_at = now
                log.warning(
                    "refusing WebSocket connections: %d open, %d unauthenticated "
                    "(bounds %d, %d); %d refused so far",
                    self.open,
                    self.unauthenticated,
                    self.max_connections,
                    self.max_unauthenticated,
                    self.refused,
                )
            return None
        self.open += 1
        self.unauthenticated += 1
        return Ticket(self, trio.current_time() + self.auth_timeout_s)

    def status(self) -> dict[str, object]:
        return {
            "unauthenticated": self.unauthenticated,
            "refused": self.refused,
            "limits": {
                "maxConnections": self.max_connections,
                "maxUnauthenticated": self.max_unauthenticated,
                "authTimeoutS": self.auth_timeout_s,
            },
        }


@attrs.define
class Ticket:
    """One admitted connection's place in the :class:`Admission` counts."""

    admission: Admission
    #: When the connection is closed unless it has authenticated (trio time).
    deadline: float
    authenticated: bool = False
    released: bool = False

    def authenticate(self) -> None:
        if not self.authenticated and not self.released:
            self.authenticated = True
            self.admission.unauthenticated -= 1

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission.open -= 1
            if not self.authenticated:
                self.admission.unauthenticated -= 1


async def serve_websocket(
    handler: Callable[[trio_websocket.WebSocketRequest, Ticket], Awaitable[None]],
    listeners: list[trio.SocketListener],
    max_frame_bytes: int,
    admission: Admission,
    *,
    http: Callable[[trio.SocketStream], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serves WebSocket connections within ``admission``'s bounds.

    trio-websocket's server is not used: it admits every connection and gives each
    its own handshake timeout, which bounds neither their number nor how long one
    without the token may stay.

    A request that is not a WebSocket upgrade goes to ``http`` (the web page) when
    given: same port, same admission bounds and deadline (it never authenticates).
    """

    async def one(stream: trio.SocketStream) -> None:
        ticket = admission.admit()
        if ticket is None:
            _refuse(stream)
            await stream.aclose()
            return
        try:
            async with trio.open_nursery() as nursery:
                request = None
                with trio.move_on_at(ticket.deadline):
                    # trio-websocket waits for a handshake even after the peer hung up:
                    # one that leaves without a word must not hold its place.
                    if await _peer_speaks(stream):
                        if http is not None and not is_websocket_upgrade(await _peek_head(stream)):
                            await http(stream)
                        else:
                            request = await trio_websocket.wrap_server_stream(
                                nursery, stream, max_message_size=max_frame_bytes
                            )
                if request is not None:
                    await handler(request, ticket)
                # The handler has closed the WebSocket (or the handshake never ended):
                # the reader task goes, and the stream with it.
                nursery.cancel_scope.cancel()
        except Exception:
            # One connection's failure must never take the listener (or the daemon) down.
            log.exception("WebSocket connection failed")
        finally:
            ticket.release()
            with trio.CancelScope(shield=True):
                await stream.aclose()

    await trio.serve_listeners(one, listeners, task_status=task_status)  # type: ignore[arg-type]


async def _peer_speaks(stream: trio.SocketStream) -> bool:
    """Waits for the peer's first byte (left in the socket); False when it hung up first."""
    try:
        return bool(await stream.socket.recv(1, socket.MSG_PEEK))
    except OSError:
        return False


#: Enough of a request head to see its ``Upgrade`` header.
_PEEK_BYTES = 16 * 1024


async def _peek_head(stream: trio.SocketStream) -> bytes:
    """The request head as far as the peer has sent it (left in the socket): all of
    it, or the first ``_PEEK_BYTES``, or what came before the peer stopped."""
    data = b""
    while True:
        try:
            data = await stream.socket.recv(_PEEK_BYTES, socket.MSG_PEEK)
        except OSError:
            return data
        if not data or b"\r\n\r\n" in data or len(data) >= _PEEK_BYTES:
            return data
        # The rest of the head is on its way (a peek does not wait for more bytes).
        await trio.sleep(0.005)


def is_websocket_upgrade(head: bytes) -> bool:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"upgrade" and b"websocket" in value.lower():
            return True
    return False


def _refuse(stream: trio.SocketStream) -> None:
    """Says why without waiting: a peer that does not read gets nothing more."""
    with contextlib.suppress(OSError):
        os.write(stream.socket.fileno(), _REFUSAL)


class SocketPathError(StateDirInvalid):
    """The Unix socket cannot be created at the requested path (in the state dir, so a
    state dir that cannot hold it: ``serve`` says so in one line)."""


def socket_path_problem(path: Path) -> str | None:
    """Why no Unix socket can be bound or reached at ``path``, or None: ``sun_path`` is
    108 bytes, and the kernel refuses a longer name before any file is looked at."""
    size = len(os.fsencode(path))
    if size <= UNIX_PATH_MAX:
        return None
    room = UNIX_PATH_MAX - (size - len(os.fsencode(path.parent)))
    return (
        f"a Unix socket path has at most {UNIX_PATH_MAX} bytes, and {path.name} in it would "
        f"have {size}; use a directory of at most {room} bytes"
    )


async def _clear_stale(path: Path) -> None:
    """Removes a socket left by a dead daemon; refuses to replace a live one."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketPathError(f"{path} exists and is not a socket; refusing to replace it")
    try:
        probe = await trio.open_unix_socket(str(path))
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        raise SocketPathError(f"{path}: {exc.strerror}") from None
    await probe.aclose()
    raise SocketPathError(f"{path}: another t3orch daemon is serving this state dir")


async def open_unix_listener(path: Path) -> trio.SocketListener:
    """A listening 0600 Unix socket at ``path``: its file mode is the auth."""
    if problem := socket_path_problem(path):
        raise SocketPathError(f"{path.parent}: {problem}")
    await _clear_stale(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.bind(str(path))
        # connect(2) needs write permission on the socket file: 0600 = this user only.
        os.chmod(path, 0o600)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise SocketPathError(f"{path}: {exc.strerror}") from None
    return trio.SocketListener(sock)


async def serve_unix(
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    listener: trio.SocketListener,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    await trio.serve_listeners(handler, [listener], task_status=task_status)  # type: ignore[arg-type]
