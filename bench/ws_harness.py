"""Cheap WebSocket subscribers and a bare fan-out writer, for bench/fanout.py.

Two roles, each run as its own process (``python bench/ws_harness.py ROLE ...``):

* ``reader``: ``--count`` subscribers. Each does the real WebSocket handshake
  (``Authorization: Bearer``) against the daemon's API, sends a real (masked)
  ``subscribe`` request, then reads server frames with a tiny RFC 6455 parser over
  raw non-blocking sockets in one ``selectors`` loop. Server-to-client frames are
  unmasked, so parsing is a header read and a slice. Every frame is stamped with the
  CLOCK_MONOTONIC time of the ``recv`` that completed it; nothing is decoded while
  the run streams (JSON is decoded by the parent afterwards). The bench's earlier
  subscribers (50 trio-websocket/wsproto clients in one process) took p50 14 ms from
  the server's send to ``get_message``; this harness is what the daemon's figures
  should be measured with.
* ``floor``: the physical floor of the same fan-out on this machine. It listens on
  loopback, answers the same handshake and subscribe, then replays a schedule of
  frames (the bytes the daemon sent, at the times it published them) to all its
  connections from one process with non-blocking sends, stamping each batch just
  before its first write. The same ``reader`` reads them.

Protocol with the parent (lines on stdin/stdout): a reader prints ``ready`` once
every subscriber got its subscribe response, ``run-ended`` (only with
``--watch-run``) when it sees a terminal ``run.upserted``, and on ``stop`` writes
its frames to ``--out`` and prints ``done``. The floor prints ``port N``, then
``connected`` once ``--count`` subscribers are in; on ``go`` it replays the
schedule, writes its stamps to ``--out`` and prints ``done``.

No t3orch import: the processes stay small and start fast.
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import json
import os
import selectors
import socket
import struct
import sys
import time
from collections import deque
from pathlib import Path

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
RECV_BYTES = 1024 * 1024
#: A stored frame: arrival time, subscriber index, payload length; then the payload.
RECORD = struct.Struct("<dII")
TERMINAL = (b'"status":"completed"', b'"status":"failed"', b'"status":"interrupted"')


def frame_header(opcode: int, length: int, mask: bool) -> bytes:
    """RFC 6455 header of one unfragmented frame (FIN set)."""
    bit = 0x80 if mask else 0
    if length < 126:
        return bytes((0x80 | opcode, bit | length))
    if length < 1 << 16:
        return bytes((0x80 | opcode, bit | 126)) + length.to_bytes(2, "big")
    return bytes((0x80 | opcode, bit | 127)) + length.to_bytes(8, "big")


def client_frame(opcode: int, payload: bytes) -> bytes:
    """A client frame must be masked (RFC 6455 §5.3)."""
    key = os.urandom(4)
    n = len(payload)
    mask = (key * (n // 4 + 1))[:n]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(n, "big")
    return frame_header(opcode, n, True) + key + masked


def read_http_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The HTTP head up to the blank line, and whatever bytes came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def handshake(sock: socket.socket, host: str, port: int, token: str) -> bytes:
    key = base64.b64encode(os.urandom(16))
    sock.sendall(
        b"GET / HTTP/1.1\r\n"
        + f"Host: {host}:{port}\r\n".encode()
        + b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
        + b"Sec-WebSocket-Key: "
        + key
        + b"\r\nSec-WebSocket-Version: 13\r\n"
        + f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    head, rest = read_http_head(sock)
    if not head.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(f"handshake refused: {head[:200]!r}")
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    if accept not in head:
        raise ConnectionError("handshake: wrong Sec-WebSocket-Accept")
    return rest


class Conn:
    """One subscriber's socket and its unparsed bytes."""

    __slots__ = ("buf", "index", "open", "port", "sock")

    def __init__(self, index: int, sock: socket.socket, rest: bytes) -> None:
        self.index = index
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.buf = bytearray(rest)
        self.open = True

    def frames(self) -> list[tuple[int, bytes]]:
        """Whole frames at the head of the buffer, removed from it: (opcode, payload)."""
        out: list[tuple[int, bytes]] = []
        buf = self.buf
        pos = 0
        end = len(buf)
        while end - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            length = b1 & 0x7F
            at = pos + 2
            if length == 126:
                if end - at < 2:
                    break
                length = int.from_bytes(buf[at : at + 2], "big")
                at += 2
            elif length == 127:
                if end - at < 8:
                    break
                length = int.from_bytes(buf[at : at + 8], "big")
                at += 8
            if b1 & 0x80:
                raise ConnectionError("a server frame must not be masked")
            if end - at < length:
                break
            if not b0 & 0x80:
                raise ConnectionError("the server fragments frames; this harness does not")
            out.append((b0 & 0x0F, bytes(buf[at : at + length])))
            pos = at + length
        if pos:
            del buf[:pos]
        return out


