"""Fan-out of committed events to live subscribers.

Publishing happens only after the transaction commits. Each subscriber has a
bounded buffer; one that falls behind is cut off (its stream ends with
``overflowed`` set) instead of growing memory: it resynchronises from a fresh
snapshot, the cursor contract makes that safe.

A subscriber that has caught up may also take a batch at once, on the publishing
task (``Subscription.take_now``): fifty subscribers' frames then go out in one
pass instead of fifty task steps, each behind every other runnable task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from t3orch.events import EventEnvelope

log = logging.getLogger(__name__)

Listener = Callable[[Sequence[EventEnvelope]], None]
#: Takes a published batch synchronously; False leaves it to the buffer.
TakeNow = Callable[[Sequence[EventEnvelope]], bool]


class Subscription:
    def __init__(self, hub: Broadcast, capacity: int) -> None:
        self._hub = hub
        self._send, self.receive = trio.open_memory_channel[EventEnvelope](capacity)
        self.overflowed = False
        #: Set by the reader while it may take batches at publish time (see ``publish``).
        self.take_now: TakeNow | None = None
        #: The reader is waiting in ``batch`` with nothing buffered or handed to it:
        #: every event offered so far is dealt with, so one taken now stays in order.
        self.quiet = False

    def _offer(self, env: EventEnvelope) -> bool:
        self.quiet = False
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

    async def batch(self, limit: int = 512) -> list[EventEnvelope]:
        """The next event and whatever else is already buffered (at most ``limit``);
        empty once the stream has ended. One scheduling point per batch: a reader that
        took one event per ``receive`` would pass through the scheduler once per event,
        behind every other runnable task, and a burst of N events would take N loop
        passes to get through."""
        self.quiet = self.receive.statistics().current_buffer_used == 0
        try:
            out = [await self.receive.receive()]
        except trio.EndOfChannel:
            return []
        while len(out) < limit:
            try:
                out.append(self.receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return out

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
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` with every published batch, in order, before any subscriber
        is offered it (so what it derives is ready when the subscribers read the events).
        It runs on the publishing task (the writer's, after the commit): it must be
        quick, and an error in it is logged, never raised into the writer."""
        self._listeners.append(listener)

    def unlisten(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def subscribe(self, capacity: int = 4096) -> Subscription:
        sub = Subscription(self, capacity)
        self._subscribers.add(sub)
        return sub

    def publish(self, events: Sequence[EventEnvelope]) -> None:
        """Listeners first, then each subscriber: a quiet one with ``take_now`` is
        handed the batch right here (it sends now or declines, and then the batch is
        buffered as for any other); the others find it in their buffer."""
        for listener in self._listeners:
            try:
                listener(events)
            except Exception:
                log.exception("broadcast listener %r failed", listener)
        for sub in list(self._subscribers):
            take = sub.take_now
            if take is not None and sub.quiet:
                try:
                    if take(events):
                        continue
                except Exception:
                    # It advanced nothing it did not send: the buffer gets the batch.
                    log.exception("subscriber %r failed to take a batch", sub)
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
