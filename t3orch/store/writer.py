"""The single writer: group commit from a bounded channel, publish after commit.

Callers ``await writer.submit(...)``; the writer task takes whatever has queued
up (at most ``max_batch``), commits it in one transaction on a worker thread,
then publishes the committed envelopes and wakes each caller with its outcome.
Under load batches grow by themselves; when idle a lone submission commits at
once, so latency stays at one commit, well under the 50 ms bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import attrs
import trio

from t3orch.events import EventEnvelope
from t3orch.ids import CommandId
from t3orch.store.broadcast import Broadcast
from t3orch.store.errors import StoreClosed, StoreError
from t3orch.store.interface import Decide, EventStore, Outcome, Submission


class Absorbing(Protocol):
    """A decide that can take in the decide of a submission queued right behind it.

    ``absorb`` returns False to refuse (another kind, another session); when it
    returns True, both are one submission: they commit, or are rejected, together.
    """

    def absorb(self, later: Decide) -> bool: ...


class _Pending:
    """A queued submission and, once committed, its outcome (one per submission)."""

    __slots__ = ("done", "failure", "outcome", "submission", "taken", "ticket")

    def __init__(self, submission: Submission) -> None:
        self.submission = submission
        self.ticket = Ticket(self)
        self.done = trio.Event()
        self.outcome: Outcome | None = None
        self.failure: BaseException | None = None
        #: The writer has taken it into a batch: nothing may join it any more.
        self.taken = False


class Ticket:
    """A queued submission; ``outcome()`` waits for its commit."""

    __slots__ = ("_pending",)

    def __init__(self, pending: _Pending) -> None:
        self._pending = pending

    @property
    def done(self) -> bool:
        return self._pending.done.is_set()

    async def outcome(self) -> Outcome:
        # A streaming producer mostly asks after tickets already committed: no
        # need to pass through the scheduler for those.
        if not self._pending.done.is_set():
            await self._pending.done.wait()
        if self._pending.failure is not None:
            raise self._pending.failure
        assert self._pending.outcome is not None
        return self._pending.outcome


@attrs.define
class WriterStats:
    batches: int = 0
    submissions: int = 0
    events: int = 0
    last_commit_monotonic: float = -math.inf


class EventWriter:
    def __init__(
        self,
        store: EventStore,
        broadcast: Broadcast | None = None,
        *,
        max_batch: int = 256,
        queue_size: int = 1024,
    ) -> None:
        self.store = store
        self.broadcast = broadcast or Broadcast()
        self.stats = WriterStats()
        self._max_batch = max_batch
        self._send, self._receive = trio.open_memory_channel[_Pending](queue_size)
        self._limiter = trio.CapacityLimiter(1)
        self._closed = False
        #: The last submission queued, while nothing is queued behind it.
        self._tail: _Pending | None = None

    async def submit(
        self,
        decide: Decide,
        *,
        command_id: CommandId | None = None,
        command_type: str = "internal",
    ) -> Outcome:
        """Decide and commit; returns once committed (and published)."""
        ticket = await self.enqueue(decide, command_id=command_id, command_type=command_type)
        return await ticket.outcome()

    async def enqueue(
        self,
        decide: Decide,
        *,
        command_id: CommandId | None = None,
        command_type: str = "internal",
    ) -> Ticket:
        """Queue a submission without waiting for its commit (waits only for queue room).

        Submissions commit in the order they were queued. A producer that streams
        (a session's events) queues several and awaits them at its boundaries, so
        one transaction can carry many of them instead of one fsync each.

        A submission without a command id whose decide the last queued one absorbs
        (``Absorbing``: a session's next batch of provider events right behind its
        previous one) joins it instead of queueing: the same ticket, one decision.
        The log's order is unchanged, as nothing was queued between them.
        """
        if self._closed:
            raise StoreClosed("the event writer has stopped")
        tail = self._tail
        if command_id is None and tail is not None and not tail.taken:
            absorb = getattr(tail.submission.decide, "absorb", None)
            if absorb is not None and tail.submission.command_id is None and absorb(decide):
                return tail.ticket
        pending = _Pending(Submission(decide, command_id, command_type))
        try:
            try:
                # Only a full queue is a reason to wait (that is the backpressure);
                # a scheduler pass per queued batch showed up in the store bench.
                self._send.send_nowait(pending)
                self._tail = pending
            except trio.WouldBlock:
                # Senders waiting on a full queue resume in an order this cannot
                # see: nothing joins a submission queued that way.
                self._tail = None
                await self._send.send(pending)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise StoreClosed("the event writer has stopped") from None
        return pending.ticket

    def close(self) -> None:
        """No new submissions; ``run`` commits what is queued, then returns."""
        self._closed = True
        self._send.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                try:
                    first = await self._receive.receive()
                except trio.EndOfChannel:
                    return
                first.taken = True
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        p = self._receive.receive_nowait()
                    except trio.WouldBlock:
                        break
                    p.taken = True
                    batch.append(p)
                await self._commit(batch)
        finally:
            self._closed = True
            self._send.close()
            # Wake anyone still queued: their submissions were never committed.
            while True:
                try:
                    stranded = self._receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                stranded.failure = StoreClosed("the event writer stopped before committing")
                stranded.done.set()

    async def _commit(self, batch: Sequence[_Pending]) -> None:
        try:
            # Shielded: a transaction in flight always finishes and its callers learn
            # the outcome, even when the daemon is shutting down around it.
            with trio.CancelScope(shield=True):
                outcomes = await trio.to_thread.run_sync(
                    self.store.commit_batch, [p.submission for p in batch], limiter=self._limiter
                )
        except StoreError as exc:
            for p in batch:
                p.failure = exc
                p.done.set()
            return
        committed: list[EventEnvelope] = []
        for p, outcome in zip(batch, outcomes, strict=True):
            p.outcome = outcome
            committed.extend(outcome.events)
        self.stats.batches += 1
        self.stats.submissions += len(batch)
        self.stats.events += len(committed)
        self.stats.last_commit_monotonic = trio.current_time()
        if committed:
            self.broadcast.publish(committed)
        for p in batch:
            p.done.set()