def run_reader(args: argparse.Namespace) -> int:
    # What is kept (tuples of stamped frames) holds no cycles; a cyclic GC pass over
    # ~70k of them would stall the loop and be counted as the server's latency.
    gc.disable()
    token = Path(args.token_file).read_text().strip()
    conns: list[Conn] = []
    request = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "subscribe",
            "params": {"topic": "threadDetail", "threadId": args.thread},
        }
    ).encode()
    for i in range(args.count):
        sock = socket.create_connection((args.host, args.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rest = handshake(sock, args.host, args.port, token)
        sock.sendall(client_frame(0x1, request))
        sock.setblocking(False)
        conns.append(Conn(args.first_index + i, sock, rest))
    sel = selectors.DefaultSelector()
    for conn in conns:
        sel.register(conn.sock, selectors.EVENT_READ, conn)
    sel.register(sys.stdin.buffer, selectors.EVENT_READ, None)
    # Frames are kept as they come: (time, subscriber index, payload).
    got: list[tuple[float, int, bytes]] = []
    append = got.append
    monotonic = time.monotonic
    waiting_response = {c.index for c in conns}
    watch = args.watch_run
    stdin_buf = b""
    stopping = False
    while not stopping:
        for key, _ in sel.select():
            conn = key.data
            if conn is None:
                chunk = os.read(sys.stdin.fileno(), 4096)
                stdin_buf += chunk
                if not chunk or b"stop" in stdin_buf:
                    stopping = True
                continue
            try:
                data = conn.sock.recv(RECV_BYTES)
            except BlockingIOError:
                continue
            now = monotonic()  # stamped before anything else is done with the bytes
            if not data:
                sel.unregister(conn.sock)
                conn.open = False
                continue
            conn.buf += data
            for opcode, payload in conn.frames():
                if opcode == 0x1:
                    append((now, conn.index, payload))
                    if waiting_response and payload.startswith(b'{"jsonrpc":"2.0","id":1,'):
                        if not payload.startswith(b'{"jsonrpc":"2.0","id":1,"result"'):
                            print(f"subscribe failed: {payload[:300]!r}", file=sys.stderr)
                            return 1
                        waiting_response.discard(conn.index)
                        if not waiting_response:
                            print("ready", flush=True)
                    elif (
                        watch
                        and b'"run.upserted"' in payload[:400]
                        and any(t in payload for t in TERMINAL)
                    ):
                        watch = False
                        print("run-ended", flush=True)
                elif opcode == 0x9:  # ping: answer, as a real client would
                    conn.sock.setblocking(True)
                    conn.sock.sendall(client_frame(0xA, payload))
                    conn.sock.setblocking(False)
                elif opcode == 0x8:
                    sel.unregister(conn.sock)
                    conn.open = False
    with open(args.out, "wb") as out:
        ports = {c.index: c.port for c in conns}
        out.write(json.dumps(ports).encode() + b"\n")
        for t, index, payload in got:
            out.write(RECORD.pack(t, index, len(payload)))
            out.write(payload)
    for conn in conns:
        conn.sock.close()
    print("done", flush=True)
    return 0


def read_frames(path: str | Path) -> tuple[dict[int, int], list[tuple[float, int, bytes]]]:
    """A reader's output: subscriber index → local port, and every (time, index, frame)."""
    data = Path(path).read_bytes()
    head, _, body = data.partition(b"\n")
    ports = {int(k): v for k, v in json.loads(head).items()}
    frames: list[tuple[float, int, bytes]] = []
    pos = 0
    view = memoryview(body)
    while pos < len(body):
        t, index, n = RECORD.unpack_from(body, pos)
        pos += RECORD.size
        frames.append((t, index, bytes(view[pos : pos + n])))
        pos += n
    return ports, frames


# -- the floor ---------------------------------------------------------------------


def _client_frame_size(buf: bytearray) -> int | None:
    """The whole size of the (masked) client frame at the head of ``buf``, once known."""
    if len(buf) < 2:
        return None
    length = buf[1] & 0x7F
    if length < 126:
        return 2 + 4 + length
    extra = 2 if length == 126 else 8
    if len(buf) < 2 + extra:
        return None
    return 2 + extra + 4 + int.from_bytes(buf[2 : 2 + extra], "big")


def _accept_subscriber(listener: socket.socket) -> socket.socket:
    sock, _ = listener.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head, rest = read_http_head(sock)
    key = b""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    sock.sendall(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )
    # The subscribe request (masked, small): read it whole, answer like the daemon.
    buf = bytearray(rest)
    while (size := _client_frame_size(buf)) is None or len(buf) < size:
        buf += sock.recv(65536)
    reply = b'{"jsonrpc":"2.0","id":1,"result":{"subscription":"s1"}}'
    sock.sendall(frame_header(0x1, len(reply), False) + reply)
    return sock


def run_floor(args: argparse.Namespace) -> int:
    # schedule: JSON lines [offset_s, [frame, ...]] with frames as latin-1 text.
    schedule: list[tuple[float, bytes, list[int]]] = []
    for line in Path(args.schedule).read_bytes().splitlines():
        offset, frames, seqs = json.loads(line)
        data = b"".join(
            frame_header(0x1, len(f), False) + f for f in (x.encode("latin-1") for x in frames)
        )
        schedule.append((offset, data, seqs))
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"port {listener.getsockname()[1]}", flush=True)
    socks = [_accept_subscriber(listener) for _ in range(args.count)]
    for sock in socks:
        sock.setblocking(False)
    print("connected", flush=True)
    sys.stdin.buffer.readline()  # "go"
    pending: dict[socket.socket, deque[memoryview]] = {s: deque() for s in socks}
    sel = selectors.DefaultSelector()
    stamps: list[tuple[float, list[int]]] = []
    t0 = time.monotonic()

    def push(sock: socket.socket) -> None:
        queue = pending[sock]
        while queue:
            try:
                sent = sock.send(queue[0])
            except BlockingIOError:
                break
            if sent == len(queue[0]):
                queue.popleft()
            else:
                queue[0] = queue[0][sent:]
                break
        wants = bool(queue)
        registered = sock in sel.get_map()
        if wants and not registered:
            sel.register(sock, selectors.EVENT_WRITE)
        elif not wants and registered:
            sel.unregister(sock)

    for offset, data, seqs in schedule:
        while True:
            wait = t0 + offset - time.monotonic()
            if wait <= 0:
                break
            for key, _ in sel.select(wait) if sel.get_map() else ():
                push(key.fileobj)  # type: ignore[arg-type]
            if not sel.get_map():
                time.sleep(max(0.0, t0 + offset - time.monotonic()))
        stamps.append((time.monotonic(), seqs))
        view = memoryview(data)
        for sock in socks:
            pending[sock].append(view)
            push(sock)
    while sel.get_map():
        for key, _ in sel.select():
            push(key.fileobj)  # type: ignore[arg-type]
    Path(args.out).write_text(json.dumps(stamps))
    print("done", flush=True)
    sys.stdin.buffer.readline()  # the parent says when the readers are done
    for sock in socks:
        sock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("role", choices=["reader", "floor"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-file", default="")
    parser.add_argument("--thread", default="")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--first-index", type=int, default=0)
    parser.add_argument("--watch-run", action="store_true")
    parser.add_argument("--schedule", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    return run_reader(args) if args.role == "reader" else run_floor(args)


if __name__ == "__main__":
    sys.exit(main())
