"""Reading a holder's socket (``RecordReader``): one read per batch, none that fails.

Trio's ``receive_some`` reads before it waits: a reader keeping up with its holder (every
read but a backlog's) paid a ``recv`` that failed with ``EAGAIN``, and its exception, for
each batch (issue 17: half the socket reads of a plain turn, the holder's as well).
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import trio

from supervisor.holder.wire import READ_BYTES, Kind, RecordReader, encode


class _Reads:
    """The C-level reads (``recv``, ``os.read``) this thread calls, and those that raise."""

    def __init__(self) -> None:
        self.calls = 0
        self.failed = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event in ("c_call", "c_exception") and getattr(arg, "__name__", "") in ("recv", "read"):
            if event == "c_call":
                self.calls += 1
            else:
                self.failed += 1


async def test_a_reader_keeping_up_reads_each_batch_once_and_never_in_vain() -> None:
    a, b = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(a), trio.SocketStream(b)
    reader = RecordReader(receiver)
    batches = 20
    reads = _Reads()
    got: list[bytes] = []
    async with sender, receiver, trio.open_nursery() as nursery:

        async def send() -> None:
            for i in range(batches):
                await trio.sleep(0.002)  # the reader is waiting when each batch comes
                await sender.send_all(encode(Kind.OUT, i + 1, b"line %d" % i))

        nursery.start_soon(send)
        sys.setprofile(reads)
        try:
            while len(got) < batches:
                got.extend(r.payload for r in await reader.receive())
        finally:
            sys.setprofile(None)
    assert got == [b"line %d" % i for i in range(batches)]
    assert reads.failed == 0
    assert reads.calls == batches


async def test_a_backlog_is_read_without_waiting_between_full_reads() -> None:
    a, b = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(a), trio.SocketStream(b)
    big = bytes(range(256)) * (3 * READ_BYTES // 256)  # several full reads
    async with sender, receiver, trio.open_nursery() as nursery:
        nursery.start_soon(sender.send_all, encode(Kind.OUT, 1, big) + encode(Kind.EOF, 2))
        reader = RecordReader(receiver)
        got = [(r.kind, r.payload) for r in await reader.receive()]
        if len(got) < 2:
            got += [(r.kind, r.payload) for r in await reader.receive()]
    assert got == [(Kind.OUT, big), (Kind.EOF, b"")]
