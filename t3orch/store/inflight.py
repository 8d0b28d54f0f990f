"""A streaming producer's queued, uncommitted submissions, bounded by their events.

A runtime's ingest stream (``ingest/stream.py``) queues its batches
(``EventWriter.enqueue``) instead of awaiting each commit, so one transaction
carries many batches. Batches queued back to back
join one submission and share its ticket; counting tickets would then count
batches, and a session would stop after a few dozen events although only one
submission is queued. The window counts events: a producer waits once more than
``limit`` of its events are uncommitted (that is its backpressure; the writer's
queue bounds all producers together).
"""

from __future__ import annotations

from collections import deque

from t3orch.store.writer import Ticket

#: A session's bound on its uncommitted events: room for a batch being written, one
#: being decided and one queued (a transaction holds a few hundred).
MAX_INFLIGHT_EVENTS = 1024


class InflightWindow:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._tickets: deque[Ticket] = deque()
        self._counts: deque[int] = deque()
        self._events = 0

    def __len__(self) -> int:
        """Distinct submissions not yet collected."""
        return len(self._tickets)

    @property
    def events(self) -> int:
        return self._events

    async def add(self, ticket: Ticket, events: int) -> None:
        """Track ``ticket`` (carrying ``events`` more events); wait while over the limit.

        Committed tickets at the head are collected on the way, so a failed commit
        surfaces at the producer's next batch, not at its turn's end.
        """
        if self._tickets and self._tickets[-1] is ticket:
            self._counts[-1] += events
        else:
            self._tickets.append(ticket)
            self._counts.append(events)
        self._events += events
        while self._tickets and (self._events > self._limit or self._tickets[0].done):
            await self._pop()

    async def drain(self) -> None:
        """Wait for every tracked submission's commit (raises the first failure)."""
        while self._tickets:
            await self._pop()

    async def _pop(self) -> None:
        ticket = self._tickets.popleft()
        self._events -= self._counts.popleft()
        await ticket.outcome()
