"""Typed decoding of the lines the ``claude`` CLI writes on stdout (stream-json).

One msgspec decoder, tagged on ``type``, covers the frame types we act on. The
structs are deliberately lenient: every field has a default and unknown keys are
ignored, because the pinned CLI's frames carry dozens of keys that move between
releases and we only read a few of them. Whatever does not decode becomes a
:class:`~t3orch.provider_events.Diagnostic` (never an exception): a line that is
not JSON, an oversized line, a frame of an unknown ``type`` or a known frame
whose fields have the wrong shape.

Lines that do not start with ``{`` are not frames (some builds print debug text
on stdout); they are reported at ``info`` level and otherwise ignored.
"""

from __future__ import annotations

from typing import Any, get_args

import msgspec

from adapters.transport import OversizedLine
from t3orch.provider_events import Diagnostic

#: How much of an undecodable line a diagnostic keeps.
_HEAD_CHARS = 300


class _Frame(msgspec.Struct, tag_field="type", kw_only=True, frozen=True):
    pass


class SystemFrame(_Frame, tag="system", frozen=True):
    """``system`` frames; ``subtype`` says which (init, status, api_retry, ...).

    One struct for all subtypes (msgspec tags on one field only); each subtype
    fills its own few fields.
    """

    subtype: str = ""
    session_id: str | None = None
    uuid: str | None = None
    # init
    model: str | None = None
    cwd: str | None = None
    tools: list[str] = msgspec.field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = msgspec.field(default_factory=list)
    permission_mode: str | None = msgspec.field(default=None, name="permissionMode")
    claude_code_version: str | None = None
    # status / session_state_changed
    status: str | None = None
    state: str | None = None
    # api_retry
    attempt: int | None = None
    max_retries: int | None = None
    retry_delay_ms: float | None = None
    error_status: int | None = None
    error: Any = None
    # task_started / task_progress / task_notification (a subagent's lifecycle):
    # the child's own id, and the Agent/Task tool use that runs it.
    task_id: str | None = None
    tool_use_id: str | None = None


class Delta(msgspec.Struct, kw_only=True, frozen=True):
    """``content_block_delta.delta`` (and ``message_delta.delta``)."""

    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class SseEvent(msgspec.Struct, kw_only=True, frozen=True):
    """The raw Messages API SSE event inside a ``stream_event`` frame."""

    type: str
    index: int | None = None
    delta: Delta | None = None
    content_block: dict[str, Any] | None = None
    message: dict[str, Any] | None = None


class StreamEventFrame(_Frame, tag="stream_event", frozen=True):
    event: SseEvent
    session_id: str | None = None
    uuid: str | None = None
    parent_tool_use_id: str | None = None
    api_message_id: str | None = None


class Block(msgspec.Struct, kw_only=True, frozen=True):
    """One content block of any kind: text, thinking, tool_use, tool_result, ...

    A single lenient struct rather than a union so that a block type the CLI
    adds tomorrow still decodes (and is reported by the mapper, not here).
    """

    type: str
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: Any = None
    is_error: bool | None = None


class AssistantMessage(msgspec.Struct, kw_only=True, frozen=True):
    id: str = ""
    model: str | None = None
    content: list[Block] = msgspec.field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None


class AssistantFrame(_Frame, tag="assistant", frozen=True):
    message: AssistantMessage
    session_id: str | None = None
    uuid: str | None = None
    parent_tool_use_id: str | None = None
    #: Set on the synthetic message the CLI writes when the backend failed.
    error: str | None = None
    is_api_error_message: bool = False
    #: The reply as far as it streamed before an interrupt cut it off (the CLI
    #: sends it just before its ``aborted_streaming`` result).
    aborted: bool = False


class UserMessage(msgspec.Struct, kw_only=True, frozen=True):
    role: str = "user"
    content: str | list[Block] = ""


class UserFrame(_Frame, tag="user", frozen=True):
    """A user-role message the CLI echoes: tool results and interrupt markers."""

    message: UserMessage
    session_id: str | None = None
    uuid: str | None = None
    parent_tool_use_id: str | None = None
    #: The tool's structured result: for Bash ``{stdout, stderr, interrupted}``,
    #: otherwise a string or a block list.
    tool_use_result: Any = None
    tool_result_meta: list[dict[str, Any]] | None = None
    is_replay: bool = msgspec.field(default=False, name="isReplay")


class ResultFrame(_Frame, tag="result", frozen=True):
    """The end of a turn."""

    subtype: str = ""
    is_error: bool = False
    result: str | None = None
    num_turns: int | None = None
    terminal_reason: str | None = None
    errors: list[str] | None = None
    duration_ms: float | None = None
    duration_api_ms: float | None = None
    total_cost_usd: float | None = None
    usage: dict[str, Any] | None = None
    model_usage: dict[str, Any] | None = msgspec.field(default=None, name="modelUsage")
    #: Per model, this turn's share (``costUSD``…): ``total_cost_usd`` is the process's.
    model_usage_since_last_result: dict[str, Any] | None = None
    permission_denials: list[dict[str, Any]] = msgspec.field(default_factory=list)
    session_id: str | None = None
    uuid: str | None = None
    stop_reason: str | None = None


