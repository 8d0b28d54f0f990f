"""The single writer: group commit on a writer thread, publish after commit.

Callers ``await writer.submit(...)``. The writer thread takes whatever has queued
up (at most ``max_batch`` submissions or ~``max_batch_events`` events) and
has the store decide, write and commit it in one transaction
(``EventStore.commit_batch``), one batch after another, and hands the outcomes to
the event loop, which publishes the committed envelopes and wakes each caller.
Where the store's commit is visible before it is durable (SQLite under ``FULL``:
the writer fsyncs the ``-wal`` itself), a submission queued ``early`` also gets its
outcome once visible (``Ticket.visible``), during the fsync; publishing and every
caller's ``outcome()`` still wait for durable. A failed fsync stops the writer.
Under load batches grow by themselves, and the event loop is never a step
between two batches. When idle a lone submission commits at once, so
latency stays at one commit, well under the 50 ms bound.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

import attrs
import trio

from t3orch import timeline
from t3orch.events import EventEnvelope
from t3orch.ids import CommandId
from t3orch.store.broadcast import Broadcast
from t3orch.store.errors import StoreClosed, StoreError, StoreNotDurable, StoreStalled
from t3orch.store.interface import Decide, EventStore, Outcome, Submission

T = TypeVar("T")

log = logging.getLogger(__name__)

#: A batch the store had no room (or no server) for is tried again this often, until it
#: commits.
FULL_RETRY_S = 1.0

#: At most this many items in one joined pile: a joined submission is decided, and
#: rejected, as a whole, and a session streaming faster than the log keeps several
#: submissions queued instead of one that grows without end.
MAX_PILE = 128


class Pile(Generic[T]):
    """The items a queued submission will decide (a session's provider events), as a
    list that later submissions with the same ``key`` add theirs to until the writer
    takes it: group commit's join is this list growing, under the writer's lock, and
    nothing is called. The decide holds the same list and reads it when it runs."""

    __slots__ = ("items", "key")

    def __init__(self, key: object, items: list[T]) -> None:
        self.key = key
        self.items = items


class _Pending:
    """A queued submission and, once committed, its outcome (one per submission)."""

    __slots__ = (
        "done",
        "failure",
        "outcome",
        "pile",
        "seen",
        "size",
        "submission",
        "taken",
        "ticket",
        "with_next",
    )

    def __init__(
        self,
        submission: Submission,
        size: int,
        pile: Pile[Any] | None,
        with_next: bool = False,
        early: bool = False,
    ) -> None:
        self.submission = submission
        #: Never the last of a batch: the submission queued next commits with it.
        self.with_next = with_next
        #: About how many events it will decide: batches are cut by it.
        self.size = size
        self.pile = pile
        self.ticket = Ticket(self)
        self.done = trio.Event()
        #: Set once its commit is visible (queued ``early``), and at ``done``.
        self.seen = trio.Event() if early else None
        self.outcome: Outcome | None = None
        self.failure: BaseException | None = None
        #: The writer has taken it into a batch: its pile grows no more.
        self.taken = False

    def settle(self) -> None:
        """Its outcome or failure is set: wake every waiter (``visible()`` too)."""
        self.done.set()
        if self.seen is not None:
            self.seen.set()


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

    async def visible(self) -> Outcome:
        """Its outcome once committed and visible, perhaps before it is durable.

        Visible survives a crash of the daemon, not a power loss: act on it only
        where a power loss loses the act too (a turn's ``turn/start``); tell nobody
        before ``outcome()``. Only for a submission queued ``early``.
        """
        p = self._pending
        assert p.seen is not None, "visible() of a submission not queued early"
        await p.seen.wait()
        if p.outcome is None:
            assert p.failure is not None
            raise p.failure
        return p.outcome


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
        #: A batch is cut once its submissions carry this many events (by the
        #: ``size`` each was queued with): a few hundred events per transaction.
        self._max_batch_events = max_batch_events
        #: At most this many submissions queued or in a batch; more wait (backpressure).
        self._queue_size = queue_size
        #: Guards what the threads share: the queue, ``taken``, ``_in_hand``, the flags.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._queue: deque[_Pending] = deque()
        #: The writer thread waits for work (an enqueue must notify it).
        self._idle = False
        #: No more work will come: drain the queue, then stop.
        self._ending = False
        #: Stop after the transaction in flight (cancellation).
        self._stop_now = False
        #: Taken into a batch, outcome not handed back yet (by id, in order).
        self._in_hand: dict[int, _Pending] = {}
        #: Event-loop side: submissions queued or in a batch, and who waits for room.
        self._outstanding = 0
        self._room = trio.lowlevel.ParkingLot()
        self._closed = False
        #: The last submission queued, while nothing is queued behind it.
        self._tail: _Pending | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._handoff: trio.MemorySendChannel[_Handoff | None]
        #: An unexpected exception that stopped the writer thread (``run`` re-raises it).
        self._crash: BaseException | None = None
        #: Why the batch in hand waits (no room, no server), while it does: the writer
        #: thread is alive then, trying it again every ``FULL_RETRY_S``.
        self.stalled: StoreStalled | None = None

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
        size: int = 1,
        pile: Pile[T] | None = None,
        with_next: bool = False,
        early: bool = False,
    ) -> Ticket:
        """Queue a submission without waiting for its commit (waits only for queue room).

        Submissions commit in the order they were queued. A producer that streams
        (a session's events) queues several and awaits them at its boundaries, so
        one transaction can carry many of them instead of one fsync each. ``size``
        is about how many events the decide will make (batches are cut by it).

        A submission with a ``pile`` and no command id joins the last one queued
        when that one has a pile of the same key and the writer has not taken it:
        its items are added to that pile (at most ``MAX_PILE``) and it shares that
        ticket; one decision. A submission costs more than the one delta a
        coalescer flush mostly carries: at throughput (bench/store.py) a session's
        flushes queue back to back. Nothing was queued between them, so the log's
        order is the same.

        ``with_next``: the writer commits this one in the same transaction as the
        next one queued (the caller queues that next, without waiting between):
        e.g. a checkpoint's record and the turn's end, one fsync and no commit in
        which the one is without the other.

        ``early``: the ticket's ``visible()`` answers once the commit is visible,
        before its fsync where the store has one (``EventStore.visible_first``).
        """
        if self._closed:
            raise StoreClosed("the event writer has stopped")
        submission = Submission(decide, command_id, command_type)
        with self._lock:
            tail = self._tail
            if (
                pile is not None
                and command_id is None
                and tail is not None
                and not with_next
                and not early
            ):
                into = tail.pile
                if (
                    into is not None
                    and not tail.taken
                    and tail.submission.command_id is None
                    and not tail.with_next
                    and (into.key is pile.key or into.key == pile.key)
                    and len(into.items) + len(pile.items) <= MAX_PILE
                ):
                    into.items.extend(pile.items)
                    tail.size += size
                    return tail.ticket
            # Only a full queue is a reason to wait (that is the backpressure); a
            # scheduler pass per queued batch showed up in the store bench.
            if self._outstanding < self._queue_size:
                return self._put(submission, size, pile, with_next, early).ticket
            self._tail = None
        while self._outstanding >= self._queue_size:
            await self._room.park()
            if self._closed:
                raise StoreClosed("the event writer has stopped")
        with self._lock:
            return self._put(submission, size, pile, with_next, early).ticket

    def _put(
        self,
        submission: Submission,
        size: int,
        pile: Pile[Any] | None,
        with_next: bool,
        early: bool,
    ) -> _Pending:
        """Queue ``submission`` (the lock held, room checked)."""
        pending = _Pending(submission, size, pile, with_next, early)
        self._queue.append(pending)
        self._tail = pending
        self._outstanding += 1
        if self._idle and not with_next:
            # Idle, the writer holds at most a chain waiting for its end: one more link
            # is no batch either (waking it would only cost the event loop the GIL).
            self._work.notify()
        return pending

    def close(self) -> None:
        """No new submissions; ``run`` commits what is queued, then returns."""
        self._closed = True
        with self._lock:
            self._ending = True
            self._work.notify()
        self._room.unpark_all()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        token = self._token = trio.lowlevel.current_trio_token()
        # The writer thread's hand-offs, delivered by this task in commit order (a
        # task, not the callback itself: publishing writes to subscribers' sockets).
        # None: the thread has ended, after its last hand-off.
        self._handoff, handoffs = trio.open_memory_channel[_Handoff | None](math.inf)
        ended = False

        def thread_ended(_: object) -> None:
            token.run_sync_soon(self._handoff.send_nowait, None)

        trio.lowlevel.start_thread_soon(self._serve, thread_ended, name="t3orch event writer")
        task_status.started()
        try:
            while (handoff := await handoffs.receive()) is not None:
                self._deliver(*handoff)
            ended = True
        finally:
            self._closed = True
            with self._lock:
                # Cancelled: the transaction in flight finishes (its callers learn the
                # outcome), nothing more starts. After close() the queue drained already.
                self._ending = self._stop_now = True
                self._work.notify()
            # The thread always ends before this does: it owns the connection. Every
            # batch it committed is delivered.
            with trio.CancelScope(shield=True):
                while not ended:
                    handoff = await handoffs.receive()
                    if handoff is None:
                        ended = True
                    else:
                        self._deliver(*handoff)
            self._room.unpark_all()
            # Wake anyone still queued or decided: their submissions were never committed.
            stranded = [*self._in_hand.values(), *self._queue]
            self._in_hand.clear()
            self._queue.clear()
            for p in stranded:
                if not p.done.is_set():
                    p.failure = StoreClosed("the event writer stopped before committing")
                    p.settle()
        if self._crash is not None:
            raise self._crash

    # -- the writer thread ---------------------------------------------------------

    def _serve(self) -> None:
        """Commit what is queued, a batch at a time in queue order, until stopped."""
        try:
            visible_first = self.store.visible_first
            while (batch := self._take_batch()) is not None:
                timeline.stamp("writer.take")
                batch, outcomes = self._commit(batch)
                if not batch:
                    continue
                timeline.stamp("writer.committed")
                if visible_first and not isinstance(outcomes, StoreError):
                    if any(p.seen is not None for p in batch):
                        assert self._token is not None
                        self._token.run_sync_soon(self._visible, batch, outcomes)
                    try:
                        self.store.make_durable()
                    except StoreNotDurable as exc:
                        # Nobody is told it committed, and the writer stops: the
                        # daemon fails, and its restart reads what the disk kept.
                        self._hand_back(batch, exc)
                        raise
                    timeline.stamp("writer.durable")
                self._hand_back(batch, outcomes)
        except BaseException as exc:  # a bug, or a failed fsync: stop; ``run`` raises it
            self._crash = exc

    def _commit(self, batch: list[_Pending]) -> tuple[list[_Pending], list[Outcome] | StoreError]:
        """Commit ``batch``: its outcomes, or the store's error for all of it.

        A stalled store (full: the disk, or the database's size limit; unavailable: its
        server down or restarting, the batch not sent) refuses the commands in
        the batch and those queued while it waits (a command id: their callers are
        told nothing was written), and keeps the rest — a session's provider events,
        the supervisor's bookkeeping, which no caller can take back —, trying them
        again every ``FULL_RETRY_S`` until they commit: a full disk pauses the log (its
        producers wait for room, a provider for its pipe) instead of failing every
        session, and the daemon with them. The store rolled the failed transaction
        back (or never began it), so each try decides afresh; nothing queued after the
        batch commits before it. Only stopping gives up on it.
        """
        full_since: float | None = None
        try:
            while True:
                try:
                    outcomes = self.store.commit_visible([p.submission for p in batch])
                except StoreStalled as exc:
                    batch = self._refuse_commands(batch, exc)
                    if not batch or not self._room_awaited(exc, len(batch), full_since is None):
                        return batch, exc
                    if full_since is None:
                        full_since = time.monotonic()
                    self.stalled = exc
                    continue
                except StoreError as exc:
                    return batch, exc
                if self.stalled is not None and full_since is not None:
                    waited = time.monotonic() - full_since
                    log.warning("%s: committed after %.0f s", self.stalled.resumed, waited)
                return batch, outcomes
        finally:
            self.stalled = None

    def _refuse_commands(self, batch: list[_Pending], exc: StoreStalled) -> list[_Pending]:
        """Hand back, failed, each ``with_next`` chain of ``batch`` holding a command;
        the rest, in order."""
        kept, refused = _split_commands(batch)
        if refused:
            self._hand_back(refused, exc)
        return kept

    def _room_awaited(self, exc: StoreStalled, waiting: int, first: bool) -> bool:
        """Wait ``FULL_RETRY_S``, refusing the commands queued meanwhile (False at once
        once stopping: the batch fails)."""
        if first:
            log.warning(
                "%s: %d submissions wait for room, tried again every %g s (commands are "
                "refused meanwhile)",
                exc,
                waiting,
                FULL_RETRY_S,
            )
        with self._lock:
            if not (self._ending or self._stop_now):
                self._work.wait(FULL_RETRY_S)
            refused = self._take_queued_commands()
            stopping = self._ending or self._stop_now
        if refused:
            self._hand_back(refused, exc)
        return not stopping

    def _take_queued_commands(self) -> list[_Pending]:
        """Take out of the queue (the lock held) each whole ``with_next`` chain that
        holds a command: never committed, so the log's order is what it would be."""
        kept, taken = _split_commands(self._queue)
        if taken:
            self._queue = deque(kept)
            for p in taken:
                p.taken = True
                self._in_hand[id(p)] = p
            if self._tail is not None and self._tail.taken:
                self._tail = None
        return taken

    def _take_batch(self) -> list[_Pending] | None:
        """The next batch; None once stopping, or once closed and drained.

        A batch never ends with a submission queued ``with_next``: a chain of them
        whose last one is not queued yet waits for it (the caller queues it next).
        """
        with self._work:
            queue = self._queue
            while (not queue or self._waits_for_next(queue)) and not self._ending:
                self._idle = True
                self._work.wait()
            self._idle = False
            if self._stop_now or not queue:
                return None
            batch: list[_Pending] = []
            events = 0
            while queue and (
                (len(batch) < self._max_batch and events < self._max_batch_events)
                or batch[-1].with_next
            ):
                p = queue.popleft()
                p.taken = True
                batch.append(p)
                self._in_hand[id(p)] = p
                events += p.size
            while batch[-1].with_next and not self._ending:
                # The chain's end is not queued: the chain goes in the next batch.
                p = batch.pop()
                p.taken = False
                del self._in_hand[id(p)]
                queue.appendleft(p)
            return batch

    @staticmethod
    def _waits_for_next(queue: deque[_Pending]) -> bool:
        """Everything queued is one chain of ``with_next`` still waiting for its end."""
        return queue[-1].with_next and all(p.with_next for p in queue)

    def _hand_back(self, batch: list[_Pending], outcomes: list[Outcome] | StoreError) -> None:
        """Give the event loop a batch's outcomes (or its failure)."""
        with self._lock:
            for p in batch:
                del self._in_hand[id(p)]
        assert self._token is not None
        self._token.run_sync_soon(self._handoff.send_nowait, (batch, outcomes))

    # -- back on the event loop ----------------------------------------------------

    @staticmethod
    def _visible(batch: list[_Pending], outcomes: list[Outcome]) -> None:
        """A batch is visible, not yet durable: wake those queued ``early``."""
        for p, outcome in zip(batch, outcomes, strict=True):
            if p.seen is not None:
                p.outcome = outcome
                p.seen.set()

    def _deliver(self, batch: list[_Pending], outcomes: list[Outcome] | StoreError) -> None:
        timeline.stamp("writer.delivered")
        if isinstance(outcomes, StoreError):
            self._failed(batch, outcomes)
        else:
            self._committed(batch, outcomes)

    def _failed(self, batch: Sequence[_Pending], exc: StoreError) -> None:
        for p in batch:
            p.failure = exc
            p.settle()
        self._release(len(batch))

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
            p.settle()
        self._release(len(batch))

    def _release(self, count: int) -> None:
        self._outstanding -= count
        if self._room:
            self._room.unpark_all()


def _split_commands(pendings: Iterable[_Pending]) -> tuple[list[_Pending], list[_Pending]]:
    """(the rest, the chains holding a command), each in order: a ``with_next`` chain
    goes whole one way; one whose end is not there yet is kept as it is."""
    kept: list[_Pending] = []
    commands: list[_Pending] = []
    chain: list[_Pending] = []
    for p in pendings:
        chain.append(p)
        if not p.with_next:
            commanded = any(q.submission.command_id is not None for q in chain)
            (commands if commanded else kept).extend(chain)
            chain = []
    kept.extend(chain)
    return kept, commands


_Handoff = tuple[list["_Pending"], list[Outcome] | StoreError]
