"""Reading an :class:`~t3orch.ingest.queue.EventQueue` one event at a time, as tests do."""

from __future__ import annotations

from collections import deque

import trio

from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import ProviderEvent


class QueuedEvents:
    """The consumer of a runtime's queue; ``seen`` holds every event handed out so far."""

    def __init__(self, queue: EventQueue | None = None, wait_s: float = 5.0) -> None:
        self.queue = queue if queue is not None else EventQueue()
        self.wait_s = wait_s
        self.seen: list[ProviderEvent] = []
        self._taken: deque[ProviderEvent] = deque()

    async def next(self) -> ProviderEvent:
        """The next event (bounded wait); EndOfChannel once the queue is closed and empty."""
        with trio.fail_after(self.wait_s):
            while not self._taken:
                batch = await self.queue.take()
                if not batch:
                    raise trio.EndOfChannel
                self._taken.extend(batch)
        event = self._taken.popleft()
        self.seen.append(event)
        return event

    def drain(self) -> list[ProviderEvent]:
        """Everything queued now joins ``seen``; returns ``seen``."""
        self._taken.extend(self.queue.take_nowait())
        self.seen.extend(self._taken)
        self._taken.clear()
        return self.seen
