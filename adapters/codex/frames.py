"""Decoding one stdout line of ``codex app-server`` into a typed frame.

Codex frames carry no ``"jsonrpc"`` field and are routed by *shape*, because the
server numbers its own requests from 0 in an id space that overlaps ours:

* ``method`` + ``id``         -> :class:`ServerRequest` (a request to us);
* ``id`` + ``result``/``error`` -> :class:`Response` (an answer to one of ours);
* ``method`` only             -> :class:`Notification`.

Decoding is two-pass: the envelope keeps ``params``/``result`` as
:class:`msgspec.Raw` (a slice of the line, no parsing), and the mapper decodes
params with a per-method decoder. The frames of a busy turn are the exception,
decoded in one typed pass: the streaming deltas (:class:`Delta`) and the items
they stream into (:class:`ItemFrame`). Unknown top-level keys (``emittedAtMs``,
``trace``) are ignored. Nothing here raises on bad input: a line that is not a
JSON object of a known shape becomes :class:`Malformed`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from adapters.transport import OversizedLine

#: How much of a bad line is kept in its diagnostic.
BAD_LINE_HEAD_CHARS = 200

RequestId = int | str


class RpcError(msgspec.Struct, frozen=True):
    """The ``error`` member of a JSON-RPC response."""

    code: int | None = None
    message: str = ""
    data: Any = None


class _Envelope(msgspec.Struct):
    # An empty Raw means "absent": cheaper than a Raw | UnsetType union and
    # never ambiguous, since a present value is at least ``null``.
    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: msgspec.Raw = msgspec.Raw(b"")
    result: msgspec.Raw = msgspec.Raw(b"")
    error: RpcError | UnsetType | None = UNSET


class Response(msgspec.Struct, frozen=True):
    id: RequestId | None
    result: msgspec.Raw | None
    error: RpcError | None


class ServerRequest(msgspec.Struct, frozen=True):
    id: RequestId
    method: str
    params: msgspec.Raw


class Notification(msgspec.Struct, frozen=True):
    method: str
    params: msgspec.Raw


def _tag(frame: msgspec.Struct) -> str:
    return str(frame.__struct_config__.tag)


# Strings only, so never part of a cycle: not tracked by the garbage collector,
# which would otherwise run every few hundred deltas.
class DeltaParams(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    item_id: str
    delta: str


class Delta(msgspec.Struct, frozen=True, gc=False, tag_field="method"):
    """A streaming delta notification decoded in one typed pass (the hot path, see below).

    One subclass per hot method, tagged by ``method``: the decoder matches the
    method itself, so no ``method`` string is built per frame.
    """

    params: DeltaParams

    method = property(_tag, doc="The method this frame was decoded from: its class's tag.")


class AgentMessageDelta(Delta, frozen=True, tag="item/agentMessage/delta"):
    pass


class CommandOutputDelta(Delta, frozen=True, tag="item/commandExecution/outputDelta"):
    pass


class ReasoningTextDelta(Delta, frozen=True, tag="item/reasoning/textDelta"):
    pass


class PlanDelta(Delta, frozen=True, tag="item/plan/delta"):
    pass


class ItemFrame(msgspec.Struct, frozen=True, tag_field="method"):
    """``item/started`` or ``item/completed``, decoded in one pass (see below).

    Their params hold the whole item: at its completion the full text of a
    message or the whole output of a command, tens of KiB in a busy turn. The
    general path would scan them once into a Raw and the mapper decode them
    again (~1.5 times the bare decode of the line); here they are decoded once.
    """

    params: dict[str, Any]

    method = property(_tag, doc="The method this frame was decoded from: its class's tag.")


class ItemStartedFrame(ItemFrame, frozen=True, tag="item/started"):
    pass


class ItemCompletedFrame(ItemFrame, frozen=True, tag="item/completed"):
    pass


class Malformed(msgspec.Struct, frozen=True):
    """A line that is not a frame: ``code`` is ``malformed_frame`` or ``oversized_frame``."""

    code: str
    reason: str
    head: str
    length: int


Frame = Response | ServerRequest | Notification | Delta | ItemFrame | Malformed

_envelope = msgspec.json.Decoder(_Envelope)
_NULL = msgspec.Raw(b"null")

#: Notifications that are mostly what a busy turn sends: one ``{itemId, delta}``
#: each, and the items they stream into opening and closing. A line that starts
#: like one (Codex writes ``method`` first) is decoded in a single typed pass;
#: anything unexpected (another method, a missing or mistyped field) falls back
#: to the general two-pass path, so the shortcut never changes the result.
_HOT_PREFIX = b'{"method":"item/'
_hot = msgspec.json.Decoder(
    AgentMessageDelta
    | CommandOutputDelta
    | ReasoningTextDelta
    | PlanDelta
    | ItemStartedFrame
    | ItemCompletedFrame
)


def decode_frame(line: bytes | OversizedLine) -> Frame:
    """Classify one stdout line; never raises."""
    return decode_frames([line])[0]


def decode_frames(lines: list[bytes | OversizedLine]) -> list[Frame]:
    """:func:`decode_frame` of every line, in order; a batch costs no Python call per delta."""
    frames: list[Frame] = []
    append = frames.append
    hot = _hot.decode
    for line in lines:
        if isinstance(line, bytes) and line.startswith(_HOT_PREFIX):
            try:
                append(hot(line))
                continue
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass  # item/started and the like, or an unusual delta: the general path
        append(_decode_general(line))
    return frames


def _decode_general(line: bytes | OversizedLine) -> Frame:
    if isinstance(line, OversizedLine):
        return Malformed(
            code="oversized_frame",
            reason=f"line of {line.length} bytes exceeds the bound",
            head=_head(line.head),
            length=line.length,
        )
    try:
        env = _envelope.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return _malformed(line, str(exc))
    has_id = env.id is not UNSET
    if env.method is not UNSET:
        params = env.params if env.params else _NULL
        if has_id and env.id is not None:
            assert not isinstance(env.id, UnsetType)
            return ServerRequest(id=env.id, method=env.method, params=params)
        if has_id:
            return _malformed(line, "request with a null id")
        return Notification(method=env.method, params=params)
    if has_id and (env.result or env.error is not UNSET):
        assert not isinstance(env.id, UnsetType)
        error = env.error if not isinstance(env.error, UnsetType) else None
        if env.result:
            return Response(id=env.id, result=env.result, error=None)
        if error is None:
            return _malformed(line, "response with neither result nor error")
        return Response(id=env.id, result=None, error=error)
    return _malformed(line, "neither a request, a response nor a notification")


def decode_params(raw: msgspec.Raw) -> Any:
    """Params or a result as plain JSON values (dict, list ...); ``None`` if undecodable."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def _malformed(line: bytes, reason: str) -> Malformed:
    return Malformed(code="malformed_frame", reason=reason, head=_head(line), length=len(line))


def _head(data: bytes) -> str:
    return data[:BAD_LINE_HEAD_CHARS].decode("utf-8", "replace")
