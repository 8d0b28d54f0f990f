"""A process launcher that remembers what it launched, for the stop ladder and sweeps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

from adapters.ownership import started_at
from adapters.process import ChildProcess, StopResult, TrioProcessLauncher
from adapters.transport import ExitStatus, LaunchSpec, ProviderProcess
from t3orch.domain.vocab import ProviderKind


class StoppableProcess(Protocol):
    """What the stop ladder and the stall watch signal: a child, or a provider in a holder."""

    @property
    def pid(self) -> int: ...

    @property
    def status(self) -> ExitStatus | None: ...

    def signal_group(self, sig: int) -> bool: ...

    async def stop(
        self, grace_close: float = 2.0, grace_term: float = 2.0, grace_kill: float = 5.0
    ) -> StopResult: ...


class SupervisedLauncher(Protocol):
    """What a session launches its provider with; ``current`` is what the stop ladder signals.

    ``current`` is None for a process that is not an OS child (a replayed transcript).
    """

    async def launch(self, spec: LaunchSpec) -> ProviderProcess: ...

    @property
    def current(self) -> StoppableProcess | None: ...


#: Makes a session's launcher, given its provider kind and the nursery processes live in.
LauncherFactory = Callable[[ProviderKind, trio.Nursery], SupervisedLauncher]


def process_start_time(pid: int | None) -> float | None:
    """The kernel's start time of ``pid`` (the boot clock, ``adapters.ownership``): with
    the pid it names one process, forever."""
    return None if pid is None else started_at(pid)


class RecordingLauncher:
    """Real child processes, remembered for the stop ladder."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._inner = TrioProcessLauncher(nursery)
        self.children: list[ChildProcess] = []

    async def launch(self, spec: LaunchSpec) -> ChildProcess:
        child = await self._inner.launch(spec)
        self.children.append(child)
        return child

    @property
    def current(self) -> ChildProcess | None:
        return self.children[-1] if self.children else None
