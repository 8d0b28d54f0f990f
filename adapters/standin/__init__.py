"""The stand-in provider: plays a transcript's provider side over real stdio.

``python -m adapters.standin TRANSCRIPT`` behaves like a provider process for
the supervisor, crash, scale and demo tests: it reads the client's frames on
stdin, answers with the recorded frames on stdout (and the recorded text on
stderr) and exits as the recording did. Fault switches bend it into the
failures a supervisor must survive (see :class:`StandinOptions`).

This module holds the play logic (:func:`serve`), independent of file
descriptors; ``__main__`` wires it to the process's stdio and exit status.
Stdout carries frames only; the stand-in's own diagnostics go to stderr.
"""

from __future__ import annotations

import logging
import math
import os
import signal
from collections.abc import Callable

import attrs
import msgspec
import trio

from adapters.line_reader import BoundedLineReader
from adapters.standin.threads import serve_threads
from adapters.transcript import Transcript
from adapters.transcript_player import TranscriptPlayer, is_initialize
from adapters.transport import DEFAULT_MAX_LINE_BYTES, ExitStatus, OversizedLine

log = logging.getLogger("adapters.standin")

#: The line ``--garbage-after-frames`` writes: neither JSON nor a ``{`` line.
GARBAGE_LINE = b"standin garbage: this line is not JSON <<<\x01>>>"


@attrs.frozen
class StandinOptions:
    """How to play, and which faults to inject.

    ``crash_after_frames`` / ``garbage_after_frames`` / ``stop_after_frames`` /
    ``close_stdout_after_frames`` count stdout lines written (0 = before the
    first). ``stop_after_frames``: SIGSTOP ourselves (a wedged provider: alive,
    silent, deaf to everything but SIGKILL until continued).
    ``close_stdout_after_frames``: close stdout and live on, reading stdin and
    answering nothing. ``slow_ms`` is added before every stdout line.
    ``exit_code`` replaces the final exit status (code or signal).
    ``crash_on_request``: ``METHOD`` or ``METHOD:N``: SIGKILL ourselves on reading the
    first (or ``N``-th) client request with that method, before anything of it is
    played (a provider dying as the input arrives).
    """

    segment: int = 0
    speed: float = 1.0
    strict: bool = False
    loop_turns: bool = False
    crash_after_frames: int | None = None
    crash_on_request: str | None = None
    hang_on_initialize: bool = False
    garbage_after_frames: int | None = None
    stop_after_frames: int | None = None
    close_stdout_after_frames: int | None = None
    slow_ms: float = 0.0
    exit_code: int | None = None
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    #: Host many threads, as a shared ``codex app-server`` does (``adapters.standin.threads``).
    threads: bool = False


def crash_now() -> None:
    """SIGKILL ourselves: the most abrupt crash there is (no flush, no exit handlers)."""
    os.kill(os.getpid(), signal.SIGKILL)


def stop_now() -> None:
    """SIGSTOP ourselves: the process lives on, reads nothing and writes nothing."""
    os.kill(os.getpid(), signal.SIGSTOP)


async def serve(
    transcript: Transcript,
    options: StandinOptions,
    stdin: trio.abc.ReceiveStream,
    stdout: trio.abc.SendStream,
    write_stderr: Callable[[str], None],
    *,
    crash: Callable[[], None] = crash_now,
    stop: Callable[[], None] = stop_now,
    hang_up_stdout: Callable[[], None] = lambda: None,
) -> ExitStatus:
    """Play one segment of ``transcript`` over the given streams; return how to exit.

    ``hang_up_stdout`` is called after ``stdout`` is closed for
    ``close_stdout_after_frames``: whatever else holds the process's stdout (fd 1)
    lets it go, so the reader really sees end of file.
    """

    def make_player() -> TranscriptPlayer:
        return TranscriptPlayer(
            transcript,
            options.segment,
            speed=options.speed,
            strict=options.strict,
            loop_turns=options.loop_turns,
        )

    sink = _FaultySink(stdout, write_stderr, options, crash, stop, hang_up_stdout)
    if options.threads:
        await sink.before_first_frame()
        status = await serve_threads(
            transcript, make_player, options.segment, stdin, sink, options.max_line_bytes
        )
        if options.exit_code is not None:
            return ExitStatus(code=options.exit_code, signal=None)
        return status
    player = make_player()
    outbound_send, outbound_receive = trio.open_memory_channel[bytes](math.inf)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_stdin, stdin, outbound_send, options, crash)
        await sink.before_first_frame()
        status = await player.play(outbound_receive, sink)
        nursery.cancel_scope.cancel()
    if options.exit_code is not None:
        return ExitStatus(code=options.exit_code, signal=None)
    return status


