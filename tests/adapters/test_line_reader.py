"""``BoundedLineReader.receive_lines``: the same lines as ``receive_line``, in batches."""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.line_reader import BoundedLineReader
from adapters.transport import OversizedLine

MAX = 16


class Chunks(trio.abc.ReceiveStream):
    """A stream that hands out exactly the given chunks, one per read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self._chunks.pop(0) if self._chunks else b""

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    chunks, at = [], 0
    for size in sizes:
        if at >= len(data):
            break
        chunks.append(data[at : at + size])
        at += size
    if at < len(data):
        chunks.append(data[at:])
    return chunks


async def one_at_a_time(chunks: list[bytes]) -> list[bytes | OversizedLine]:
    reader = BoundedLineReader(Chunks(chunks), MAX)
    lines = []
    while (line := await reader.receive_line()) is not None:
        lines.append(line)
    return lines


async def in_batches(chunks: list[bytes]) -> tuple[list[bytes | OversizedLine], int]:
    reader = BoundedLineReader(Chunks(chunks), MAX)
    lines: list[bytes | OversizedLine] = []
    reads = 0
    while batch := await reader.receive_lines():
        lines += batch
        reads += 1
    assert await reader.receive_lines() == []  # ended stays ended
    return lines, reads


lines_st = st.lists(
    st.one_of(
        st.binary(max_size=MAX).map(lambda b: b.replace(b"\n", b"x")),
        st.binary(min_size=MAX + 1, max_size=4 * MAX).map(lambda b: b.replace(b"\n", b"y")),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(lines_st, st.booleans(), st.lists(st.integers(1, 3 * MAX), max_size=40))
def test_batches_hold_the_same_lines_as_single_reads(
    lines: list[bytes], trailing_newline: bool, sizes: list[int]
) -> None:
    data = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    chunks = cut(data, sizes)
    expected = trio.run(one_at_a_time, chunks)
    got, _ = trio.run(in_batches, chunks)
    assert got == expected


def test_one_read_of_many_lines_is_one_batch() -> None:
    data = b"".join(b"line %d\n" % n for n in range(10))
    got, reads = trio.run(in_batches, [data])
    assert got == [b"line %d" % n for n in range(10)]
    assert reads == 1


def test_oversized_lines_are_reported_inside_a_batch() -> None:
    long = b"z" * (MAX + 5)
    got, _ = trio.run(in_batches, [b"a\n" + long + b"\nb\n"])
    assert got == [b"a", OversizedLine(length=MAX + 5, head=long), b"b"]
