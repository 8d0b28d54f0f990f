"""A bounded newline reader over a trio byte stream.

Provider frames are newline-delimited and can be megabytes long (Claude), but a
misbehaving provider must never make us buffer without limit. Lines longer
than the bound are skipped up to their newline and reported as
:class:`OversizedLine` (length and first bytes), and reading carries on with
the next line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

from adapters.transport import OversizedLine

#: How many leading bytes of an oversized line are kept for diagnostics.
OVERSIZED_HEAD_BYTES = 256
_CHUNK = 64 * 1024


def oversized(line: bytes) -> OversizedLine:
    """The :class:`OversizedLine` report for a complete line that broke the bound."""
    return OversizedLine(length=len(line), head=bytes(line[:OVERSIZED_HEAD_BYTES]))


class BoundedLineReader:
    """Reads ``\\n``-terminated lines; memory stays below ``max_line_bytes`` + one chunk."""

    def __init__(self, stream: trio.abc.ReceiveStream, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._stream = stream
        self._max = max_line_bytes
        self._buffer = bytearray()
        # Where to resume the newline search, so a long line is scanned once.
        self._scanned = 0
        self._eof = False
        self._busy = False

    async def receive_line(self) -> bytes | OversizedLine | None:
        """The next line without its newline, or ``None`` once the stream has ended.

        A last line without a trailing newline is still returned. Only one task
        may read at a time.
        """
        with self._sole_reader():
            return await self._receive_line()

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        """Every complete line buffered (reading until there is one); ``[]`` once ended.

        The batch form of :meth:`receive_line`, same lines in the same order:
        one chunk is split in one pass instead of one call per line.
        """
        with self._sole_reader():
            return await self._receive_lines()

    @contextlib.contextmanager
    def _sole_reader(self) -> Iterator[None]:
        if self._busy:
            raise trio.BusyResourceError("another task is already reading lines")
        self._busy = True
        try:
            yield
        finally:
            self._busy = False

    async def _receive_lines(self) -> list[bytes | OversizedLine]:
        while self._buffer.find(b"\n", self._scanned) < 0:
            self._scanned = len(self._buffer)
            if len(self._buffer) > self._max or self._eof:
                line = await self._receive_line()
                return [] if line is None else [line]
            await self._fill()
        data = bytes(self._buffer)
        lines = data.split(b"\n")
        # The last piece is a line still incomplete (usually empty): it stays buffered.
        self._buffer[:] = lines.pop()
        self._scanned = 0
        if len(data) <= self._max:
            return list(lines)
        return [oversized(line) if len(line) > self._max else line for line in lines]

    async def _receive_line(self) -> bytes | OversizedLine | None:
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._scanned = 0
                return oversized(line) if len(line) > self._max else line
            self._scanned = len(self._buffer)
            if len(self._buffer) > self._max:
                return await self._skip_oversized()
            if self._eof:
                if not self._buffer:
                    return None
                line = bytes(self._buffer)
                self._buffer.clear()
                self._scanned = 0
                return line
            await self._fill()

    async def _skip_oversized(self) -> OversizedLine:
        # Keep the head, then count and drop bytes until the newline (or EOF).
        head = bytes(self._buffer[:OVERSIZED_HEAD_BYTES])
        length = 0
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                length += newline
                del self._buffer[: newline + 1]
                break
            length += len(self._buffer)
            self._buffer.clear()
            if self._eof:
                break
            await self._fill()
        self._scanned = 0
        return OversizedLine(length=length, head=head)

    async def _fill(self) -> None:
        chunk = await self._stream.receive_some(_CHUNK)
        if not chunk:
            self._eof = True
        else:
            self._buffer += chunk
