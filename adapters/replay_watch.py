"""A reattach's replay as the runtime reading it sees it: what a caller waits for.

After a daemon restart the API serves once every held runtime is attached, not once its
journal's replay has rebuilt the runtime's state (the mapper's open requests and turn, the
pending calls). So what a caller does on a runtime being replayed (an answer to a request,
a turn, an interrupt) waits, bounded, for the replay to be over: an answer to a request the
replay has not reached yet was refused as stale. Both adapters' runtimes use this one
watch; what it watches is the process they read (``HeldReplay``: a holder's
``HeldProcess``, or a thread's ``VirtualProcess`` on a held shared Codex process).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import trio

from adapters.transport import OversizedLine, ReadLines


@runtime_checkable
class HeldReplay(Protocol):
    """A provider process a holder kept across a daemon restart, being reattached to: its
    journal is replayed first."""

    #: Told each line an earlier daemon wrote to the process, in journal order with the
    #: lines read.
    on_input: Callable[[int, bytes], None] | None
    #: Told when :attr:`replayed` became true with no line handed out: the records the
    #: journal held before the attach end with others than lines (stderr, the holder's
    #: notes), and no read would look again until the next line.
    on_replayed: Callable[[], None] | None

    @property
    def replayed(self) -> bool:
        """Everything journaled before this attach has been handed out."""
        ...


class ReplayWatch:
    """Whether the replay of the process a runtime reads is over: every line and input
    journaled before the attach handed out, mapped (their events queued), and the reader
    back in its next read (where a held process unmutes the queue once the lines the log
    has are mapped: what a caller does after the replay is news).

    Over at once for a process that is not being replayed. The reader reads through
    :meth:`reads` (the lines a read returned are being mapped until the next read) and
    says :meth:`moved` when it applied a replayed input; :meth:`wait` looks again at each.
    """

    def __init__(self, process: object | None) -> None:
        self._held: HeldReplay | None = process if isinstance(process, HeldReplay) else None
        #: The reader has lines it has not mapped yet.
        self._mapping = False
        self._moved = trio.Event()
        #: Told once everything journaled before the attach is handed out, when that
        #: happens outside a read (the reader looks again after each read by itself).
        self.on_handed_out: Callable[[], None] | None = None
        if self._held is not None:
            self._held.on_replayed = self._handed_out_now

    @property
    def handed_out(self) -> bool:
        """Every line and input journaled before the attach has been handed out to the
        reader (which may still be mapping the last of them)."""
        return self._held is None or self._held.replayed

    @property
    def over(self) -> bool:
        if self._held is not None and not self._mapping and self._held.replayed:
            self._held = None
        return self._held is None

    def reads(self, read: ReadLines) -> ReadLines:
        """``read``, watched (as it is when there is no replay to watch)."""
        if self._held is None:
            return read

        async def watched() -> list[bytes | OversizedLine]:
            self._mapped()
            lines = await read()
            self._mapping = bool(lines) and self._held is not None
            return lines

        return watched

    def _mapped(self) -> None:
        self._mapping = False
        self.moved()

    def _handed_out_now(self) -> None:
        self.moved()
        if self.on_handed_out is not None:
            self.on_handed_out()

    def moved(self) -> None:
        """The replay went on (a replayed input applied, a read mapped)."""
        if self._held is not None:
            self._moved.set()
            self._moved = trio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Until the replay is over; no longer than ``timeout_s`` (a replay whose end is not
        seen, a holder that stalls, does not hold a caller past a request's bound)."""
        if self.over:
            return
        with trio.move_on_after(timeout_s):
            while not self.over:
                await self._moved.wait()


__all__ = ["HeldReplay", "ReplayWatch"]
