"""The holder's record format: one framing for its journal file and its socket.

A record is a 13-byte header (``<BQI``: kind, offset, payload length) and its
payload. Journaled records (what the provider wrote, what the daemon wrote to
it, its stderr, its end) carry the journal's monotonic offset, from 1; the
control records of the socket (hello, welcome, the daemon's commands) carry 0.
The socket after the welcome is the journal file's bytes as they are, so a
reattaching daemon reads a replay and the live stream with one parser (the replay
comes from the file, the live tail from the holder's memory as it journals it:
``supervisor.holder.server``).

The protocol is versioned (:data:`PROTOCOL_VERSION`, in the hello and the
welcome): a holder refuses a hello of another version with one line naming
both, and a daemon of a later release keeps speaking the versions its holders
may have been started with.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import Literal, NamedTuple

import msgspec
import trio

#: Bumped when a record's meaning changes; a holder refuses any other version.
PROTOCOL_VERSION = 1

HEADER = struct.Struct("<BQI")
#: A record's payload bound: a provider line can be megabytes (the line bound is 8 MiB).
MAX_PAYLOAD = 64 * 1024 * 1024


class Kind(IntEnum):
    # Journaled (offset > 0).
    OUT = 1  #: a provider stdout line, without its newline
    IN = 2  #: a line the daemon wrote to the provider's stdin
    ERR = 3  #: a chunk of the provider's stderr
    OVERSIZED = 4  #: a stdout line past the bound: ``<Q`` length + its head
    EOF = 5  #: the provider's stdout ended
    EXIT = 6  #: the provider was reaped: :class:`ExitRecord`
    NOTE = 7  #: the holder's own step: :class:`Note`
    # Control, daemon -> holder (offset 0).
    HELLO = 16  #: :class:`Hello`
    WRITE = 17  #: a line for the provider's stdin
    CLOSE_STDIN = 18
    SIGNAL = 19  #: ``<i`` signal number, to the provider's process group
    DETACH = 20  #: the daemon leaves; the grace time starts
    RELEASE = 21  #: the daemon is done with this runtime: kill what is left, exit
    # Control, holder -> daemon (offset 0).
    WELCOME = 32  #: :class:`Welcome`
    REFUSED = 33  #: one line: why the hello was refused


JOURNALED = frozenset({Kind.OUT, Kind.IN, Kind.ERR, Kind.OVERSIZED, Kind.EOF, Kind.EXIT, Kind.NOTE})


class Hello(msgspec.Struct, rename="camel"):
    version: int
    #: The last journal offset the daemon has: the holder sends every record after it.
    after: int


class Welcome(msgspec.Struct, rename="camel"):
    version: int
    holder_id: str
    holder_pid: int
    holder_started_at: float
    provider_pid: int
    provider_started_at: float
    spawn_id: str
    grace_s: float
    #: The journal's last offset when the hello was answered.
    journaled: int


class ExitRecord(msgspec.Struct):
    code: int | None
    signal: int | None


class Note(msgspec.Struct):
    #: ``grace_expired``: no daemon attached within the grace; ``signalled``: the holder
    #: got SIGTERM/SIGINT; either way it stopped the provider (``stage``: the rung).
    #: ``journal_stalled``: the journal could not be written (``detail`` says why): the
    #: provider waits until it can; ``journal_failed``: too much waited, the holder ends
    #: and its provider with it. Both are sent to the attached daemon only, from memory.
    event: Literal["grace_expired", "signalled", "stopped", "journal_stalled", "journal_failed"]
    stage: str | None = None
    detail: str | None = None


class Record(NamedTuple):
    """One record (a tuple: a read makes one per frame, and a tuple is the cheapest)."""

    kind: Kind
    offset: int
    payload: bytes


def encode(kind: Kind, offset: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, offset, len(payload)) + payload


def encode_json(kind: Kind, message: msgspec.Struct) -> bytes:
    return encode(kind, 0, msgspec.json.encode(message))


#: Each kind by its number (an enum call per record was a third of a read's cost).
_KINDS: dict[int, Kind] = {k.value: k for k in Kind}


def parse(data: bytes | bytearray, start: int = 0) -> tuple[list[Record], int]:
    """The complete records in ``data`` from ``start``, and where the next one begins."""
    records: list[Record] = []
    add = records.append
    size = HEADER.size
    end = len(data)
    pos = start
    unpack = HEADER.unpack_from
    kinds = _KINDS
    new = Record
    # A payload is a slice of immutable bytes: one copy (a bytearray's slice is two).
    view = data if isinstance(data, bytes) else bytes(data)
    while pos + size <= end:
        kind, offset, length = unpack(view, pos)
        if length > MAX_PAYLOAD:
            raise ProtocolError(f"a record of {length} bytes is past the bound")
        body = pos + size
        if body + length > end:
            break
        known = kinds.get(kind)
        if known is None:
            raise ProtocolError(f"unknown record kind {kind}")
        add(new(known, offset, view[body : body + length]))
        pos = body + length
    return records, pos


def iter_file(path: str) -> Iterator[tuple[int, Record]]:
    """Each complete record of a journal file with its byte position (a torn tail is left)."""
    with open(path, "rb") as f:
        data = f.read()
    records, _ = parse(data)
    pos = 0
    for record in records:
        yield pos, record
        pos += HEADER.size + len(record.payload)


class ProtocolError(Exception):
    """The other end sent something this protocol does not have."""


def write_now(stream: trio.SocketStream, data: bytes) -> tuple[int, OSError | None]:
    """What of ``data`` the socket takes now (one non-blocking ``write``, no await), and
    the error that broke it, if one did."""
    # The fd is asked for each time: a closed socket's is -1, never a reused number.
    fd = stream.socket.fileno()
    try:
        if fd < 0:
            raise BrokenPipeError("the socket is closed")
        return os.write(fd, data), None
    except BlockingIOError:
        return 0, None
    except OSError as exc:
        return 0, exc


class RecordSender:
    """Records out on a socket, in order, without a task's wake-up per record (the
    daemon's commands to its holder).

    :meth:`push` writes at once (one non-blocking ``write``) when nothing is being sent;
    what the socket does not take, or what comes while :meth:`run` sends, piles up and
    :meth:`run` sends it in one write. :meth:`hold` piles a record up without sending:
    it goes with the next push, or :meth:`drain`.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._pending = bytearray()
        #: True while :meth:`run` writes: no push may.
        self._sending = False
        self._wake = trio.Event()
        self._error: OSError | None = None

    def push(self, data: bytes) -> None:
        if self._sending or self._error is not None:
            self._pending += data
            self._wake.set()
            return
        if self._pending:
            data = bytes(self._pending) + data
            self._pending.clear()
        sent, self._error = write_now(self._stream, data)  # run() raises an error
        if sent < len(data):
            self._pending += data[sent:]
            self._wake.set()

    def hold(self, data: bytes) -> None:
        self._pending += data

    async def run(self) -> None:
        """Send what piles up, until cancelled; raises ``trio.BrokenResourceError`` (or
        ``ClosedResourceError``) when the socket fails."""
        while True:
            if self._error is not None:
                raise trio.BrokenResourceError(str(self._error)) from self._error
            await self._wake.wait()
            self._wake = trio.Event()
            if not self._pending:
                continue
            data = bytes(self._pending)
            self._pending.clear()
            self._sending = True
            try:
                await self._stream.send_all(data)
            finally:
                self._sending = False

    async def drain(self) -> None:
        """Send what is piled up now (``run`` is over: the connection is closing)."""
        data = bytes(self._pending)
        self._pending.clear()
        if data:
            await self._stream.send_all(data)


