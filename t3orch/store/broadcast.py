"""Fan-out of committed events to live subscribers.

Publishing happens only after the transaction commits. Each subscriber has a
bounded buffer; one that falls behind is cut off (its stream ends with
``overflowed`` set) instead of growing memory: it resynchronises from a fresh
snapshot, the cursor contract makes that safe.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from t3orch.events import EventEnvelope


class Subscription:
    def __init__(self, hub: Broadcast, capacity: int) -> None:
        self._hub = hub
        self._send, self.receive = trio.open_memory_channel[EventEnvelope](capacity)
        self.overflowed = False

    def _offer(self, env: EventEnvelope) -> bool:
        try:
            self._send.send_nowait(env)
        except trio.WouldBlock:
            self.overflowed = True
            self._send.close()
            return False
        except trio.BrokenResourceError:
            return False
        return True

    def close(self) -> None:
        self._hub._subscribers.discard(self)
        self._send.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> EventEnvelope:
        try:
            return await self.receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


class Broadcast:
    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()

    def subscribe(self, capacity: int = 4096) -> Subscription:
        sub = Subscription(self, capacity)
        self._subscribers.add(sub)
        return sub

    def publish(self, events: Sequence[EventEnvelope]) -> None:
        for sub in list(self._subscribers):
            for env in events:
                if not sub._offer(env):
                    self._subscribers.discard(sub)
                    break

    def close(self) -> None:
        for sub in list(self._subscribers):
            sub.close()

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)
