"""The provider side of a transcript segment, played against a live client.

One engine serves both the in-memory replay process and the stand-in provider
process. It walks a segment's steps in order:

* ``emit_*`` steps are written to a :class:`PlayerSink` after their ``afterMs``
  delay (divided by ``speed``; ``speed=0`` means no delays at all);
* a run of consecutive ``expect_outbound`` steps waits until the client's
  frames have matched every one of them, in any order (a client may write two
  frames back to back in either order without changing the conversation);
* ``runtime_exit`` ends the play and returns the :class:`ExitStatus`.

Matching is by shape, never by bytes (see :func:`frame_key`), and ids the
client chose are remapped: when the recording's client request had id X and the
live client used Y, later inbound responses carrying X carry Y instead.

A client frame that matches no pending expectation is *unknown*: lenient mode
(the default) logs it and keeps it in :attr:`TranscriptPlayer.skipped`; strict
mode raises :class:`TranscriptMismatch` naming the step. One unknown request is
answered in lenient mode, as the provider answers it whatever the conversation:
Codex's ``turn/steer`` (see :meth:`TranscriptPlayer._answer_unscripted`). Left
unanswered, every steer of a stand-in turn waited out the client's request bound.

Synthetic transcripts may write ``{{turn}}`` inside string values of inbound
frames; it becomes the turn number (1, 2, ...), so a transcript looped with
``loop_turns`` hands out fresh turn and item ids each turn.

Only trio time is used (``trio.sleep``), so tests can run under
``trio.testing.MockClock``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable
from typing import Any, Protocol

import msgspec
import trio

from adapters.transcript import (
    EmitInbound,
    EmitInboundRaw,
    EmitStderr,
    ExpectOutbound,
    RuntimeExit,
    Segment,
    Transcript,
)
from adapters.transport import ExitStatus

log = logging.getLogger(__name__)

#: Placeholder in synthetic transcripts, replaced by the turn number.
TURN_TOKEN = "{{turn}}"

#: Shapes of the client frame that starts a turn: where ``loop_turns`` restarts.
_TURN_START_KEYS: frozenset[Hashable] = frozenset({("method", "turn/start"), ("type", "user")})

#: How a client closing stdin ends the process when the segment records no exit.
_CLEAN_EXIT = ExitStatus(code=0, signal=None)


class TranscriptMismatch(Exception):
    """Strict mode: the client's frames differ from the recording."""


class PlayerSink(Protocol):
    """Where the player writes the provider's output."""

    async def stdout_line(self, line: bytes) -> None:
        """One stdout line, without its newline."""

    async def stderr_text(self, text: str) -> None:
        """Text for stderr, as recorded."""


def frame_key(frame: Any) -> Hashable | None:
    """The shape a frame is matched on, or ``None`` for a frame with no known shape.

    * Codex request or notification: ``("method", method)``;
    * Codex response to a provider request: ``("response", id)``;
    * Claude control request: ``("control_request", request.subtype)``;
    * Claude control response to a provider request:
      ``("control_response", response.request_id)``;
    * any other typed frame (Claude ``user``): ``("type", type)``.
    """
    if not isinstance(frame, dict):
        return None
    method = frame.get("method")
    if isinstance(method, str):
        return ("method", method)
    if "id" in frame and ("result" in frame or "error" in frame):
        return ("response", _hashable(frame["id"]))
    kind = frame.get("type")
    if kind == "control_request":
        request = frame.get("request")
        subtype = request.get("subtype") if isinstance(request, dict) else None
        return ("control_request", _hashable(subtype))
    if kind == "control_response":
        response = frame.get("response")
        request_id = response.get("request_id") if isinstance(response, dict) else None
        return ("control_response", _hashable(request_id))
    if isinstance(kind, str):
        return ("type", kind)
    return None


def client_request_id(frame: dict[str, Any]) -> tuple[bool, Any]:
    """The id the client chose for a request it sent, as ``(present, id)``."""
    if isinstance(frame.get("method"), str) and "id" in frame:
        return True, frame["id"]
    if frame.get("type") == "control_request" and "request_id" in frame:
        return True, frame["request_id"]
    return False, None


def is_initialize(frame: Any) -> bool:
    """Whether a client frame is the ``initialize`` request of either provider."""
    key = frame_key(frame)
    return key in (("method", "initialize"), ("control_request", "initialize"))


