"""Coalesces streamed deltas before they are stored.

Providers stream 5–150 deltas a second per item; storing each one made T3 Code's
logs explode (one 10.5k-character reply → 3,024 events). The bound here: at most
one stored delta per item per ``window`` (default 250 ms, i.e. ≤ 4 rows per item
per second), plus the completed item. Buffered text is flushed before any other
event about the same item and before any turn-level event, so order is kept.

A held runtime's journal offsets (``JournalOffset``: every event of the frames up to
it is queued before it) wait until no delta queued before them is still buffered:
an offset the log records as committed never hides a buffered delta.
"""

from __future__ import annotations

import attrs

from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    JournalOffset,
    ProviderEvent,
)

DEFAULT_WINDOW_S = 0.25


@attrs.define
class _Buffer:
    first_at: float
    parts: list[str]
    raw_event_id: str | None
    channel: str | None
    #: The order it opened in (among buffers and journal offsets).
    seq: int = 0


#: Channels whose deltas are whole snapshots: only the last one matters.
REPLACING_CHANNELS = frozenset({"patch"})


class DeltaCoalescer:
    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.window_s = window_s
        self._buffers: dict[tuple[str, str | None], _Buffer] = {}
        self._seq = 0
        #: Journal offsets waiting for older buffers: (seq, offset), in order.
        self._offsets: list[tuple[int, JournalOffset]] = []

    def push(self, event: ProviderEvent, now: float) -> list[ProviderEvent]:
        """Feed one event; returns the events ready to ingest, in order."""
        if isinstance(event, ItemDelta):
            key = (event.native_item_ref, event.channel)
            buf = self._buffers.get(key)
            if buf is None:
                self._seq += 1
                self._buffers[key] = _Buffer(
                    now, [event.text], event.raw_event_id, event.channel, self._seq
                )
            elif event.channel in REPLACING_CHANNELS:
                buf.parts = [event.text]
            else:
                buf.parts.append(event.text)
            return self.flush_due(now)
        if isinstance(event, (ItemStarted, ItemCompleted)):
            out = self._take(event.native_item_ref)
            out.append(event)
            return out
        if type(event) is JournalOffset:
            if not self._buffers:
                return [event]
            self._seq += 1
            self._offsets.append((self._seq, event))
            return self.flush_due(now)
        out = self.flush_all()
        out.append(event)
        return out

    def flush_due(self, now: float) -> list[ProviderEvent]:
        # Buffers are kept in the order they opened, so the oldest comes first and
        # the scan stops at the first one not yet due: a delta usually costs one
        # comparison, not one per open buffer.
        due: dict[str, None] = {}
        for key, b in self._buffers.items():
            if now - b.first_at < self.window_s:
                break
            due[key[0]] = None
        out: list[ProviderEvent] = []
        for ref in due:
            out.extend(self._take(ref))
        return out

    def flush_all(self) -> list[ProviderEvent]:
        out: list[ProviderEvent] = []
        for ref in dict.fromkeys(key[0] for key in self._buffers):
            out.extend(self._take(ref))
        return out

    def next_deadline(self) -> float | None:
        for b in self._buffers.values():
            return b.first_at + self.window_s
        return None

    def _take(self, ref: str) -> list[ProviderEvent]:
        out: list[ProviderEvent] = []
        for key in [k for k in self._buffers if k[0] == ref]:
            buf = self._buffers.pop(key)
            out.append(
                ItemDelta(
                    native_item_ref=ref,
                    text="".join(buf.parts),
                    raw_event_id=buf.raw_event_id,
                    channel=buf.channel,
                )
            )
        if self._offsets:
            self._release_offsets(out)
        return out

    def _release_offsets(self, out: list[ProviderEvent]) -> None:
        """The latest journal offset no open buffer is older than, after what was taken."""
        oldest = next(iter(self._buffers.values())).seq if self._buffers else None
        released = None
        while self._offsets and (oldest is None or self._offsets[0][0] < oldest):
            released = self._offsets.pop(0)[1]
        if released is not None:
            out.append(released)
