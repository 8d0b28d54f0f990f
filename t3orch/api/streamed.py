"""Which streamed fields of a re-upserted turn item a live subscriber already holds.

A completed item's ``turn_item.upserted`` carries its whole text (or output), which
a live subscriber has already built from the item's earlier upsert and its
``turn_item.delta`` events. Sent to fifty subscribers, that repeat was most of the
fan-out's bytes. This tracker follows every committed event in sequence order (it
is a broadcast listener, called before any subscriber is offered the batch) and
folds deltas onto each open item exactly as the projection does
(``apply_delta``). For an upsert whose streamed field equals the fold up to the
event before it, it records that field as *unchanged*: the stream may then leave it
out, and a client that holds the item keeps its own value (docs/api.md).

Only items whose upsert the tracker saw are followed (an item open across a
daemon restart is sent whole), and memory is bounded: open items only, and a
bounded record of recent decisions; anything forgotten is simply sent whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from t3orch.domain.turn_items import TurnItem
from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import EventEnvelope, TurnItemDelta, TurnItemUpserted
from t3orch.projections.projector import apply_delta, delta_target

#: Shorter values are sent anyway: leaving them out saves less than it complicates.
MIN_ELIDED_CHARS = 256


@attrs.define
class _Open:
    item: TurnItem
    #: Struct field names (snake_case) that deltas extended since the upsert was seen.
    streamed: set[str] = attrs.field(factory=set)


class StreamedItems:
    def __init__(self, *, max_items: int = 512, max_decisions: int = 8192) -> None:
        self._open: dict[str, _Open] = {}
        self._decisions: dict[str, tuple[str, ...]] = {}
        self._max_items = max_items
        self._max_decisions = max_decisions

    def observe(self, events: Sequence[EventEnvelope]) -> None:
        try:
            self._observe(events)
        except Exception:
            # A fold that missed an event could vouch for a wrong value: forget every
            # open item instead (they are sent whole), then report the bug.
            self._open.clear()
            raise

    def _observe(self, events: Sequence[EventEnvelope]) -> None:
        for env in events:
            payload = env.payload
            if isinstance(payload, TurnItemDelta):
                tracked = self._open.get(payload.item_id)
                if tracked is not None:
                    name = delta_target(tracked.item, payload.field)
                    if name is not None:
                        tracked.streamed.add(name)
                    tracked.item = apply_delta(
                        tracked.item, payload.text, payload.field, payload.replace
                    )
            elif isinstance(payload, TurnItemUpserted):
                self._upserted(env.event_id, payload.item)

    def unchanged(self, event_id: str) -> tuple[str, ...]:
        """Wire (camelCase) names of the fields the event's item may be sent without."""
        return self._decisions.get(event_id, ())

    def _upserted(self, event_id: str, item: TurnItem) -> None:
        before = self._open.pop(item.id, None)
        if before is not None and type(before.item) is type(item):
            names = tuple(
                _wire_name(item, name)
                for name in sorted(before.streamed)
                if _same_long_text(getattr(before.item, name), getattr(item, name))
            )
            if names:
                if len(self._decisions) >= self._max_decisions:
                    del self._decisions[next(iter(self._decisions))]
                self._decisions[event_id] = names
        if item.status not in TURN_ITEM_TERMINAL:
            if len(self._open) >= self._max_items:
                del self._open[next(iter(self._open))]
            self._open[item.id] = _Open(item)


def _same_long_text(held: object, new: object) -> bool:
    return isinstance(new, str) and len(new) >= MIN_ELIDED_CHARS and held == new


def _wire_name(item: TurnItem, name: str) -> str:
    fields = item.__struct_fields__
    return item.__struct_encode_fields__[fields.index(name)]
