"""One subscription's stream: snapshot (or replay), then live events, bounded.

The broadcast subscription is opened *before* the snapshot or the replay is
read (see ``server.Connection``), so an event committed in between is both in
the read and in the live buffer; it is sent once because only sequences above
the last one sent go out. When the live buffer overflows (the client reads
slower than events commit) the stream sends one ``resync`` and ends: the client
re-subscribes for a fresh snapshot, and the server never buffers without bound.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs
import msgspec

from t3orch.api.protocol import notification
from t3orch.api.reads import ApiReader
from t3orch.api.topics import TopicFilter
from t3orch.events import EventEnvelope
from t3orch.store.broadcast import Subscription
from t3orch.store.sqlite.backend import SQLiteStore

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


def _page(after: int, store: SQLiteStore) -> list[EventEnvelope]:
    return store.read_events(after, REPLAY_PAGE)


async def pump(plan: StreamPlan, reader: ApiReader, send: Send) -> None:
    """Runs until the client unsubscribes (cancel), the daemon stops, or a resync."""
    cursor = _Cursor(plan.cursor)
    reason = "slow_consumer"
    try:
        try:
            await _stream(plan, reader, send, cursor)
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
        plan.live.close()


@attrs.define
class _Cursor:
    #: The last sequence delivered (or skipped as not concerning the topic).
    last: int


async def _stream(plan: StreamPlan, reader: ApiReader, send: Send, cursor: _Cursor) -> None:
    sub = plan.subscription
    live = plan.live
    if plan.snapshot is not None:
        await send(
            notification(
                "snapshot",
                {"subscription": sub, "snapshotSequence": cursor.last, "data": plan.snapshot},
            )
        )
    else:
        # Replay the stored gap page by page; live events queue meanwhile.
        while not live.overflowed:
            page = await reader.snapshot(partial(_page, cursor.last))
            if not page:
                break
            for env in page:
                if plan.filter.concerns(env):
                    await send(_event(sub, env))
                cursor.last = env.sequence
        if live.overflowed:
            return
        await send(notification("synchronized", {"subscription": sub, "sequence": cursor.last}))
    async for env in live:
        if live.overflowed:
            return
        if env.sequence <= cursor.last:
            continue  # already in the snapshot or the replay
        cursor.last = env.sequence
        if plan.filter.concerns(env):
            await send(_event(sub, env))


#: Encoded envelopes by event id (unique across stores, unlike sequences): fan-out
#: to N subscribers encodes each event once.
_ENCODED: dict[str, msgspec.Raw] = {}
_ENCODED_MAX = 2048


def _encoded(env: EventEnvelope) -> msgspec.Raw:
    raw = _ENCODED.get(env.event_id)
    if raw is None:
        if len(_ENCODED) >= _ENCODED_MAX:
            del _ENCODED[next(iter(_ENCODED))]
        raw = _ENCODED[env.event_id] = msgspec.Raw(msgspec.json.encode(env))
    return raw


def _event(sub: str, env: EventEnvelope) -> bytes:
    return notification(
        "event", {"subscription": sub, "sequence": env.sequence, "event": _encoded(env)}
    )
