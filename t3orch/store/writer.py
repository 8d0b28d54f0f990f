"""The single writer: group commit from a bounded channel, publish after commit.

Callers ``await writer.submit(...)``; the writer task takes whatever has queued
up (at most ``max_batch``), commits it in one transaction on a worker thread,
then publishes the committed envelopes and wakes each caller with its outcome.
Under load batches grow by themselves; when idle a lone submission commits at
once, so latency stays at one commit, well under the 50 ms bound.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Protocol

import attrs
import trio

from t3orch.events import EventEnvelope
from t3orch.ids import CommandId
from t3orch.store.broadcast import Broadcast
from t3orch.store.errors import StoreClosed, StoreError
from t3orch.store.interface import Decide, EventStore, Outcome, PreparedBatch, Submission


class Absorbing(Protocol):
    """A decide that can take in the decide of a submission queued right behind it.

    ``absorb`` returns False to refuse (another kind, another session); when it
    returns True, both are one submission: they commit, or are rejected, together.
    """

    def absorb(self, later: Decide) -> bool: ...

    @property
    def size(self) -> int:
        """How many events (roughly) it will decide: batches are cut by it."""


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
        max_batch_events: int = 512,
        queue_size: int = 1024,
    ) -> None:
        self.store = store
        self.broadcast = broadcast or Broadcast()
        self.stats = WriterStats()
        self._max_batch = max_batch
        #: A batch is cut once its submissions carry this many events (by their
        #: ``size``, else 1 each): a few hundred events per transaction, and what
        #: queued beyond is decided while the batch is written.
        self._max_batch_events = max_batch_events
        self._send, self._receive = trio.open_memory_channel[_Pending](queue_size)
        self._limiter = trio.CapacityLimiter(1)
        self._decide_limiter = trio.CapacityLimiter(1)
        #: Submissions taken into a batch whose outcome is not known yet.
        self._in_hand: list[_Pending] = []
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
            ahead: _Decided | None = None
            while True:
                if ahead is None:
                    batch = await self._take()
                    if not batch:
                        return
                    if self.store.pipelined and self._receive.statistics().current_buffer_used:
                        # A backlog: decide now, commit while deciding what follows.
                        ahead = await self._decide(batch, None)
                    else:
                        # Nothing behind it: one trip to the thread is the least latency.
                        await self._commit_at_once(batch)
                    continue
                ahead = await self._write(ahead)
        finally:
            self._closed = True
            self._send.close()
            stranded = [p for p in self._in_hand if not p.done.is_set()]
            # Wake anyone still queued: their submissions were never committed.
            while True:
                try:
                    stranded.append(self._receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            for p in stranded:
                p.failure = StoreClosed("the event writer stopped before committing")
                p.done.set()

    async def _take(self) -> list[_Pending]:
        """The next batch, waiting for its first submission; empty once closed."""
        try:
            first = await self._receive.receive()
        except trio.EndOfChannel:
            return []
        return self._take_now(first)

    def _take_now(self, first: _Pending | None = None) -> list[_Pending]:
        batch: list[_Pending] = []
        events = 0
        p = first
        while True:
            if p is not None:
                p.taken = True
                batch.append(p)
                events += getattr(p.submission.decide, "size", 1)
                if len(batch) >= self._max_batch or events >= self._max_batch_events:
                    break
            try:
                p = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        self._in_hand.extend(batch)
        return batch

    async def _commit_at_once(self, batch: list[_Pending]) -> None:
        try:
            # Shielded: see _write.
            with trio.CancelScope(shield=True):
                outcomes = await trio.to_thread.run_sync(
                    self.store.commit_batch, [p.submission for p in batch], limiter=self._limiter
                )
        except StoreError as exc:
            self._fail(batch, exc)
            return
        self._committed(batch, outcomes)

    async def _decide(self, batch: list[_Pending], behind: PreparedBatch | None) -> _Decided | None:
        try:
            # Shielded: see _write.
            with trio.CancelScope(shield=True):
                prepared = await trio.to_thread.run_sync(
                    self.store.prepare_batch,
                    [p.submission for p in batch],
                    behind,
                    limiter=self._decide_limiter,
                )
        except StoreError as exc:
            self._fail(batch, exc)
            return None
        return _Decided(batch, prepared)

    async def _write(self, ahead: _Decided) -> _Decided | None:
        """Write and commit ``ahead``; while it commits, decide what queued behind it
        (returned decided, if anything did)."""
        committed: list[Outcome] | StoreError = []
        decided: PreparedBatch | StoreError | None = None
        # Only the commit overlaps deciding: it runs without the GIL in one call,
        # where writing rows takes the GIL back after every row and would wait behind
        # the deciding thread each time. The two threads hand over between them, not
        # through the event loop: a trip through it cost ~1 ms under load.
        written = threading.Event()
        write_failed = False
        following = self._take_now() if self.store.pipelined else []

        def write_and_commit() -> list[Outcome]:
            nonlocal write_failed
            try:
                self.store.write_batch(ahead.prepared)
            except BaseException:
                write_failed = True
                raise
            finally:
                written.set()
            return self.store.commit_written(ahead.prepared)

        def decide_when_written() -> PreparedBatch | None:
            written.wait()
            if write_failed:
                return None
            return self.store.prepare_batch([p.submission for p in following], ahead.prepared)

        async def commit() -> None:
            nonlocal committed
            try:
                committed = await trio.to_thread.run_sync(write_and_commit, limiter=self._limiter)
            except StoreError as exc:
                committed = exc

        async def decide() -> None:
            nonlocal decided
            try:
                decided = await trio.to_thread.run_sync(
                    decide_when_written, limiter=self._decide_limiter
                )
            except StoreError as exc:
                decided = exc

        # Shielded: a transaction in flight always finishes and its callers learn
        # the outcome, even when the daemon is shutting down around it.
        with trio.CancelScope(shield=True):
            if following:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(commit)
                    nursery.start_soon(decide)
            else:
                await commit()
        if isinstance(committed, StoreError):
            self._fail(ahead.batch, committed)
            # ``following`` was decided on top of a batch that is not in the log.
            return await self._decide(following, None) if following else None
        self._committed(ahead.batch, committed)
        if isinstance(decided, StoreError):
            self._fail(following, decided)
            return None
        return None if decided is None else _Decided(following, decided)

    def _fail(self, batch: Sequence[_Pending], exc: StoreError) -> None:
        self.store.forget_prepared()
        for p in batch:
            p.failure = exc
            p.done.set()
        self._in_hand = [p for p in self._in_hand if not p.done.is_set()]

    def _committed(self, batch: Sequence[_Pending], outcomes: Sequence[Outcome]) -> None:
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
        self._in_hand = [p for p in self._in_hand if not p.done.is_set()]


@attrs.frozen
class _Decided:
    """A batch decided and not yet written."""

    batch: list[_Pending]
    prepared: PreparedBatch