async def _pump_stdin(
    stdin: trio.abc.ReceiveStream,
    outbound: trio.MemorySendChannel[bytes],
    options: StandinOptions,
    crash: Callable[[], None],
) -> None:
    """Client lines from stdin into the player's channel; closing it means stdin closed."""
    reader = BoundedLineReader(stdin, options.max_line_bytes)
    crash_on = _crash_on(options.crash_on_request)
    async with outbound:
        while (line := await reader.receive_line()) is not None:
            if isinstance(line, OversizedLine):
                log.warning("skipping an oversized client line (%d bytes)", line.length)
                continue
            if options.hang_on_initialize and _is_initialize_line(line):
                log.warning("hanging: never answering initialize (--hang-on-initialize)")
                # Hold the channel open and stop reading: the player waits
                # forever, and even closing stdin changes nothing. Only a
                # signal ends us, which is what the stop ladder must find out.
                await trio.sleep_forever()
            if crash_on is not None and _method(line) == crash_on[0]:
                crash_on = (crash_on[0], crash_on[1] - 1)
                if crash_on[1] == 0:
                    log.warning("crashing on %s (--crash-on-request)", options.crash_on_request)
                    crash()
            await outbound.send(line)


def _crash_on(spec: str | None) -> tuple[str, int] | None:
    """``METHOD`` or ``METHOD:N``: the method, and how many of its requests to read."""
    if spec is None:
        return None
    method, _, count = spec.partition(":")
    return method, int(count or 1)


def _method(line: bytes) -> object:
    try:
        frame = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return None
    return frame.get("method") if isinstance(frame, dict) else None


def _is_initialize_line(line: bytes) -> bool:
    try:
        return is_initialize(msgspec.json.decode(line))
    except msgspec.DecodeError:
        return False


class _FaultySink:
    """Writes the player's output, injecting the configured faults."""

    def __init__(
        self,
        stdout: trio.abc.SendStream,
        write_stderr: Callable[[str], None],
        options: StandinOptions,
        crash: Callable[[], None],
        stop: Callable[[], None],
        hang_up_stdout: Callable[[], None],
    ) -> None:
        self._stdout = stdout
        self._write_stderr = write_stderr
        self._options = options
        self._crash = crash
        self._stop = stop
        self._hang_up_stdout = hang_up_stdout
        self._frames = 0
        self._garbage_written = False

    async def before_first_frame(self) -> None:
        await self._after_frame()

    async def stdout_line(self, line: bytes) -> None:
        if self._options.slow_ms > 0:
            await trio.sleep(self._options.slow_ms / 1000.0)
        await self._stdout.send_all(line + b"\n")
        self._frames += 1
        await self._after_frame()

    async def stderr_text(self, text: str) -> None:
        self._write_stderr(text)
        await trio.lowlevel.checkpoint()

    async def _after_frame(self) -> None:
        options = self._options
        if options.garbage_after_frames == self._frames and not self._garbage_written:
            self._garbage_written = True
            await self._stdout.send_all(GARBAGE_LINE + b"\n")
        if options.crash_after_frames == self._frames:
            log.warning("crashing after %d frames (--crash-after-frames)", self._frames)
            self._crash()
        if options.stop_after_frames == self._frames:
            log.warning("stopping after %d frames (--stop-after-frames)", self._frames)
            self._stop()
        if options.close_stdout_after_frames == self._frames:
            log.warning("closing stdout after %d frames (--close-stdout-...)", self._frames)
            await self._stdout.aclose()
            self._hang_up_stdout()
            # Alive with stdout gone: the player never writes again (stdin is still
            # read, so a close of it is noticed only by the exit it never makes).
            await trio.sleep_forever()
