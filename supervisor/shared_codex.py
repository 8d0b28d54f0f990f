"""Shared ``codex app-server`` processes: which thread joins which process (issue 21).

A Codex runtime launches through a :class:`SharedLauncher` instead of its own
process: it joins an open process whose launch is *compatible* (same argv, so the
same binary and config overrides, and the same complete environment, so the same
``CODEX_HOME``) and has room (``providers.codex.max_threads_per_process``), or
starts one. The process lives in the pool's nursery, not the session's: it
outlives any one of its threads and ends with its last (or with the pool). The
routing of frames among threads is :mod:`adapters.codex.multiplex`.

What the session's stop ladder and stall watch signal (``launcher.current``) is a
:class:`SharedChild`: signalling it ends that thread's use of the process; only
when the thread is alone on it do the signals reach the real process group.
"""

from __future__ import annotations

import hashlib
import logging
import signal
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from adapters.codex.multiplex import CodexMultiplexer, VirtualProcess
from adapters.process import ChildProcess, StopResult, TrioProcessLauncher
from adapters.transport import ExitStatus, LaunchSpec
from supervisor.launcher import StoppableProcess, SupervisedLauncher
from t3orch.domain.vocab import ProviderKind

log = logging.getLogger(__name__)


def compatibility_key(spec: LaunchSpec) -> str:
    """Threads whose launches have the same key may share a process."""
    body = msgspec.json.encode([list(spec.argv), sorted(spec.env.items()), spec.max_line_bytes])
    return hashlib.sha256(body).hexdigest()[:16]


class SharedChild:
    """A thread's share of a process, as the stop ladder sees it (StoppableProcess)."""

    def __init__(self, member: VirtualProcess, child: ChildProcess, pool: SharedCodexPool) -> None:
        self.member = member
        self._child = child
        self._pool = pool

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def status(self) -> ExitStatus | None:
        return self.member.status

    @property
    def process_name(self) -> str:
        return self.member.mux.name

    @property
    def threads_on_process(self) -> int:
        return len(self.member.mux.members)

    def signal_group(self, sig: int) -> bool:
        mux = self.member.mux
        if self.member.left:
            return False
        if [m for m in mux.members if m is not self.member]:
            # Others are on it: this thread leaves, the process stays theirs.
            threads, _ = mux.detach(self.member, ExitStatus(code=None, signal=sig))
            self._pool.soon(mux.unsubscribe, threads)
            return True
        return self._child.signal_group(sig)

    async def stop(
        self, grace_close: float = 2.0, grace_term: float = 2.0, grace_kill: float = 5.0
    ) -> StopResult:
        mux = self.member.mux
        if [m for m in mux.members if m is not self.member] or self.member.left:
            await self.member.close_stdin()
            return StopResult(self.member.status, "close")
        return await self._child.stop(grace_close, grace_term, grace_kill)


class SharedLauncher:
    """A session's launcher that joins a shared process (a SupervisedLauncher)."""

    def __init__(self, pool: SharedCodexPool) -> None:
        self._pool = pool
        self._current: SharedChild | None = None
        #: The native thread the runtime will resume (the session sets it): a process
        #: that has it loaded already must take it back.
        self.affinity: str | None = None

    async def launch(self, spec: LaunchSpec) -> VirtualProcess:
        member, child = await self._pool.join(spec, self.affinity)
        self._current = SharedChild(member, child, self._pool)
        return member

    @property
    def current(self) -> StoppableProcess | None:
        return self._current


class SharedCodexPool:
    """The shared Codex processes of one daemon, at most ``max_threads`` threads each."""

    def __init__(self, max_threads: int) -> None:
        self.max_threads = max_threads
        self.processes: list[tuple[CodexMultiplexer, ChildProcess]] = []
        self._numbers = 0
        self._nursery: trio.Nursery | None = None
        self._spawn_lock = trio.Lock()
        #: Processes the pool started, and how many threads joined one (bench, status).
        self.spawned = 0
        self.joined = 0

    async def run(self, *, task_status: trio.TaskStatus[SharedCodexPool]) -> None:
        """Hold the processes; leaving (cancellation) kills and reaps every one."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started(self)
            await trio.sleep_forever()

    def launcher(self, kind: ProviderKind, nursery: trio.Nursery) -> SupervisedLauncher:
        """A LauncherFactory: the session's nursery is not where the process lives."""
        return SharedLauncher(self)

    def soon(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    async def join(
        self, spec: LaunchSpec, affinity: str | None = None
    ) -> tuple[VirtualProcess, ChildProcess]:
        """A member for a launch: on the open process that has ``affinity`` (a native
        thread) loaded even when full (it stays loaded there anyway), else on one with
        room, else on a new process."""
        key = compatibility_key(spec)
        async with self._spawn_lock:
            for mux, child in self.processes:
                if affinity is not None and mux.key == key and mux.open and affinity in mux.loaded:
                    self.joined += 1
                    return mux.join(), child
            for mux, child in self.processes:
                if mux.key == key and mux.open and len(mux.members) < self.max_threads:
                    self.joined += 1
                    return mux.join(), child
            assert self._nursery is not None, "the shared codex pool is not running"
            child = await TrioProcessLauncher(self._nursery).launch(spec)
            self._numbers += 1
            mux = CodexMultiplexer(child, key=key, number=self._numbers)
            mux.on_done = self._done
            await self._nursery.start(mux.run)
            self.processes.append((mux, child))
            self.spawned += 1
            self.joined += 1
            log.info(
                "shared codex process %s spawned: pid %s (up to %d threads)",
                mux.name,
                child.pid,
                self.max_threads,
            )
            return mux.join(), child

    def _done(self, mux: CodexMultiplexer) -> None:
        """A process closing (its last thread left) or ended takes no new thread."""
        if mux.ended.is_set():
            self.processes = [(m, c) for m, c in self.processes if m is not mux]

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "process": mux.name,
                "pid": child.pid,
                "threads": len(mux.members),
                "open": mux.open,
            }
            for mux, child in self.processes
        ]

    def kill_all(self) -> None:
        for _mux, child in self.processes:
            child.signal_group(signal.SIGKILL)


__all__ = ["SharedChild", "SharedCodexPool", "SharedLauncher", "compatibility_key"]