class TranscriptPlayer:
    """Plays one segment of a transcript; create one per provider process."""

    def __init__(
        self,
        transcript: Transcript,
        segment: int = 0,
        *,
        speed: float = 1.0,
        strict: bool = False,
        loop_turns: bool = False,
    ) -> None:
        if speed < 0 or math.isnan(speed):
            raise ValueError(f"speed must be >= 0 (0 = no delays), got {speed}")
        self.transcript = transcript
        self.segment: Segment = transcript.segment(segment)
        self.speed = speed
        self.strict = strict
        self.loop_turns = loop_turns
        #: Client frames that matched nothing (lenient mode), oldest first.
        self.skipped: list[bytes] = []
        #: The number of the turn being played, for ``{{turn}}``.
        self.turn = 1
        # recorded client id -> live client id, by the JSON type of the recorded id
        # so that 1 and "1" stay distinct.
        self._remap: dict[Hashable, Any] = {}
        self._loop_start = self._find_loop_start() if loop_turns else None
        #: The id of the Codex turn the played frames have started and not completed.
        self._active_turn: str | None = None

    def _find_loop_start(self) -> int:
        steps = self.segment.steps
        for index in range(len(steps) - 1, -1, -1):
            step = steps[index]
            if isinstance(step, ExpectOutbound) and frame_key(step.frame) in _TURN_START_KEYS:
                return index
        raise ValueError(
            f"{self.transcript.source}: segment {self.segment.index} has no turn request "
            "(turn/start or user frame) to loop on"
        )

    async def play(self, outbound: trio.abc.ReceiveChannel[bytes], sink: PlayerSink) -> ExitStatus:
        """Play the segment; ``outbound`` yields client lines and ends when stdin closes.

        Returns how the provider process ends. Raises :class:`TranscriptMismatch`
        in strict mode.
        """
        steps = self.segment.steps
        index = 0
        while True:
            while index < len(steps):
                step = steps[index]
                if isinstance(step, ExpectOutbound):
                    end = index
                    while end < len(steps) and isinstance(steps[end], ExpectOutbound):
                        end += 1
                    if not await self._expect_group(index, end, outbound, sink):
                        return await self._stdin_closed(index)
                    index = end
                elif isinstance(step, RuntimeExit):
                    if self.loop_turns or step.on_stdin_close:
                        break  # the exit waits for stdin to close
                    await self._delay(step.after_ms)
                    return step.status()
                else:
                    await self._delay(step.after_ms)
                    await self._emit(step, sink)
                    index += 1
            # The steps ran out (or only an exit that waits for stdin is left).
            restart = await self._idle(outbound, sink)
            if restart is None:
                return await self._stdin_closed(len(steps))
            index = restart

    async def _expect_group(
        self, start: int, end: int, outbound: trio.abc.ReceiveChannel[bytes], sink: PlayerSink
    ) -> bool:
        """Match client frames to steps[start:end]; False if stdin closed first."""
        pending = list(range(start, end))
        while pending:
            try:
                line = await outbound.receive()
            except trio.EndOfChannel:
                return False
            frame = _decode(line)
            key = frame_key(frame)
            for position, index in enumerate(pending):
                step = self.segment.steps[index]
                assert isinstance(step, ExpectOutbound)
                if key is not None and frame_key(step.frame) == key:
                    assert isinstance(frame, dict)
                    self._learn_ids(step.frame, frame)
                    del pending[position]
                    break
            else:
                await self._unscripted(line, frame, pending[0], sink)
        return True

    async def _idle(self, outbound: trio.abc.ReceiveChannel[bytes], sink: PlayerSink) -> int | None:
        """After the last step: wait for a new turn (when looping) or for stdin to close.

        Returns the step index to continue at, or ``None`` when stdin closed.
        """
        while True:
            try:
                line = await outbound.receive()
            except trio.EndOfChannel:
                return None
            frame = _decode(line)
            if self._loop_start is not None:
                step = self.segment.steps[self._loop_start]
                assert isinstance(step, ExpectOutbound)
                key = frame_key(frame)
                if key is not None and key == frame_key(step.frame):
                    assert isinstance(frame, dict)
                    self._learn_ids(step.frame, frame)
                    self.turn += 1
                    return self._loop_start + 1
            await self._unscripted(line, frame, None, sink)

    async def _stdin_closed(self, index: int) -> ExitStatus:
        """The client closed stdin at step ``index``: end as the recording's exit does."""
        steps = self.segment.steps
        remaining = steps[index:]
        if any(isinstance(step, ExpectOutbound) for step in remaining):
            message = (
                f"{self.transcript.source}: {self.segment.where(index)}: stdin closed while "
                f"expecting {_describe(_expected_frame(steps[index]))}"
            )
            if self.strict:
                raise TranscriptMismatch(message)
            log.warning("%s; skipping to the exit", message)
        exit_step = steps[-1] if steps and isinstance(steps[-1], RuntimeExit) else None
        if exit_step is None:
            return _CLEAN_EXIT
        await self._delay(exit_step.after_ms)
        return exit_step.status()

    async def _unscripted(
        self, line: bytes, frame: Any, waiting_for: int | None, sink: PlayerSink
    ) -> None:
        """A client frame the recording does not have at this point."""
        answer = None if self.strict else self._answer_unscripted(frame)
        if answer is None:
            self._unknown(line, frame, waiting_for)
            return
        log.info("answering unscripted %s", _describe(frame))
        await sink.stdout_line(msgspec.json.encode(answer))

    def _answer_unscripted(self, frame: Any) -> dict[str, Any] | None:
        """Codex's own answer to a ``turn/steer`` the recording does not hold, else None.

        As measured with codex 0.169: the steer is accepted at once, even while an
        approval is pending (the input reaches the model after the answer), and
        refused with -32600 when no turn runs or ``expectedTurnId`` is missing.
        Only the answer is played, not the input's later ``userMessage`` item.
        """
        if not isinstance(frame, dict) or frame.get("method") != "turn/steer" or "id" not in frame:
            return None
        params = frame.get("params")
        expected = params.get("expectedTurnId") if isinstance(params, dict) else None
        if expected is None:
            error = "Invalid request: missing field `expectedTurnId`"
        elif self._active_turn is None:
            error = "no active turn to steer"
        elif expected != self._active_turn:
            # Not measured: the stand-in's own words for a steer of another turn.
            error = f"expected turn {expected} is not the active turn {self._active_turn}"
        else:
            return {"id": frame["id"], "result": {"turnId": self._active_turn}}
        return {"id": frame["id"], "error": {"code": -32600, "message": error}}

    def _track_turn(self, frame: dict[str, Any]) -> None:
        method = frame.get("method")
        if method not in ("turn/started", "turn/completed"):
            return
        params = frame.get("params")
        turn = params.get("turn") if isinstance(params, dict) else None
        turn_id = turn.get("id") if isinstance(turn, dict) else None
        if method == "turn/started" and isinstance(turn_id, str):
            self._active_turn = turn_id
        elif method == "turn/completed" and turn_id == self._active_turn:
            self._active_turn = None

    def _unknown(self, line: bytes, frame: Any, waiting_for: int | None) -> None:
        if waiting_for is None:
            expected = "nothing (end of segment)"
            where = f"{self.segment.where(len(self.segment.steps))}"
        else:
            expected = _describe(_expected_frame(self.segment.steps[waiting_for]))
            where = self.segment.where(waiting_for)
        actual = _describe(frame) if frame is not None else f"non-JSON line {line[:200]!r}"
        message = f"{self.transcript.source}: {where}: expected outbound {expected}, got {actual}"
        if self.strict:
            raise TranscriptMismatch(message)
        log.warning("%s; skipped", message)
        self.skipped.append(line)

    def _learn_ids(self, recorded: dict[str, Any], live: dict[str, Any]) -> None:
        has_recorded, recorded_id = client_request_id(recorded)
        has_live, live_id = client_request_id(live)
        if has_recorded and has_live:
            self._remap[_typed(recorded_id)] = live_id

    async def _emit(
        self, step: EmitInbound | EmitInboundRaw | EmitStderr, sink: PlayerSink
    ) -> None:
        if isinstance(step, EmitInbound):
            frame = self.rewrite(step.frame)
            self._track_turn(frame)
            await sink.stdout_line(msgspec.json.encode(frame))
        elif isinstance(step, EmitInboundRaw):
            await sink.stdout_line(step.line.encode("utf-8"))
        else:
            await sink.stderr_text(step.text)

    def rewrite(self, frame: dict[str, Any]) -> dict[str, Any]:
        """An inbound frame as the live client must see it (ids remapped, turn filled in)."""
        if self.transcript.header.synthetic:
            frame = _fill_turn(frame, str(self.turn))
        key = frame_key(frame)
        if isinstance(key, tuple) and key[0] == "response":
            live = self._remap.get(_typed(frame["id"]), _MISSING)
            if live is not _MISSING:
                frame = {**frame, "id": live}
        elif isinstance(key, tuple) and key[0] == "control_response":
            response = frame["response"]
            live = self._remap.get(_typed(response["request_id"]), _MISSING)
            if live is not _MISSING:
                frame = {**frame, "response": {**response, "request_id": live}}
        return frame

    async def _delay(self, after_ms: float) -> None:
        if self.speed > 0 and after_ms > 0:
            await trio.sleep(after_ms / 1000.0 / self.speed)