#: What one read of a stream of records asks for: under the C allocator's mmap threshold
#: (128 KiB), or a process whose threshold has not grown (a holder) maps, faults in and
#: unmaps a buffer of that size for each read of a few hundred bytes (strace: a holder's
#: 256 KiB command reads did). A backlog takes a few more reads.
READ_BYTES = 64 * 1024


class RecordReader:
    """Records from a byte stream, a read's worth per call."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        #: A socket is read as :func:`write_now` writes it: by its fd, once readable.
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        #: The last read filled its bound: more is likely waiting (a backlog).
        self._full = False

    async def receive(self) -> list[Record]:
        """The next complete records (at least one); ``[]`` at end of stream."""
        while True:
            records, used = parse(self._buffer)
            if records:
                del self._buffer[:used]
                return records
            chunk = await self._read()
            self._full = len(chunk) == READ_BYTES
            if not chunk:
                if self._buffer:
                    raise ProtocolError("the stream ended inside a record")
                return []
            self._buffer += chunk

    async def _read(self) -> bytes | bytearray:
        """One read of the stream. A socket that the last read emptied is waited on
        before it is read: trio's ``receive_some`` reads first, and a reader keeping up
        (every read but a backlog's) paid a failed ``recv`` and its exception, and the
        stream's conflict check, per read (issue 17)."""
        sock = self._socket
        if sock is None:
            return await self._stream.receive_some(READ_BYTES)
        if self._full:
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.wait_readable(sock)
        while True:
            fd = sock.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the socket is closed")
            try:
                return os.read(fd, READ_BYTES)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)

    async def receive_one(self) -> Record | None:
        """One record (for the hello/welcome exchange; never reads past what it needs)."""
        while len(self._buffer) < HEADER.size:
            chunk = await self._stream.receive_some(HEADER.size - len(self._buffer))
            if not chunk:
                return None
            self._buffer += chunk
        kind, offset, length = HEADER.unpack_from(self._buffer)
        if length > MAX_PAYLOAD:
            raise ProtocolError(f"a record of {length} bytes is past the bound")
        while len(self._buffer) < HEADER.size + length:
            chunk = await self._stream.receive_some(HEADER.size + length - len(self._buffer))
            if not chunk:
                return None
            self._buffer += chunk
        payload = bytes(self._buffer[HEADER.size : HEADER.size + length])
        del self._buffer[: HEADER.size + length]
        try:
            return Record(Kind(kind), offset, payload)
        except ValueError:
            raise ProtocolError(f"unknown record kind {kind}") from None
