"""The live lane: streamed text as the provider sends it, before it is committed.

Committed deltas are coalesced for 250 ms before they are stored (``ingest/coalesce``);
a chat view fed only by them updates four times a second. The ingest stream also
publishes each item's streamed text here at once (``ingest/live.LiveLane``), and the
API's ``threadDetail`` subscriptions of the thread send it as ``liveText`` frames.

A piece is no log event and has no sequence of its own. It names its item, the
character offset in the item's field where its text starts, and ``after_sequence``:
the last committed sequence when its text was read, so no committed event at or
before it holds any of that text. Applied at its offset to what the client holds,
it is replaced by the committed ``turn_item.delta`` / ``turn_item.upserted`` that
carries the same text later (docs/api.md, "Live text").

Best effort and bounded per subscription: contiguous pieces of one item waiting for
a slow reader are joined into one; past ``capacity`` waiting pieces (or
``max_chars`` of text) new ones are dropped and counted. Nothing here touches the
committed stream, whose contract is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import trio

from t3orch.events import EventEnvelope

#: Pieces a subscription may have waiting; more are dropped (see the module's doc).
LIVE_CAPACITY = 64
#: Characters a subscription may have waiting in all its pieces.
LIVE_MAX_CHARS = 64 * 1024


class LiveText(msgspec.Struct, frozen=True, rename="camel"):
    """Streamed text of one item, not committed yet."""

    thread_id: str
    item_id: str
    #: The item field it extends as ``turn_item.delta`` names it: None is the main text.
    field: str | None
    #: Where ``text`` starts in that field (Unicode code points).
    offset: int
    text: str
    #: The log's last committed sequence when the text was read.
    after_sequence: int


class LiveSubscription:
    """One reader's waiting pieces of one thread (see the module's doc)."""

    def __init__(self, hub: LiveHub, thread_id: str, capacity: int, max_chars: int) -> None:
        self._hub = hub
        self.thread_id = thread_id
        self._capacity = capacity
        self._max_chars = max_chars
        self._pending: list[LiveText] = []
        self._chars = 0
        self._wake = trio.Event()
        self.closed = False
        #: Pieces dropped because the reader was behind.
        self.dropped = 0

    def offer(self, piece: LiveText) -> None:
        if self.closed:
            return
        if self._chars + len(piece.text) > self._max_chars:
            self.dropped += 1
            return
        last = self._pending[-1] if self._pending else None
        if (
            last is not None
            and last.item_id == piece.item_id
            and last.field == piece.field
            and last.offset + len(last.text) == piece.offset
        ):
            # Joined: the earlier sequence stays, which is true of all its text.
            self._pending[-1] = msgspec.structs.replace(last, text=last.text + piece.text)
        elif len(self._pending) >= self._capacity:
            self.dropped += 1
            return
        else:
            self._pending.append(piece)
        self._chars += len(piece.text)
        self._wake.set()

    async def take(self) -> list[LiveText]:
        """Every waiting piece, once there is one; empty once closed."""
        while not self._pending and not self.closed:
            await self._wake.wait()
            self._wake = trio.Event()
        out, self._pending, self._chars = self._pending, [], 0
        return out

    def close(self) -> None:
        self.closed = True
        self._wake.set()
        self._hub._discard(self)


class LiveHub:
    """Where the ingest streams publish live text and API streams subscribe to it.

    ``committed`` follows the broadcast (a listener: ``observe``), so a piece can say
    which committed sequence it follows.
    """

    def __init__(self) -> None:
        self._subscribers: dict[str, set[LiveSubscription]] = {}
        self.committed = 0

    def observe(self, events: Sequence[EventEnvelope]) -> None:
        if events:
            self.committed = max(self.committed, events[-1].sequence)

    def wanted(self, thread_id: str) -> bool:
        """Whether anyone reads the thread's live text (else it is not even built)."""
        return thread_id in self._subscribers

    def subscribe(
        self, thread_id: str, capacity: int = LIVE_CAPACITY, max_chars: int = LIVE_MAX_CHARS
    ) -> LiveSubscription:
        sub = LiveSubscription(self, thread_id, capacity, max_chars)
        self._subscribers.setdefault(thread_id, set()).add(sub)
        return sub

    def publish(self, pieces: Sequence[LiveText]) -> None:
        for piece in pieces:
            for sub in self._subscribers.get(piece.thread_id, ()):
                sub.offer(piece)

    def _discard(self, sub: LiveSubscription) -> None:
        subs = self._subscribers.get(sub.thread_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subscribers[sub.thread_id]


__all__ = ["LIVE_CAPACITY", "LiveHub", "LiveSubscription", "LiveText"]
