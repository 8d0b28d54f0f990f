"""An in-memory provider process that plays a transcript segment.

Adapter replay tests run the real adapter against :class:`ReplayProcess`
instead of a child process: the adapter's ``send_line`` feeds the
:class:`~adapters.transcript_player.TranscriptPlayer`, whose output comes back
through ``receive_line``. No pipes, no pids, and under
``trio.testing.MockClock`` the recorded delays cost no wall time.

The player runs as a task in a nursery the caller provides (through
:class:`ReplayLauncher`), so a strict-mode :class:`TranscriptMismatch` crashes
that nursery and cannot be swallowed by an adapter's error handling.
"""

from __future__ import annotations

import math
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from adapters.diagnostics import redact_text
from adapters.line_reader import oversized
from adapters.transcript import Transcript
from adapters.transcript_player import TranscriptPlayer
from adapters.transport import (
    DEFAULT_MAX_LINE_BYTES,
    ExitStatus,
    LaunchSpec,
    OversizedLine,
)

#: How much stderr text a process keeps (the real process keeps the same).
STDERR_TAIL_CHARS = 8 * 1024


class ReplayProcess:
    """A :class:`~adapters.transport.ProviderProcess` backed by a transcript player."""

    def __init__(
        self, player: TranscriptPlayer, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> None:
        self.player = player
        self.max_line_bytes = max_line_bytes
        # Unbounded like a pipe the provider keeps draining: send_line never
        # blocks on the player being busy sleeping through a delay.
        self._stdin_send, self._stdin_receive = trio.open_memory_channel[bytes](math.inf)
        self._stdout_send, self._stdout_receive = trio.open_memory_channel[bytes](math.inf)
        self._stderr = ""
        self._status: ExitStatus | None = None
        self._exited = trio.Event()
        self._scope = trio.CancelScope()

    @property
    def pid(self) -> int | None:
        return None

    async def run(self) -> None:
        """Play the segment until it exits or the process is killed."""
        with self._scope:
            status = await self.player.play(self._stdin_receive, _Sink(self))
            self._finish(status)

    async def send_line(self, line: bytes) -> None:
        if self._status is not None:
            # What writing to the pipe of a dead process raises in trio.
            raise trio.BrokenResourceError("the replayed provider has exited")
        await self._stdin_send.send(bytes(line))

    async def receive_line(self) -> bytes | OversizedLine | None:
        try:
            line = await self._stdout_receive.receive()
        except trio.EndOfChannel:
            return None
        return oversized(line) if len(line) > self.max_line_bytes else line

    async def close_stdin(self) -> None:
        await self._stdin_send.aclose()

    async def wait(self) -> ExitStatus:
        await self._exited.wait()
        assert self._status is not None
        return self._status

    def stderr_tail(self) -> str:
        # Redacted as a real process's is: replays feed the same store.
        return redact_text(self._stderr)

    async def kill(self) -> None:
        self.kill_now()
        await trio.lowlevel.checkpoint()

    def kill_now(self) -> None:
        """Stop the player at once, as SIGKILL would (synchronous, for teardown)."""
        self._scope.cancel()
        self._finish(ExitStatus(code=None, signal=int(signal.SIGKILL)))

    def _finish(self, status: ExitStatus) -> None:
        if self._status is not None:
            return
        self._status = status
        # stdout ends after what was already written, as a pipe does.
        self._stdout_send.close()
        self._stdin_receive.close()
        self._exited.set()

    def _write_stdout(self, data: bytes) -> None:
        # A raw line may hold newlines; a pipe would deliver them as several lines.
        for line in data.split(b"\n"):
            self._stdout_send.send_nowait(line)

    def _write_stderr(self, text: str) -> None:
        self._stderr = (self._stderr + text)[-STDERR_TAIL_CHARS:]


class _Sink:
    def __init__(self, process: ReplayProcess) -> None:
        self._process = process

    async def stdout_line(self, line: bytes) -> None:
        self._process._write_stdout(line)
        await trio.lowlevel.checkpoint()

    async def stderr_text(self, text: str) -> None:
        self._process._write_stderr(text)
        await trio.lowlevel.checkpoint()


class ReplayLauncher:
    """A :class:`~adapters.transport.ProcessLauncher` handing out one segment per launch.

    The first launch plays segment 0, the next segment 1, and so on (a resume
    after a kill is a new process). ``launched`` keeps every spec, so a test can
    check the argv an adapter asked for.
    """

    def __init__(
        self,
        transcript: Transcript,
        nursery: trio.Nursery,
        *,
        speed: float = 1.0,
        strict: bool = True,
        loop_turns: bool = False,
    ) -> None:
        self.transcript = transcript
        self._nursery = nursery
        self._speed = speed
        self._strict = strict
        self._loop_turns = loop_turns
        self.launched: list[LaunchSpec] = []
        self.processes: list[ReplayProcess] = []

    async def launch(self, spec: LaunchSpec) -> ReplayProcess:
        segment = len(self.launched)
        player = TranscriptPlayer(
            self.transcript,
            segment,
            speed=self._speed,
            strict=self._strict,
            loop_turns=self._loop_turns,
        )
        self.launched.append(spec)
        process = ReplayProcess(player, max_line_bytes=spec.max_line_bytes)
        self.processes.append(process)
        self._nursery.start_soon(process.run)
        await trio.lowlevel.checkpoint()
        return process


@asynccontextmanager
async def open_replay_launcher(
    transcript: Transcript,
    *,
    speed: float = 1.0,
    strict: bool = True,
    loop_turns: bool = False,
) -> AsyncIterator[ReplayLauncher]:
    """A launcher whose players live in a nursery; leaving the block kills them all."""
    async with trio.open_nursery() as nursery:
        launcher = ReplayLauncher(
            transcript, nursery, speed=speed, strict=strict, loop_turns=loop_turns
        )
        try:
            yield launcher
        finally:
            for process in launcher.processes:
                process.kill_now()
