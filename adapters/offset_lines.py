"""Lines with their journal offsets: how a held provider's lines are handed to its runtime.

A held process (``supervisor.holder.client.HeldProcess``) and a thread's share of a
held shared Codex process (:class:`adapters.codex.multiplex.VirtualProcess`) read
alike: each line keeps its journal offset, the offset of the lines handed out is
reported (``on_delivered``: their events are queued by the next read), a reattach
mutes the lines the log has already (up to ``mute_through``, ``on_mute``) and hands
the runtime the earlier daemon's writes (``on_input``) in journal order with the
lines. :class:`OffsetLines` is that buffer; each reader adds how it waits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

from adapters.transport import OversizedLine
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import JournalOffset


@attrs.frozen
class Input:
    """A line an earlier daemon wrote to the provider (its journal's ``IN``), kept among
    the lines read so that the runtime gets both in journal order."""

    line: bytes


class OffsetLines:
    """Lines (and replayed inputs) with their offsets, handed out in batches."""

    def __init__(self, after: int = 0) -> None:
        self._lines: list[bytes | OversizedLine | Input] = []
        self._line_offsets: list[int] = []
        #: Given each replayed input, once the lines before it are handed out.
        self.on_input: Callable[[int, bytes], None] | None = None
        #: Told when the replay's end is reached outside a read (``HeldReplay``).
        self.on_replayed: Callable[[], None] | None = None
        #: Lines up to this offset are a replay of what the log holds already: before
        #: each batch, ``on_mute`` is told whether its lines are (a batch never mixes both).
        self.mute_through = 0
        self.on_mute: Callable[[bool], None] | None = None
        #: Told, at each read, the offset of the last line handed out before it: the
        #: reader has queued those lines' events by then (they map synchronously).
        self.on_delivered: Callable[[int], None] | None = None
        #: The journal offset of the last line handed out.
        self.delivered = after
        self._reported = after

    def _keep(self, line: bytes | OversizedLine | Input, offset: int) -> None:
        self._lines.append(line)
        self._line_offsets.append(offset)

    def _next_batch(
        self, limit: int | None, offsets_out: list[int] | None = None
    ) -> list[bytes | OversizedLine]:
        """The next lines, never across a replayed input or the end of the muted replay
        (their offsets, in order, onto ``offsets_out`` when given).

        A replayed input is applied once the lines before it are handed out (mapped),
        before the lines after it: the adapter's state sees both in journal order. A
        line of offset < 0 (not journaled) is never muted.
        """
        items, offsets = self._lines, self._line_offsets
        out: list[bytes | OversizedLine] = []
        mute_through = self.mute_through
        muted: bool | None = None
        i, n = 0, len(items)
        while i < n and (limit is None or len(out) < limit):
            item = items[i]
            if isinstance(item, Input):
                if out:
                    break
                if self.on_input is not None:
                    self.on_input(offsets[i], item.line)
                i += 1
                continue
            here = 0 <= offsets[i] <= mute_through
            if muted is None:
                muted = here
            elif here != muted:
                break
            out.append(item)
            i += 1
        if out:
            self.delivered = max(self.delivered, offsets[i - 1])
            if offsets_out is not None:
                # A batch's lines are the last of what it took: inputs only lead it.
                offsets_out.extend(offsets[i - len(out) : i])
        del items[:i]
        del offsets[:i]
        if muted is not None and self.on_mute is not None:
            self.on_mute(muted)
        return out

    def report_delivered(self) -> None:
        """Report the offset of the lines handed out so far now, not at the next read."""
        if self.delivered > max(self._reported, self.mute_through) and self.on_delivered:
            self._reported = self.delivered
            self.on_delivered(self.delivered)


#: Lines with their offsets, a read's worth (what a shared process's reader takes).
OffsetReads = Callable[[], Awaitable[list[tuple[int, bytes | OversizedLine]]]]


def feed_offsets(lines: OffsetLines, holder_id: str, events: EventQueue) -> None:
    """Wire held lines to their runtime's event queue: their journal offsets go in as
    ``JournalOffset`` events (committed with what they cover), and a reattach's replay
    of what the log holds already is muted."""

    def delivered(offset: int) -> None:
        events.put(JournalOffset(holder_id=holder_id, offset=offset))

    def mute(muted: bool) -> None:
        events.muted = muted

    lines.on_delivered = delivered
    lines.on_mute = mute
