"""One subscription's stream: snapshot (or replay), then live events, bounded.

The broadcast subscription is opened *before* the snapshot or the replay is
read (see ``server.Connection``), so an event committed in between is both in
the read and in the live buffer; it is sent once because only sequences above
the last one sent go out. When the live buffer overflows (the client reads
slower than events commit) the stream sends one ``resync`` and ends: the client
re-subscribes for a fresh snapshot, and the server never buffers without bound.

Live events usually do not pass through the stream's task at all: while the stream
has caught up and its connection has nothing queued or being written, the broadcast
hands each committed batch to it on the publishing task, and its frames are written
to the socket there (``DirectSend``). Anything queued, a socket that takes only part,
or a stream not caught up sends the batch the ordinary way, through the buffer, so
the order per connection and the slow-subscriber behaviour are those of the buffer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol

import attrs
import msgspec
import trio

from t3orch import timeline
from t3orch.api.frames import event_frame, live_text_frame
from t3orch.api.protocol import notification
from t3orch.api.reads import ApiReader
from t3orch.api.streamed import StreamedItems
from t3orch.api.topics import TopicFilter
from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import EventEnvelope, TurnItemUpserted
from t3orch.live import LiveSubscription
from t3orch.projections.views import ThreadDetail
from t3orch.store.broadcast import Subscription
from t3orch.store.interface import ReadModel

Send = Callable[[bytes], Awaitable[None]]
log = logging.getLogger(__name__)
REPLAY_PAGE = 500


@attrs.define
class StreamPlan:
    subscription: str
    filter: TopicFilter
    live: Subscription
    #: The snapshot's sequence, or the client's ``afterSequence``.
    cursor: int
    #: The read model to send first; ``None`` means replay from ``cursor`` instead.
    snapshot: Any = None
    #: A ``threadDetail`` stream's live text (``liveText`` frames, after the snapshot).
    text: LiveSubscription | None = None

    def close(self) -> None:
        self.live.close()
        if self.text is not None:
            self.text.close()


class DirectSend(Protocol):
    def ready(self) -> bool:
        """Whether frames may be written now: the stream is still wanted, and nothing
        of its connection is queued or being written."""

    def write(self, frames: list[bytes]) -> None:
        """Writes without waiting; a rest the socket did not take goes before
        anything else on the connection."""

    def backlog(self) -> int:
        """Frames of the connection queued and not yet written."""


def _page(after: int, store: ReadModel) -> list[EventEnvelope]:
    return store.read_events(after, REPLAY_PAGE)


async def pump(
    plan: StreamPlan,
    reader: ApiReader,
    send: Send,
    streamed: StreamedItems | None = None,
    direct: DirectSend | None = None,
) -> None:
    """Runs until the client unsubscribes (cancel), the daemon stops, or a resync.

    With ``streamed``, live ``threadDetail`` events may leave out item fields the
    client already holds (see ``_Held``). With ``direct``, live batches may be
    written on the publishing task (see the module's doc).
    """
    cursor = _Cursor(plan.cursor)
    reason = "slow_consumer"
    try:
        try:
            await _stream(plan, reader, send, cursor, streamed, direct)
        except Exception as exc:
            # A failed read (a store error, say) ends this subscription, not the
            # connection: the client re-subscribes, as after any resync.
            log.exception("subscription %s failed", plan.subscription)
            reason = f"server_error: {type(exc).__name__}"
        else:
            if not plan.live.overflowed:
                return  # the broadcast closed: the daemon is stopping
        await send(
            notification(
                "resync",
                {"subscription": plan.subscription, "sequence": cursor.last, "reason": reason},
            )
        )
    finally:
        plan.close()


@attrs.define
class _Cursor:
    #: The last sequence delivered (or skipped as not concerning the topic).
    last: int


class _Item(msgspec.Struct):
    id: str


_item_id = msgspec.json.Decoder(_Item)


class _Held:
    """The turn items this subscription's client holds: those of its snapshot, and
    those it was sent an upsert of since. Only for them can an upsert leave out a
    field the client already has; an item the client never got is sent whole."""

    def __init__(self, plan: StreamPlan) -> None:
        self.ids: set[str] = set()
        if isinstance(plan.snapshot, ThreadDetail):
            self.ids = {_item_id.decode(raw).id for raw in plan.snapshot.turn_items}

    def note(self, env: EventEnvelope) -> None:
        payload = env.payload
        if isinstance(payload, TurnItemUpserted):
            if payload.item.status in TURN_ITEM_TERMINAL:
                # Final: the tracker follows it no more, so it is never elided again.
                self.ids.discard(payload.item.id)
            else:
                self.ids.add(payload.item.id)


async def _stream(
    plan: StreamPlan,
    reader: ApiReader,
    send: Send,
    cursor: _Cursor,
    streamed: StreamedItems | None,
    direct: DirectSend | None,
) -> None:
    sub = plan.subscription
    live = plan.live
    held = _Held(plan) if streamed is not None and plan.filter.topic == "threadDetail" else None
    if plan.snapshot is not None:
        await send(
            notification(
                "snapshot",
                {"subscription": sub, "snapshotSequence": cursor.last, "data": plan.snapshot},
            )
        )
    else:
        # Replay the stored gap page by page (as stored: nothing left out); live
        # events queue meanwhile.
        while not live.overflowed:
            page = await reader.snapshot(partial(_page, cursor.last))
            if not page:
                break
            for env in page:
                if plan.filter.concerns(env):
                    await send(event_frame(sub, env))
                    if held is not None:
                        held.note(env)
                cursor.last = env.sequence
        if live.overflowed:
            return
        await send(notification("synchronized", {"subscription": sub, "sequence": cursor.last}))
    frames = _LiveFrames(plan, cursor, held, streamed)
    if direct is not None:
        live.take_now = partial(_take_now, frames, direct)
    try:
        async with trio.open_nursery() as nursery:
            if plan.text is not None:
                nursery.start_soon(_live_text, plan.text, sub, send, direct)
            while batch := await live.batch():
                for env in batch:
                    if live.overflowed:
                        nursery.cancel_scope.cancel()
                        return
                    frame = frames.of(env)
                    if frame is not None:
                        await send(frame)
            nursery.cancel_scope.cancel()
    finally:
        live.take_now = None


#: Frames a connection may have waiting before live text is dropped instead of sent:
#: a client that is behind gets the committed events first (they carry the same text).
LIVE_BACKLOG = 8


async def _live_text(
    text: LiveSubscription, sub: str, send: Send, direct: DirectSend | None
) -> None:
    """Sends the thread's live text as it comes (best effort, see ``t3orch/live.py``)."""
    while pieces := await text.take():
        if direct is not None and direct.backlog() > LIVE_BACKLOG:
            text.dropped += len(pieces)
            continue
        out = [live_text_frame(sub, piece) for piece in pieces]
        if direct is not None and direct.ready():
            direct.write(out)
            continue
        for frame in out:
            await send(frame)


@attrs.define
class _LiveFrames:
    """One subscription's live frames: what its client has not seen, in order."""

    plan: StreamPlan
    cursor: _Cursor
    held: _Held | None
    streamed: StreamedItems | None

    def of(self, env: EventEnvelope) -> bytes | None:
        """The frame for ``env``, or None when it is not to be sent; moves the cursor."""
        if env.sequence <= self.cursor.last:
            return None  # already in the snapshot or the replay
        self.cursor.last = env.sequence
        if not self.plan.filter.concerns(env):
            return None
        unchanged: tuple[str, ...] = ()
        held = self.held
        if held is not None:
            assert self.streamed is not None
            payload = env.payload
            if isinstance(payload, TurnItemUpserted) and payload.item.id in held.ids:
                unchanged = self.streamed.unchanged(env.event_id)
            held.note(env)
        return event_frame(self.plan.subscription, env, unchanged)


def _take_now(frames: _LiveFrames, direct: DirectSend, events: Sequence[EventEnvelope]) -> bool:
    """Writes a published batch on the publishing task (``Subscription.take_now``), or
    declines it (False: it is buffered and the stream sends it)."""
    if not direct.ready():
        return False
    last = frames.cursor.last
    timeline.stamp("api.publish")
    try:
        out = [frame for env in events if (frame := frames.of(env)) is not None]
    except Exception:
        # Declined as if never seen: the stream meets the error itself and ends with
        # its resync, as it would have without this path.
        frames.cursor.last = last
        return False
    if out:
        direct.write(out)
    return True
