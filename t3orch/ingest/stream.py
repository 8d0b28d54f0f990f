"""Ingest streaming: one provider runtime's event queue, into the log, in order.

The adapter puts canonical events on an :class:`~t3orch.ingest.queue.EventQueue`
(the core's port); this service takes them in batches and owns what stands
between a frame's event and its commit:

* **coalescing** of streamed deltas (``coalesce.DeltaCoalescer``), and beside it
  **the live lane** (``live.LiveLane``): the same text published at once to the
  thread's live readers (``t3orch/live.py``), before it is coalesced and committed;
* **the in-flight bound**: mid-turn batches are queued on the writer, not
  awaited, so one transaction carries many sessions' batches; at most
  ``MAX_INFLIGHT_EVENTS`` of this stream's events are uncommitted at once;
* **turn barriers**: events after a turn's end are not bound to it; a
  completed turn's earlier events commit first, then its owner's barrier runs
  (the checkpoint), then the end commits; a runtime's exit ends the turn;
* **subagent barriers**: a subagent's end commits before its owner hears of it,
  and a child that outlives its turn stays bound to that turn until it ends;
* **journal offsets** of a held runtime (``JournalOffset``) commit with the events
  of the frames up to them: the coalescer holds one back while an older delta is
  buffered, and a delivery keeps only its last;
* **lingering**: a mid-turn batch is not queued the moment it is ready. Providers
  send a turn's last frames a few ms apart (Codex: the item's ``item/completed``,
  token usage, rate limits, ``thread/status/changed``, ``turn/completed``; Claude:
  the assistant message, the stream's stop events, ``result``), and each batch queued
  alone was a transaction, whose fsync the turn's end then waited for. Bookkeeping
  (``_QUIET``: offsets, usage, diagnostics) waits for what follows it, at most
  ``QUIET_LINGER_S``; the turn's opening (its start, the user's message) for the
  provider's first output, at most ``OPENING_LINGER_S``; the turn's other items at most
  ``LINGER_S``; anything someone waits for (a request, a session's refs, an end) goes
  at once, with what waited before it.

The owner of the process (the supervisor) learns what happened through
:class:`StreamOwner`, which it implements; the stream never reads what the
owner does with it. Events go down only: queue → this → ``ingest_queued``
(translate) → writer → store.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import attrs
import msgspec
import trio

from t3orch import timeline
from t3orch.domain.turn_items import Subagent, UserMessage
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.coalesce import DEFAULT_WINDOW_S, DeltaCoalescer
from t3orch.ingest.live import LiveLane
from t3orch.ingest.queue import EventQueue
from t3orch.live import LiveHub
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    JournalOffset,
    PlanUpdated,
    ProviderEvent,
    RequestOpened,
    RuntimeExited,
    SubagentEnded,
    TurnCompleted,
    TurnStarted,
    UsageUpdated,
)
from t3orch.store.inflight import MAX_INFLIGHT_EVENTS, InflightWindow
from t3orch.store.interface import Decide
from t3orch.store.writer import Ticket

#: The event queue's bound: the provider is not read while this many events wait, so
#: the stream takes at most this many (plus one frame's) per submission.
MAX_INGEST_BATCH = 1024

#: A mid-turn batch of the turn's content (items, text, plan) waits this long for what
#: follows (frames a provider writes together arrive a read or two apart): a couple of
#: ms on what a subscriber sees committed, one transaction where there were several.
LINGER_S = 0.002
#: A batch of bookkeeping alone (journal offsets, usage, diagnostics: nothing anyone
#: waits for) waits this long at most for what follows, mostly the turn's end or the
#: next item; between turns it commits on its own after this.
QUIET_LINGER_S = 0.1
#: A turn's opening (its start, the user's message) waits for the provider's first
#: output, up to this: the provider is building its model request then. The text
#: coalescer's window: what is committed lags what happened by no more than text does.
OPENING_LINGER_S = DEFAULT_WINDOW_S
#: What may wait for what follows it, and how long; any other event is queued at
#: once, with everything waiting before it.
_QUIET = (JournalOffset, UsageUpdated, Diagnostic)
_LINGERING = (ItemStarted, ItemDelta, ItemCompleted, PlanUpdated, TurnStarted)


class Ingest(Protocol):
    """Where batches go (``CoreService.ingest_queued``), and live text (its ``live``)."""

    @property
    def live(self) -> LiveHub: ...

    async def ingest_queued(
        self, binding: SessionBinding, events: Sequence[ProviderEvent]
    ) -> Ticket: ...

    async def end_turn_queued(
        self,
        binding: SessionBinding,
        events: Sequence[ProviderEvent],
        checkpoint: Decide | None,
        items: Sequence[ProviderEvent] = (),
    ) -> Ticket: ...


class StreamOwner(Protocol):
    """What the process's owner hears from the stream, in the events' order.

    Called on the stream's task; ``turn_barrier`` and ``subagent_ended`` are the
    barriers (awaited before the stream goes on); the rest are notices.
    """

    def observed(self, event: ProviderEvent) -> None:
        """Each event as it is delivered (the daemon log's lifecycle lines)."""

    def working(self) -> None:
        """Events of a turn (or of a child outliving its turn) were queued."""

    def turn_closing(self) -> None:
        """A turn's end is about to commit: whoever sees it ended sees the owner idle."""

    def interrupted_by_us(self) -> str | None:
        """Why the owner interrupted the active turn itself (its runtime stopping under
        it), if it did: an interrupted end that gives no reason of its own gets this one,
        or the run would read "interrupted" with nobody having asked."""

    async def turn_barrier(
        self, run_id: str, committed: Callable[[], Awaitable[None]]
    ) -> Decide | None:
        """A completed turn's events are queued, its end not yet: the checkpoint.

        ``committed`` waits until those events are committed (before the owner reads
        what they made); the decide returned (the checkpoint's record) commits in one
        transaction with the turn's end, just before it.
        """

    async def subagent_ended(self, run_id: str, child_native_thread_ref: str | None) -> None:
        """A subagent's end is committed (its checkpoint)."""

    async def exiting(self, event: RuntimeExited) -> None:
        """The runtime's exit is about to commit (a crashed turn's recovery attempt)."""

    def turn_ended(self, turn: TurnBinding | None, event: TurnCompleted) -> None:
        """A turn's end is committed."""

    def runtime_exited(self, event: RuntimeExited, turn: TurnBinding | None) -> None:
        """The runtime's exit is committed; ``turn`` is the one it ended."""


async def _nothing_to_wait() -> None:
    """The turn's events hold nothing the owner reads: no wait for their commit."""


def _offset_after(events: list[ProviderEvent], end: int) -> tuple[int, JournalOffset | None]:
    """The last journal offset among those right after ``events[end]`` (no other event
    between), and the index of the last of them."""
    covering: JournalOffset | None = None
    i = end + 1
    while i < len(events) and isinstance(next_event := events[i], JournalOffset):
        covering = next_event
        i += 1
    return i - 1, covering


def _or_never(deadline: float | None) -> float:
    return math.inf if deadline is None else deadline


def _opening(event: ProviderEvent) -> bool:
    """A turn's opening: its start and the user's message echoed back."""
    if isinstance(event, TurnStarted):
        return True
    return isinstance(event, ItemStarted | ItemCompleted) and isinstance(event.content, UserMessage)


def _linger_until(events: Sequence[ProviderEvent], now: float, deadline: float) -> float:
    """How long ``events`` (arrived ``now``, after others due at ``deadline``) may wait
    for what follows; ``-inf``: not at all."""
    for event in events:
        if isinstance(event, _QUIET):
            deadline = min(deadline, now + QUIET_LINGER_S)
        elif _opening(event):
            # What waited before it (bookkeeping: the session's status, a warning) waits
            # with it: the opening is what it was waiting for, and it waits itself.
            deadline = max(deadline, now + OPENING_LINGER_S)
        elif isinstance(event, _LINGERING):
            deadline = min(deadline, now + LINGER_S)
        else:
            return -math.inf
    return deadline


@attrs.define
class _Held:
    """A mid-turn batch waiting for what follows (see the module docstring)."""

    binding: SessionBinding
    #: Delivered (the owner has observed them), in order; no journal offset.
    events: list[ProviderEvent]
    #: The last journal offset among them: it goes last.
    offset: JournalOffset | None
    #: When it is queued, whatever follows.
    deadline: float


def subagent_end(event: ProviderEvent) -> tuple[str | None] | None:
    """``(child native thread ref,)`` when ``event`` says a subagent finished, else None.

    A subagent item completing (Claude's Task result; Codex's spawn call), or a
    Codex child thread ending a turn (its ``subagent_turn_completed`` diagnostic).
    """
    if isinstance(event, ItemCompleted) and isinstance(event.content, Subagent):
        return (event.content.child_native_thread_ref,)
    if isinstance(event, Diagnostic) and event.code == "subagent_turn_completed":
        ref = event.detail.get("threadId")
        return (ref if isinstance(ref, str) else None,)
    return None


#: Events only a provider working on a turn sends: its input reached it.
_TURN_WORK = (TurnStarted, ItemStarted, ItemDelta, ItemCompleted, RequestOpened, TurnCompleted)


@attrs.define(eq=False)
class IngestStream:
    """One runtime's stream (see the module docstring). ``binding`` is replaced when
    the owner's provider thread is (a resume fallback); ``active_turn`` is set by
    :meth:`turn_started` and cleared when the turn's end is delivered."""

    ingest: Ingest
    binding: SessionBinding
    owner: StreamOwner
    #: The owner has a turn barrier (a checkpointer): a completed turn's events
    #: commit before its end, with the barrier between.
    turn_barrier: bool = False
    #: The owner hears of subagents' ends (their checkpoints): each commits first.
    subagent_barrier: bool = False
    active_turn: TurnBinding | None = None
    #: When the last batch of events arrived (trio time).
    last_event_at: float = -math.inf
    #: Set when the active turn ends (or the runtime does); replaced per turn.
    turn_done: trio.Event = attrs.field(factory=trio.Event)
    #: Set once the queue is drained after its close and everything committed.
    done: trio.Event = attrs.field(factory=trio.Event)
    #: Subagent item ref -> the ended turn it belongs to, while the provider still
    #: runs its child (``TurnCompleted.continuing``) until its ``SubagentEnded``.
    lingering: dict[str, TurnBinding] = attrs.field(factory=dict)
    #: Child native thread ref -> its run, for the checkpoint after a lingering end.
    _late_children: dict[str, str] = attrs.field(factory=dict)
    _inflight: InflightWindow = attrs.field(factory=lambda: InflightWindow(MAX_INFLIGHT_EVENTS))
    #: The active turn has had a subagent item (so a checkpoint scope of its own).
    _subagents: bool = False
    #: A mid-turn batch not queued yet, waiting for what follows.
    _held: _Held | None = None
    #: The active turn's input is not acknowledged yet (:meth:`turn_started`).
    _unsent: bool = False

    def turn_started(self, turn: TurnBinding, *, sent: bool = True) -> None:
        """``turn`` is the active one. ``sent=False``: its input is being sent, and
        until :meth:`turn_sent` an end of the turn (an exit, a refused start) says the
        provider may never have had it (``SessionBinding.turn_unsent``)."""
        self.active_turn = turn
        self.turn_done = trio.Event()
        self._subagents = False
        self._unsent = not sent

    def turn_sent(self) -> None:
        """The provider acknowledged the active turn's input."""
        self._unsent = False

    async def run(
        self, queue: EventQueue, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Take the queue's events until it is closed and drained; commit them all."""
        coalescer = DeltaCoalescer()
        lane = LiveLane(self.ingest.live)
        task_status.started()
        try:
            async with queue:
                while True:
                    deadline = min(
                        _or_never(coalescer.next_deadline()),
                        _or_never(lane.deadline()),
                        self._held.deadline if self._held is not None else math.inf,
                    )
                    batch: list[ProviderEvent] = []
                    with trio.move_on_at(deadline):
                        # Everything queued since the last take, in one call.
                        batch = await queue.take()
                        if not batch:
                            break  # closed and drained
                    now = trio.current_time()
                    if batch:
                        timeline.stamp("stream.take")
                        self.last_event_at = now
                    for event in batch:
                        lane.see(event, self.binding.thread_id, self.active_turn)
                        if isinstance(event, _TURN_WORK):
                            self._unsent = False  # the provider works on it: it has it
                    # Live text first: it is read before any of it can be committed.
                    lane.flush(now)
                    ready: list[ProviderEvent] = []
                    for event in batch:
                        ready.extend(coalescer.push(event, now))
                    ready.extend(coalescer.flush_due(now))
                    await self._deliver(ready)
                    if self._held is not None and self._held.deadline <= trio.current_time():
                        await self._queue_held()
                await self._deliver(coalescer.flush_all())
                await self._queue_held()
                await self._inflight.drain()
        finally:
            self.done.set()

    async def _deliver(self, events: list[ProviderEvent]) -> None:
        if not events:
            return
        owner = self.owner
        held = self._held
        if held is not None and held.binding != self._bound():
            await self._queue_held()  # bound otherwise (a turn began): not to be joined
            held = None
        self._held = None
        # Split at turn ends so events after a turn are not bound to it. What waited
        # comes first: it commits with these (a turn's end, its last items).
        chunk: list[ProviderEvent] = held.events if held is not None else []
        # A held runtime's journal offset: only the last one counts, and it may move
        # later (it says the events before it are queued), never earlier.
        offset: JournalOffset | None = held.offset if held is not None else None
        # Of ``chunk``, the events delivered now (from ``fresh``), and when what waited
        # before them is due.
        fresh = len(chunk)
        due = held.deadline if held is not None else math.inf
        skip = -1
        for i, event in enumerate(events):
            if type(event) is JournalOffset:
                if i > skip:
                    offset = event
                continue
            if (
                type(event) is TurnCompleted
                and event.status == "interrupted"
                and event.error is None
                and (why := owner.interrupted_by_us()) is not None
            ):
                event = msgspec.structs.replace(event, error=why)
            chunk.append(event)
            owner.observed(event)
            if isinstance(event, (ItemStarted, ItemCompleted)) and isinstance(
                event.content, Subagent
            ):
                self._subagents = True
            if isinstance(event, RuntimeExited):
                await owner.exiting(event)
            ended = subagent_end(event)
            run_id = self._subagent_run(ended)
            if ended is not None and self.subagent_barrier and run_id is not None:
                # Its end committed first, so the checkpoint finds the scope ended.
                await self.commit(chunk)
                chunk, fresh, due = [], 0, math.inf
                await owner.subagent_ended(run_id, ended[0])
                continue
            if isinstance(event, SubagentEnded) and event.native_item_ref in self.lingering:
                # Committed while still bound to its ended turn, then forgotten.
                await self.commit(chunk)
                chunk, fresh, due = [], 0, math.inf
                done = self.lingering.pop(event.native_item_ref)
                if event.child_native_thread_ref is not None:
                    self._late_children[event.child_native_thread_ref] = done.run_id
                continue
            checkpoint: Decide | None = None
            items: list[ProviderEvent] = []
            if isinstance(event, TurnCompleted) and event.status == "completed":
                timeline.stamp("barrier.start")
                checkpoint, items = await self._completion_barrier(chunk)
                timeline.stamp("barrier.end")
            if isinstance(event, (TurnCompleted, RuntimeExited)):
                ending = self.active_turn
                if isinstance(event, TurnCompleted):
                    owner.turn_closing()
                # The offset read right after the end covers it (and nothing later):
                # it commits in the same transaction, not in the next one.
                # So does one read before it: what it covers is in this commit or before.
                skip, covering = _offset_after(events, i)
                if (covering := covering or offset) is not None:
                    offset = None
                    chunk.append(covering)
                await self.commit(chunk, ends_turn=True, checkpoint=checkpoint, items=items)
                chunk, fresh, due = [], 0, math.inf
                if isinstance(event, TurnCompleted):
                    if ending is not None and event.status == "completed":
                        for ref in event.continuing:
                            self.lingering[ref] = ending
                    self.active_turn = None
                    self.turn_done.set()
                    owner.turn_ended(ending, event)
                else:
                    # The exit settled every child still running (release_session).
                    self.lingering.clear()
                    self._late_children.clear()
                    self.active_turn = None
                    self.turn_done.set()
                    owner.runtime_exited(event, ending)
        if not chunk and offset is None:
            return
        now = trio.current_time()
        due = _linger_until(chunk[fresh:], now, due)
        if offset is not None and fresh == len(chunk):
            due = min(due, now + QUIET_LINGER_S)  # an offset alone (frames of no event)
        self._held = _Held(self._bound(), chunk, offset, due)
        if due <= now or len(chunk) >= MAX_INGEST_BATCH:
            await self._queue_held()
        # Idleness counts from the end of the last turn: frames between turns
        # (status, usage) are not work; a child outliving its parent's turn is.
        if self.active_turn is not None or self.lingering:
            owner.working()

    async def _queue_held(self) -> None:
        """Queue the batch waiting for what follows, if any.

        Mid-turn events are queued, not awaited: the writer merges the queued batches
        of every session into few transactions (one fsync each).
        """
        held, self._held = self._held, None
        if held is None:
            return
        events = held.events
        if held.offset is not None:
            events.append(held.offset)
        ticket = await self.ingest.ingest_queued(held.binding, events)
        await self._inflight.add(ticket, len(events))

    async def _completion_barrier(
        self, chunk: list[ProviderEvent]
    ) -> tuple[Decide | None, list[ProviderEvent]]:
        """Text flushed and items final, then the owner's barrier, then the end.

        The barrier runs while the run is still open (the owner captures the work
        tree); the caller then commits the turn's last events, the checkpoint's record
        and the TurnCompleted in one transaction, in that order: items, checkpoint,
        end, one commit on the turn's critical path. Returns the record and those
        last events (``chunk`` keeps the TurnCompleted).

        A turn with a subagent item has scopes of its own the owner reads from the
        log: its events are queued first, and the owner waits for their commit.
        """
        turn = self.active_turn
        if not self.turn_barrier or turn is None:
            return None, []
        before, last = chunk[:-1], chunk[-1]
        chunk[:] = [last]
        if not self._subagents:
            return await self.owner.turn_barrier(turn.run_id, _nothing_to_wait), before
        if before:
            ticket = await self.ingest.ingest_queued(self._bound(), before)
            await self._inflight.add(ticket, len(before))
        # The turn's earlier batches were queued and not awaited (mid-turn batches never
        # are): the owner reads its scopes only once all of them have committed.
        return await self.owner.turn_barrier(turn.run_id, self._inflight.drain), []

    async def commit(
        self,
        events: list[ProviderEvent],
        *,
        ends_turn: bool = False,
        checkpoint: Decide | None = None,
        items: Sequence[ProviderEvent] = (),
    ) -> None:
        """Commit ``events`` after everything queued before them; wait for it.

        ``ends_turn``: the events end the active turn. It stops counting as active
        once they are queued, before the commit: whoever sees the ended run must
        not find the stream still claiming the turn. ``checkpoint``: the turn's
        checkpoint record, and ``items`` its last events, committed with them,
        before them (items, then the record).
        """
        await self._queue_held()  # first: it came before these
        if ends_turn:
            ticket = await self.ingest.end_turn_queued(self._bound(), events, checkpoint, items)
        else:
            ticket = await self.ingest.ingest_queued(self._bound(), events)
        if ends_turn:
            self.active_turn = None
        await self._inflight.drain()
        await ticket.outcome()
        if ends_turn:
            timeline.stamp("end.committed")

    async def end_unstarted_turn(self, turn: TurnBinding, event: TurnCompleted) -> None:
        """A turn whose input never reached the provider ends here, bound to it by
        name (an exit committed meanwhile may have cleared the active turn)."""
        await self._queue_held()
        ticket = await self.ingest.ingest_queued(
            attrs.evolve(self.binding, turn=turn, lingering=(), turn_unsent=True), [event]
        )
        await self._inflight.drain()
        await ticket.outcome()
        # The stream never sees this turn end: it ended here.
        self.active_turn = None
        self.turn_done.set()

    def _bound(self) -> SessionBinding:
        """The binding for the next events: the active turn, and the ended turns whose
        children still run (their events are bound to the turn that spawned them)."""
        lingering = tuple(dict.fromkeys(self.lingering.values()))
        unsent = self._unsent and self.active_turn is not None
        return attrs.evolve(
            self.binding, turn=self.active_turn, lingering=lingering, turn_unsent=unsent
        )

    def _subagent_run(self, ended: tuple[str | None] | None) -> str | None:
        """The run whose subagent just ended (one that outlived its turn: that turn's)."""
        if ended is None:
            return None
        late = self._late_children.pop(ended[0], None) if ended[0] is not None else None
        if late is not None:
            return late
        return None if self.active_turn is None else self.active_turn.run_id
