"""``EventQueue``: how a runtime's canonical events reach their one consumer, in batches.

A busy Codex turn yields a canonical event per frame, thousands per second; a
trio memory channel costs a send and a receive per event, more than mapping the
frame. Here the producer appends to a list (no await) and the consumer takes
everything queued in one call. What a channel gave is kept:

* **Order.** One list, appended in the order events are put.
* **Latency.** A put wakes a waiting consumer at once; it runs as soon as the
  producer next yields to trio (a reader yields only to read more), so an event
  never waits for later frames.
* **Backpressure.** ``put``/``put_all`` never block (a frame's events go in
  whole, and tasks that must not wait, such as a request's answer, can push
  theirs); they return True once ``high_water`` events wait, and the producer
  then awaits :meth:`room` before reading more. Memory stays below the bound
  plus what the producer queues between two checks: one frame's events for
  Claude's reader, one pipe read's (at most 64 KiB of lines) for Codex's.
* **Muting.** While :attr:`EventQueue.muted` is set, puts are dropped: a reattaching
  runtime replays its journal through the adapter to rebuild the adapter's state,
  and what the log holds already must not be committed twice.
* **Close.** After :meth:`close` (the consumer is gone, or the session is being
  torn down) events are dropped with a debug log, as a closed channel's were:
  the raw frame log still has their frames. The consumer still takes what was
  queued before the close, then gets ``[]``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import trio

from t3orch.provider_events import ProviderEvent

log = logging.getLogger(__name__)


class EventQueue:
    """Single-consumer queue of canonical events; any number of (trio) producers."""

    def __init__(self, high_water: float = math.inf) -> None:
        if high_water < 1:
            raise ValueError("high_water must be at least 1")
        self.high_water = high_water
        self._events: list[ProviderEvent] = []
        self._closed = False
        #: Puts are dropped (a replay of what the log holds): see the module docstring.
        self.muted = False
        #: Set when events arrive or the queue closes, while the consumer waits.
        self._arrived: trio.Event | None = None
        #: Set when the consumer has taken the queue's events, while a producer waits.
        self._taken: trio.Event | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._events)

    # -- producers ---------------------------------------------------------------

    def put(self, event: ProviderEvent) -> bool:
        """Queue ``event``; True when the producer should await :meth:`room`."""
        if self._closed or self.muted:
            _dropped(event)
            return False
        events = self._events
        events.append(event)
        if self._arrived is not None:
            self._arrived.set()
            self._arrived = None
        return len(events) >= self.high_water

    def put_all(self, events: Iterable[ProviderEvent]) -> bool:
        """Queue ``events`` in order; True when the producer should await :meth:`room`."""
        if self._closed or self.muted:
            for event in events:
                _dropped(event)
            return False
        queued = self._events
        before = len(queued)
        queued.extend(events)
        if self._arrived is not None and len(queued) > before:
            self._arrived.set()
            self._arrived = None
        return len(queued) >= self.high_water

    async def room(self) -> None:
        """Wait while ``high_water`` events or more are queued (returns at once if closed)."""
        while len(self._events) >= self.high_water and not self._closed:
            if self._taken is None:
                self._taken = trio.Event()
            await self._taken.wait()
        await trio.lowlevel.checkpoint()

    # -- the consumer --------------------------------------------------------------

    async def take(self) -> list[ProviderEvent]:
        """Everything queued, in order, waiting for at least one event; ``[]`` once closed.

        Cancellation-safe: cancelled while waiting, nothing is taken.
        """
        if self._events:
            # A checkpoint even when events wait, as every trio receive is one.
            await trio.lowlevel.checkpoint()
        while not self._events:
            if self._closed:
                await trio.lowlevel.checkpoint()
                return []
            self._arrived = trio.Event()
            await self._arrived.wait()
        return self.take_nowait()

    def take_nowait(self) -> list[ProviderEvent]:
        """Everything queued now, possibly ``[]``."""
        taken = self._events
        if not taken:
            return []
        self._events = []
        if self._taken is not None:
            self._taken.set()
            self._taken = None
        return taken

    async def __aenter__(self) -> EventQueue:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Like a trio channel's ``async with``: closed on the way out, whatever happened.
        self.close()

    def close(self) -> None:
        """No more events: later puts are dropped; waiters wake. Idempotent."""
        self._closed = True
        if self._arrived is not None:
            self._arrived.set()
            self._arrived = None
        if self._taken is not None:
            self._taken.set()
            self._taken = None


def _dropped(event: ProviderEvent) -> None:
    log.debug("event dropped, the event queue is closed: %s", type(event).__name__)


__all__ = ["EventQueue"]
