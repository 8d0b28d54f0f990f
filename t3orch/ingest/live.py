"""One runtime's side of the live lane: streamed deltas → ``LiveText`` pieces.

Beside the coalescer, the ingest stream shows each event here as it takes it from
the queue. For the items of the active turn the lane knows each text field's length
(the started item's text plus every delta since), so a piece says exactly where its
text starts; pieces are published at once, or at most every ``LIVE_INTERVAL_S``
(a frame's worth) when deltas come faster. Items under a subagent and the echo of
the user's input are left out: they are hidden in the thread's view.
"""

from __future__ import annotations

import math

import attrs
import msgspec

from t3orch.domain.turn_items import TurnItemBase, UserMessage
from t3orch.ingest.binding import TurnBinding
from t3orch.ingest.translate import DELTA_CHANNELS, item_ids
from t3orch.live import LiveHub, LiveText
from t3orch.projections.projector import delta_target
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RuntimeExited,
    TurnCompleted,
)

#: Pieces of one stream go out at most this often (about one display frame).
LIVE_INTERVAL_S = 0.016


@attrs.define
class _Item:
    thread_id: str
    item_id: str
    content: TurnItemBase
    #: Field name -> its length so far (the started text plus the deltas seen).
    lengths: dict[str, int] = attrs.field(factory=dict)


@attrs.define(eq=False)
class LiveLane:
    hub: LiveHub
    interval_s: float = LIVE_INTERVAL_S
    _items: dict[str, _Item] = attrs.field(factory=dict)
    _pending: list[LiveText] = attrs.field(factory=list)
    _sent_at: float = -math.inf
    #: A turn whose end was seen: its items are not followed again.
    _ended: TurnBinding | None = None
    #: An item with pending pieces ended: they go at the next flush, interval or not.
    _due_now: bool = False

    def see(self, event: ProviderEvent, thread_id: str | None, turn: TurnBinding | None) -> None:
        """Follow one event, in the queue's order; a delta becomes a pending piece."""
        match event:
            case ItemDelta(native_item_ref=ref, text=text, channel=channel):
                item = self._items.get(ref)
                if item is not None and text:
                    self._delta(item, text, channel)
            case ItemStarted(native_item_ref=ref, content=content, parent_native_item_ref=None):
                if (
                    turn is not None
                    and turn is not self._ended
                    and thread_id is not None
                    and not isinstance(content, UserMessage)
                    # Started again, it keeps its text (translate does not reset it).
                    and ref not in self._items
                ):
                    self._items[ref] = _Item(thread_id, item_ids(turn, ref)[0], content)
            case ItemCompleted(native_item_ref=ref):
                ended = self._items.pop(ref, None)
                if ended is not None and any(p.item_id == ended.item_id for p in self._pending):
                    self._due_now = True
            case TurnCompleted() | RuntimeExited():
                self._items.clear()
                self._ended = turn
                self._due_now = bool(self._pending)
            case _:
                pass

    def _delta(self, item: _Item, text: str, channel: str | None) -> None:
        field, replace = DELTA_CHANNELS.get(channel, (None, False))
        name = delta_target(item.content, field)
        if replace or name is None:
            return
        offset = item.lengths.get(name)
        if offset is None:
            offset = len(getattr(item.content, name) or "")
        item.lengths[name] = offset + len(text)
        if not self.hub.wanted(item.thread_id):
            return
        last = self._pending[-1] if self._pending else None
        if (
            last is not None
            and last.item_id == item.item_id
            and last.field == field
            and last.offset + len(last.text) == offset
        ):
            # Joined: its sequence stays, which is true of all the text.
            self._pending[-1] = msgspec.structs.replace(last, text=last.text + text)
            return
        self._pending.append(
            LiveText(item.thread_id, item.item_id, field, offset, text, self.hub.committed)
        )

    def deadline(self) -> float | None:
        """When the pending pieces are due (None: none pending)."""
        return self._sent_at + self.interval_s if self._pending else None

    def flush(self, now: float) -> None:
        """Publish the pending pieces when a frame's interval has passed since the last,
        or at once when their item (or turn) ended.

        An ended item's final upsert is about to be queued for commit: its last pieces
        go before it, never after (a client drops provisional text at that upsert, and
        a piece after it would be news of an item that is done).
        """
        if self._pending and (self._due_now or now - self._sent_at >= self.interval_s):
            pieces, self._pending = self._pending, []
            self._sent_at = now
            self._due_now = False
            self.hub.publish(pieces)


__all__ = ["LIVE_INTERVAL_S", "LiveLane"]
