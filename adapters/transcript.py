"""Transcript files: the typed steps of docs/transcripts.md and a loader.

A transcript is NDJSON, one *step* per line, tagged by its ``step`` field. The
first line is the ``transcript_start`` header; ``runtime_start`` lines split the
rest into *segments*, one per provider process (the first segment needs no
``runtime_start``).

Frames stay plain ``dict`` values: the player matches them by shape and the
adapters own the typed per-provider decoding, so this module must not grow a
second, competing schema of provider frames.

Loader errors are :class:`TranscriptError` and name the file, the line and, for
a field that failed validation, its JSON path (``$.frame`` ...).
"""

from __future__ import annotations

import signal as signal_module
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import attrs
import msgspec

from adapters.transport import ExitStatus


class TranscriptError(ValueError):
    """A transcript file that does not follow docs/transcripts.md."""


class TranscriptStart(msgspec.Struct, tag_field="step", tag="transcript_start", frozen=True):
    """The header, first line only. Unknown keys are allowed: recorders may add metadata."""

    provider: Literal["codex", "claude"]
    version: str = ""
    scenario: str = ""
    synthetic: bool = False
    notes: str = ""
    argv: list[str] = msgspec.field(default_factory=list)


# Steps forbid unknown fields: a misspelt ``after_ms`` would otherwise silently
# mean "no delay", which is the kind of fixture bug nobody notices.
class _Step(
    msgspec.Struct, tag_field="step", rename="camel", forbid_unknown_fields=True, frozen=True
):
    pass


class RuntimeStart(_Step, tag="runtime_start", frozen=True):
    """A new provider process begins (for example a resume after a kill)."""

    argv: list[str] = msgspec.field(default_factory=list)


class ExpectOutbound(_Step, tag="expect_outbound", frozen=True):
    """A frame the client wrote to the provider's stdin."""

    frame: dict[str, Any]


class EmitInbound(_Step, tag="emit_inbound", frozen=True):
    """A JSON frame the provider wrote on stdout, ``afterMs`` after the previous step."""

    frame: dict[str, Any]
    after_ms: float = 0.0


class EmitInboundRaw(_Step, tag="emit_inbound_raw", frozen=True):
    """A stdout line that is not a JSON object (malformed, truncated, oversized)."""

    line: str
    after_ms: float = 0.0


class EmitStderr(_Step, tag="emit_stderr", frozen=True):
    """Text the provider wrote on stderr."""

    text: str
    after_ms: float = 0.0


class RuntimeExit(_Step, tag="runtime_exit", frozen=True):
    """The process ended with an exit ``code`` or was killed by ``signal``.

    ``signal`` is a number or a name (``9`` or ``"SIGKILL"``).

    ``onStdinClose`` (an extension of the documented format, default false)
    says the exit was the provider's answer to the client closing stdin: a
    player then waits for that close before counting ``afterMs``, instead of
    exiting on its own.
    """

    after_ms: float = 0.0
    code: int | None = None
    signal: int | str | None = None
    on_stdin_close: bool = False

    def __post_init__(self) -> None:
        if (self.code is None) == (self.signal is None):
            raise ValueError("runtime_exit needs exactly one of `code` or `signal`")
        if isinstance(self.signal, str) and self.signal not in signal_module.Signals.__members__:
            raise ValueError(f"unknown signal name {self.signal!r}")

    @property
    def signal_number(self) -> int | None:
        if isinstance(self.signal, str):
            return int(signal_module.Signals[self.signal])
        return self.signal

    def status(self) -> ExitStatus:
        return ExitStatus(code=self.code, signal=self.signal_number)


#: A step inside a segment (``runtime_start`` only separates segments).
PlayStep = ExpectOutbound | EmitInbound | EmitInboundRaw | EmitStderr | RuntimeExit
#: Any line of a transcript file.
Step = TranscriptStart | RuntimeStart | PlayStep

_decoder = msgspec.json.Decoder(Step)


@attrs.frozen
class Segment:
    """The steps of one provider process, with the file line of each step."""

    index: int
    argv: tuple[str, ...]
    steps: tuple[PlayStep, ...]
    lines: tuple[int, ...]

    def where(self, step_index: int) -> str:
        """``segment 1 step 4 (line 17)``: how errors point at a step."""
        line = self.lines[step_index] if 0 <= step_index < len(self.lines) else "?"
        return f"segment {self.index} step {step_index} (line {line})"


@attrs.frozen
class Transcript:
    source: str
    header: TranscriptStart
    segments: tuple[Segment, ...]

    @property
    def provider(self) -> Literal["codex", "claude"]:
        return self.header.provider

    def segment(self, index: int) -> Segment:
        if not 0 <= index < len(self.segments):
            raise TranscriptError(
                f"{self.source}: no segment {index} (the transcript has {len(self.segments)})"
            )
        return self.segments[index]


def load_transcript(path: str | Path) -> Transcript:
    """Read and validate a transcript file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read transcript: {exc}") from exc
    return parse_transcript(data.splitlines(), source=str(path))


def parse_transcript(lines: Iterable[bytes | str], *, source: str = "<transcript>") -> Transcript:
    """Validate transcript lines (without newlines); blank lines are ignored."""
    header: TranscriptStart | None = None
    segments: list[Segment] = []
    argv: tuple[str, ...] = ()
    steps: list[PlayStep] = []
    step_lines: list[int] = []
    exited_at: int | None = None

    def close_segment() -> None:
        segments.append(Segment(len(segments), argv, tuple(steps), tuple(step_lines)))

    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        step = _decode_line(raw, source, number)
        if header is None:
            if not isinstance(step, TranscriptStart):
                raise TranscriptError(
                    f"{source}:{number}: the first step must be transcript_start, got {_tag(step)}"
                )
            header = step
            argv = tuple(step.argv)
            continue
        if isinstance(step, TranscriptStart):
            raise TranscriptError(f"{source}:{number}: a second transcript_start header")
        if isinstance(step, RuntimeStart):
            # A segment that is still empty (a runtime_start right after the
            # header) only gets its argv replaced.
            if steps or segments:
                close_segment()
            argv, steps, step_lines, exited_at = tuple(step.argv), [], [], None
            continue
        if exited_at is not None:
            raise TranscriptError(
                f"{source}:{number}: {_tag(step)} after runtime_exit (line {exited_at}); "
                "start a new process with runtime_start"
            )
        if isinstance(step, RuntimeExit):
            exited_at = number
        steps.append(step)
        step_lines.append(number)

    if header is None:
        raise TranscriptError(f"{source}: empty transcript (no transcript_start header)")
    close_segment()
    return Transcript(source=source, header=header, segments=tuple(segments))


def _decode_line(raw: bytes | str, source: str, number: int) -> Step:
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message = str(exc)
        # Errors raised by __post_init__ carry no path; point at the step itself.
        if " - at `" not in message:
            message = f"{message} - at `$`"
        raise TranscriptError(f"{source}:{number}: {message}") from exc
    except msgspec.DecodeError as exc:
        raise TranscriptError(f"{source}:{number}: not a JSON step: {exc}") from exc


def _tag(step: Step) -> str:
    return str(type(step).__struct_config__.tag)