class ControlRequestBody(msgspec.Struct, kw_only=True, frozen=True):
    """``request`` of a control request the CLI sends us (all subtypes in one)."""

    subtype: str
    # can_use_tool
    tool_name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    description: str | None = None
    display_name: str | None = None
    permission_suggestions: list[dict[str, Any]] | None = None
    blocked_path: str | None = None
    decision_reason: str | None = None
    agent_id: str | None = None
    # hook_callback
    callback_id: str | None = None
    # mcp_message
    server_name: str | None = None
    message: dict[str, Any] | None = None


class ControlRequestFrame(_Frame, tag="control_request", frozen=True):
    request_id: str
    request: ControlRequestBody


class ControlResponseBody(msgspec.Struct, kw_only=True, frozen=True):
    subtype: str
    request_id: str
    response: dict[str, Any] | None = None
    error: str | None = None


class ControlResponseFrame(_Frame, tag="control_response", frozen=True):
    response: ControlResponseBody


class ControlCancelFrame(_Frame, tag="control_cancel_request", frozen=True):
    """The CLI abandoned one of its own requests: drop it, never answer it."""

    request_id: str


class RateLimitFrame(_Frame, tag="rate_limit_event", frozen=True):
    rate_limit_info: dict[str, Any] | None = None
    session_id: str | None = None


class KeptRawFrame(_Frame, tag="conversation_reset", frozen=True):
    """Frame types the notes say to keep as raw only (their original bytes are logged)."""


class TranscriptMirrorFrame(_Frame, tag="transcript_mirror", frozen=True):
    """Kept as raw only."""


InboundFrame = (
    SystemFrame
    | StreamEventFrame
    | AssistantFrame
    | UserFrame
    | ResultFrame
    | ControlRequestFrame
    | ControlResponseFrame
    | ControlCancelFrame
    | RateLimitFrame
    | KeptRawFrame
    | TranscriptMirrorFrame
)

_decoder = msgspec.json.Decoder(InboundFrame)


class _Envelope(msgspec.Struct):
    type: Any = None
    request_id: Any = None


_envelope = msgspec.json.Decoder(_Envelope)


def _head(line: bytes) -> str:
    return line[:_HEAD_CHARS].decode("utf-8", "replace")


#: The code of a control request whose fields have unexpected types.
INVALID_CONTROL_REQUEST = "claude.invalid_control_request"


def unanswerable_request_id(diagnostic: Diagnostic) -> str | int | None:
    """The id of the control request ``diagnostic`` reports as undecodable, if any."""
    if diagnostic.code != INVALID_CONTROL_REQUEST:
        return None
    request_id = diagnostic.detail.get("request_id")
    return request_id if isinstance(request_id, str | int) else None


def decode_line(line: bytes | OversizedLine) -> InboundFrame | Diagnostic | None:
    """Decode one stdout line; ``None`` for a blank line.

    Never raises: anything that is not a frame we know comes back as a
    :class:`Diagnostic` naming what was wrong.
    """
    if isinstance(line, OversizedLine):
        return Diagnostic(
            level="error",
            code="claude.oversized_line",
            message=f"stdout line of {line.length} bytes skipped (over the bound)",
            detail={"length": line.length, "head": _head(line.head)},
        )
    stripped = line.strip()
    if not stripped:
        return None
    if not stripped.startswith(b"{"):
        return Diagnostic(
            level="info",
            code="claude.non_json_line",
            message="stdout line that is not a JSON object",
            detail={"head": _head(stripped)},
        )
    try:
        return _decoder.decode(stripped)
    except msgspec.ValidationError as exc:
        return _invalid(stripped, exc)
    except msgspec.DecodeError as exc:
        return Diagnostic(
            level="error",
            code="claude.malformed_line",
            message=f"stdout line is not valid JSON: {exc}",
            detail={"head": _head(stripped)},
        )


def _invalid(line: bytes, exc: msgspec.ValidationError) -> Diagnostic:
    # Tell "a type we do not know" (expected as the CLI evolves) from "a type we
    # know with fields of the wrong shape" (a protocol change worth an error).
    try:
        envelope = _envelope.decode(line)
    except msgspec.MsgspecError:
        envelope = _Envelope()
    kind = envelope.type
    if kind == "control_request" and isinstance(envelope.request_id, str | int):
        # The CLI waits for an answer to every request it sends: this one gets an
        # error response (see :func:`unanswerable_request_id`), never silence.
        return Diagnostic(
            level="error",
            code=INVALID_CONTROL_REQUEST,
            message=f"control request {envelope.request_id!r} does not decode: {exc}",
            detail={"type": kind, "request_id": envelope.request_id, "head": _head(line)},
        )
    if isinstance(kind, str) and kind not in _KNOWN_TYPES:
        return Diagnostic(
            level="warning",
            code="claude.unknown_frame",
            message=f"unknown frame type {kind!r}",
            detail={"type": kind, "head": _head(line)},
        )
    return Diagnostic(
        level="error",
        code="claude.invalid_frame",
        message=f"frame of type {kind!r} does not decode: {exc}",
        detail={"type": kind, "head": _head(line)},
    )


_KNOWN_TYPES: frozenset[str] = frozenset(
    str(member.__struct_config__.tag) for member in get_args(InboundFrame)
)
