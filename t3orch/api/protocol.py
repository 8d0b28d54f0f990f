"""JSON-RPC 2.0 framing: request decoding, error codes, response and stream frames.

Frames are encoded here and nowhere else, so every byte the server sends has
one shape. Stream frames are notifications (no ``id``) whose ``params`` always
carry the ``subscription`` they belong to and a ``sequence``.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

# JSON-RPC 2.0 reserved codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Server-defined codes (the -32000..-32099 range).
COMMAND_REJECTED = -32000
UNAUTHORIZED = -32001

RequestId = int | str | None


class RpcError(Exception):
    """An error the server answers with; ``data`` is optional structured detail."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class Request(msgspec.Struct, forbid_unknown_fields=True):
    jsonrpc: str
    method: str
    id: int | str | msgspec.UnsetType | None = msgspec.UNSET
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET

    @property
    def is_notification(self) -> bool:
        return self.id is msgspec.UNSET

    @property
    def reply_id(self) -> RequestId:
        return None if isinstance(self.id, msgspec.UnsetType) else self.id


_request_decoder = msgspec.json.Decoder(Request)
#: msgspec decodes nested arrays and objects recursively, bounded by the
#: interpreter's recursion limit (~1,000 levels): deeper is refused, not a crash.
TOO_DEEP = "JSON nested too deeply (the limit is about 1,000 levels of arrays and objects)"
_PATH = re.compile(r" - at `(\$[^`]*)`$")


def decode_request(frame: bytes | str) -> Request:
    """A request, or RpcError(-32700 / -32600) naming what was wrong."""
    try:
        req = _request_decoder.decode(frame)
    except msgspec.ValidationError as exc:
        raise RpcError(INVALID_REQUEST, f"invalid request: {exc}", _path_data(exc)) from None
    except msgspec.DecodeError as exc:
        raise RpcError(PARSE_ERROR, f"parse error: {exc}") from None
    except RecursionError:
        raise RpcError(PARSE_ERROR, f"parse error: {TOO_DEEP}") from None
    if req.jsonrpc != "2.0":
        raise RpcError(
            INVALID_REQUEST, f'invalid request: jsonrpc must be "2.0", got {req.jsonrpc!r}'
        )
    return req


def salvage_id(frame: bytes | str) -> RequestId:
    """The id of a request too broken to decode, when one can still be read."""
    try:
        doc = msgspec.json.decode(frame)
    except (msgspec.DecodeError, RecursionError):
        return None
    if isinstance(doc, dict):
        rid = doc.get("id")
        if isinstance(rid, int | str) and not isinstance(rid, bool):
            return rid
    return None


def decode_params(raw: msgspec.Raw | msgspec.UnsetType, tp: type[Any]) -> Any:
    """Typed params; a mismatch is -32602 naming the JSON path under ``$.params``."""
    body: bytes | msgspec.Raw = b"{}" if isinstance(raw, msgspec.UnsetType) else raw
    try:
        return msgspec.json.decode(body, type=tp)
    except msgspec.ValidationError as exc:
        data = _path_data(exc, prefix="$.params")
        text = _PATH.sub("", str(exc))
        where = f" at {data['path']}" if data else ""
        raise RpcError(INVALID_PARAMS, f"invalid params: {text}{where}", data) from None
    except RecursionError:
        raise RpcError(
            INVALID_PARAMS, f"invalid params: {TOO_DEEP}", {"path": "$.params"}
        ) from None


def _path_data(exc: Exception, prefix: str = "$") -> dict[str, str] | None:
    m = _PATH.search(str(exc))
    if m is None:
        return {"path": prefix} if prefix != "$" else None
    return {"path": prefix + m.group(1)[1:]}


# -- encoding ----------------------------------------------------------------------

_encoder = msgspec.json.Encoder()


def result_frame(rid: RequestId, result: Any) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "id": rid, "result": result})


def error_frame(rid: RequestId, err: RpcError) -> bytes:
    body: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.data is not None:
        body["data"] = err.data
    return _encoder.encode({"jsonrpc": "2.0", "id": rid, "error": body})


def notification(method: str, params: Any) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "method": method, "params": params})