_MISSING = object()


def _decode(line: bytes) -> Any:
    try:
        return msgspec.json.decode(line)
    except msgspec.DecodeError:
        return None


def _hashable(value: Any) -> Hashable:
    return _typed(value) if not isinstance(value, dict | list) else repr(value)


def _typed(value: Any) -> Hashable:
    # JSON ids are strings or numbers; keep their type so 1 and "1" differ.
    return (type(value).__name__, value)


def _expected_frame(step: Any) -> Any:
    return step.frame if isinstance(step, ExpectOutbound) else None


def _describe(frame: Any) -> str:
    key = frame_key(frame)
    text = msgspec.json.encode(frame).decode("utf-8", "replace")
    if len(text) > 300:
        text = text[:300] + "..."
    if key is None:
        return f"a frame of no known shape {text}"
    kind, value = key if isinstance(key, tuple) else ("?", key)
    if isinstance(value, tuple) and len(value) == 2:
        value = value[1]  # a typed id
    return f"{kind} {value!r} {text}"


def _fill_turn(value: Any, turn: str) -> Any:
    if isinstance(value, str):
        return value.replace(TURN_TOKEN, turn) if TURN_TOKEN in value else value
    if isinstance(value, dict):
        return {key: _fill_turn(item, turn) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill_turn(item, turn) for item in value]
    return value
