"""The boundary between an adapter and the provider process it talks to.

Adapters speak line-framed JSON to a provider; *how* the provider runs is not
their business. The supervisor launches real processes (process group,
parent-death signal, stop ladder); replay tests hand the adapter an in-memory
transcript player; the stand-in provider plays the same transcript over real
pipes. All three implement these two protocols.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

#: Default bound on one provider frame. Claude lines can be megabytes long.
DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024


@attrs.frozen
class LaunchSpec:
    """What to run: argv, environment (complete, not merged) and working directory."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES


@attrs.frozen
class ExitStatus:
    """How a provider process ended: an exit code, or the signal that killed it."""

    code: int | None
    signal: int | None

    def describe(self) -> str:
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"exited with code {self.code}"


#: What a process left running for the next daemon (a held provider the daemon leaves to
#: its holder) says when waited on: neither a code nor a signal, and at once.
LEFT_RUNNING = ExitStatus(code=None, signal=None)


@attrs.frozen
class OversizedLine:
    """A stdout line longer than the bound; its bytes were skipped up to the newline."""

    length: int
    head: bytes


class ProviderProcess(Protocol):
    """A running provider speaking newline-delimited frames on stdin/stdout."""

    @property
    def pid(self) -> int | None: ...

    async def send_line(self, line: bytes) -> None:
        """Write one frame; ``line`` has no trailing newline."""

    async def receive_line(self) -> bytes | OversizedLine | None:
        """The next stdout line without its newline; ``None`` at end of stream."""

    async def close_stdin(self) -> None:
        """Close the provider's stdin: the graceful stop for both providers."""

    async def wait(self) -> ExitStatus:
        """Wait for the process to exit and reap it."""

    def stderr_tail(self) -> str:
        """The last few KiB the process wrote to stderr."""

    async def kill(self) -> None:
        """Kill the process (and its process group where there is one) at once."""


@runtime_checkable
class LineBatches(Protocol):
    """A :class:`ProviderProcess` that can also hand out every line it has read at once.

    Optional: a busy provider writes thousands of small frames per second, and
    one call per pipe read instead of one per line matters on that path.
    """

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        """The lines read so far, in order (at least one); ``[]`` at end of stream."""


#: One read of a provider's stdout: its complete lines in order; ``[]`` once it ended.
ReadLines = Callable[[], Awaitable[list[bytes | OversizedLine]]]


def line_reads(process: ProviderProcess) -> ReadLines:
    """How both adapters' readers read ``process``: a pipe read's lines per call.

    ``receive_lines`` where the process has it (real processes do), else one line
    per call (the replay players).
    """
    if isinstance(process, LineBatches):
        return process.receive_lines

    async def one_line() -> list[bytes | OversizedLine]:
        line = await process.receive_line()
        return [] if line is None else [line]

    return one_line


class ProcessLauncher(Protocol):
    async def launch(self, spec: LaunchSpec) -> ProviderProcess: ...
