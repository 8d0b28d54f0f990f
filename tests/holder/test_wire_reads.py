"""The daemon's reads of a holder's socket (``RecordReader``): what each read asks for.

A read bound past the C allocator's mmap threshold (128 KiB) costs each read of a few
hundred bytes a fresh mapping of that size (issue 17: ~20 µs of a frame's hop); records
larger than one read still arrive whole.
"""

from __future__ import annotations

import trio

from supervisor.holder.wire import Kind, RecordReader, encode

#: glibc's default M_MMAP_THRESHOLD: a larger malloc is an mmap and its free a munmap.
MMAP_THRESHOLD = 128 * 1024


class _Chunks(trio.abc.ReceiveStream):
    """Hands out ``data`` a read at a time, keeping what each read asked for."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.asked: list[int] = []

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        assert max_bytes is not None
        self.asked.append(max_bytes)
        chunk, self._data = self._data[:max_bytes], self._data[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def _all(reader: RecordReader) -> list[tuple[Kind, int, bytes]]:
    out: list[tuple[Kind, int, bytes]] = []
    while records := await reader.receive():
        out.extend((r.kind, r.offset, r.payload) for r in records)
    return out


async def test_each_read_asks_for_less_than_a_mapping() -> None:
    delta = b'{"method":"item/agentMessage/delta","params":{"delta":"w%d"}}'
    lines = [delta % i for i in range(50)]
    stream = _Chunks(b"".join(encode(Kind.OUT, i + 1, line) for i, line in enumerate(lines)))
    got = await _all(RecordReader(stream))
    assert got == [(Kind.OUT, i + 1, line) for i, line in enumerate(lines)]
    assert stream.asked and max(stream.asked) < MMAP_THRESHOLD


async def test_a_record_larger_than_a_read_arrives_whole() -> None:
    big = bytes(range(256)) * 2048  # 512 KiB: several reads
    stream = _Chunks(encode(Kind.OUT, 1, big) + encode(Kind.EOF, 2))
    got = await _all(RecordReader(stream))
    assert got == [(Kind.OUT, 1, big), (Kind.EOF, 2, b"")]
    assert len(stream.asked) > 1
