"""Event frames, encoded once and shared by every subscriber that gets the same bytes.

Fan-out sends each committed event to every subscription. A frame differs between
subscribers only by the subscription id, and ids are counted per connection, so
most clients' first subscription is ``s1``: the whole frame is cached by
(subscription id, event, elided fields) and fifty subscribers share one bytes
object. The envelope's JSON is cached too, for the other ids. Both caches are
bounded by bytes, not entries: one completed item can carry hundreds of KB.
"""

from __future__ import annotations

from typing import Any

import msgspec

from t3orch.api.protocol import notification
from t3orch.events import EventEnvelope
from t3orch.live import LiveText


class ByteBoundedCache:
    """Insertion-ordered; the oldest entries go once the values exceed ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[Any, bytes] = {}
        self._bytes = 0

    def get(self, key: Any) -> bytes | None:
        return self._entries.get(key)

    def put(self, key: Any, value: bytes) -> bytes:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= len(old)
        self._entries[key] = value
        self._bytes += len(value)
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            first = next(iter(self._entries))
            self._bytes -= len(self._entries.pop(first))
        return value

    def __len__(self) -> int:
        return len(self._entries)


_envelopes = ByteBoundedCache(16 * 1024 * 1024)
_frames = ByteBoundedCache(16 * 1024 * 1024)
_encoder = msgspec.json.Encoder()


def envelope_json(env: EventEnvelope, unchanged: tuple[str, ...] = ()) -> bytes:
    """The envelope as JSON; ``unchanged`` names ``payload.item`` fields left out."""
    key = (env.event_id, unchanged)
    raw = _envelopes.get(key)
    if raw is None:
        if unchanged:
            doc = msgspec.to_builtins(env)
            item = doc["payload"]["item"]
            for name in unchanged:
                del item[name]
            raw = _encoder.encode(doc)
        else:
            raw = _encoder.encode(env)
        _envelopes.put(key, raw)
    return raw


def event_frame(sub: str, env: EventEnvelope, unchanged: tuple[str, ...] = ()) -> bytes:
    """The ``event`` notification of ``env`` for subscription ``sub``."""
    key = (sub, env.event_id, unchanged)
    frame = _frames.get(key)
    if frame is None:
        params: dict[str, Any] = {"subscription": sub, "sequence": env.sequence}
        if unchanged:
            params["unchanged"] = unchanged
        params["event"] = msgspec.Raw(envelope_json(env, unchanged))
        frame = _frames.put(key, notification("event", params))
    return frame


def live_text_frame(sub: str, piece: LiveText) -> bytes:
    """The ``liveText`` notification of a piece of not yet committed text."""
    return notification("liveText", {"subscription": sub, **msgspec.to_builtins(piece)})
