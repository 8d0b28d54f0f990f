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

**Held** (``daemon.reattach_grace_s > 0``): each shared process runs under one
holder (:mod:`supervisor.holder`), whose journal has every thread's frames both
ways. Each thread's ProviderSession records that holder and its own committed
offset (its member reports the offsets of its own lines). After a daemon restart
the pool attaches once per holder and replays its journal once through a new
multiplexer, whose members (one per held session, pre-created with their tags and
offsets) mute their own lines up to their own offsets; request ids carry their
member's tag, so the renumbering and the thread routing come back from the journal.
"""

from __future__ import annotations

import hashlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio

from adapters.codex.multiplex import CodexMultiplexer, JournalReplay, VirtualProcess
from adapters.process import ChildProcess, StopResult, TrioProcessLauncher
from adapters.transport import ExitStatus, LaunchSpec
from supervisor.holder.client import (
    HeldProcess,
    HolderError,
    attach,
    holder_ref,
    start_holder,
)
from supervisor.holder.layout import HeldPaths
from supervisor.launcher import StoppableProcess, SupervisedLauncher
from supervisor.reattach import LIVE_SESSION, SHARED_MARK, Reattach
from t3orch.domain.provider import HolderRef, ProviderSession, ProviderThread
from t3orch.domain.vocab import ProviderKind
from t3orch.store.interface import ReadModel

#: The real process under a shared process: a child of the daemon's, or a holder's.
RealProcess = ChildProcess | HeldProcess


@attrs.frozen
class HolderSettings:
    """Where and how the pool's processes are held (``daemon.reattach_grace_s > 0``)."""

    root: Path
    grace_s: float
    owner: str


def shared_key(paths: HeldPaths) -> str | None:
    """The compatibility key of a shared process's holder, None for a holder of one."""
    try:
        return (paths.dir / SHARED_MARK).read_text().strip() or None
    except OSError:
        return None


log = logging.getLogger(__name__)


def compatibility_key(spec: LaunchSpec) -> str:
    """Threads whose launches have the same key may share a process."""
    body = msgspec.json.encode([list(spec.argv), sorted(spec.env.items()), spec.max_line_bytes])
    return hashlib.sha256(body).hexdigest()[:16]


class SharedChild:
    """A thread's share of a process, as the stop ladder sees it (StoppableProcess)."""

    def __init__(self, member: VirtualProcess, child: RealProcess, pool: SharedCodexPool) -> None:
        self.member = member
        self._child = child
        self._pool = pool

    @property
    def holder(self) -> HolderRef | None:
        """The holder of the process, for the thread's ProviderSession (None: not held)."""
        return holder_ref(self._child) if isinstance(self._child, HeldProcess) else None

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
        #: What the member's request ids carry (the session sets its provider session's
        #: id): the journal of a held process names who sent what by it.
        self.tag: str | None = None

    async def launch(self, spec: LaunchSpec) -> VirtualProcess:
        member, child = await self._pool.join(spec, self.affinity, self.tag)
        self._current = SharedChild(member, child, self._pool)
        return member

    @property
    def current(self) -> StoppableProcess | None:
        return self._current


class ReattachedLauncher:
    """The launcher of a runtime reattaching to a held shared process: its one "launch"
    is its member, pre-created by :meth:`SharedCodexPool.reattach_holders`."""

    def __init__(self, member: VirtualProcess, child: RealProcess, pool: SharedCodexPool) -> None:
        self._member = member
        self._child = child
        self._pool = pool
        self._current: SharedChild | None = None

    async def launch(self, spec: LaunchSpec) -> VirtualProcess:
        if self._current is not None or self._member.claimed:
            raise HolderError(f"{self._member.mux.name}: this thread was reattached once")
        self._member.claimed = True
        self._current = SharedChild(self._member, self._child, self._pool)
        await trio.lowlevel.checkpoint()
        return self._member

    @property
    def current(self) -> StoppableProcess | None:
        return self._current


class SharedCodexPool:
    """The shared Codex processes of one daemon, at most ``max_threads`` threads each."""

    def __init__(self, max_threads: int, holders: HolderSettings | None = None) -> None:
        self.max_threads = max_threads
        #: Where new processes are held (None: children of the daemon's).
        self.holders = holders
        self.processes: list[tuple[CodexMultiplexer, RealProcess]] = []
        #: Members pre-created for a reattach, by their session's id.
        self._reattached: dict[str, tuple[VirtualProcess, RealProcess]] = {}
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
        self, spec: LaunchSpec, affinity: str | None = None, tag: str | None = None
    ) -> tuple[VirtualProcess, RealProcess]:
        """A member for a launch: on the open process that has ``affinity`` (a native
        thread) loaded even when full (it stays loaded there anyway), else on one with
        room, else on a new process."""
        key = compatibility_key(spec)
        async with self._spawn_lock:
            for mux, child in self.processes:
                if affinity is not None and mux.key == key and mux.open and affinity in mux.loaded:
                    self.joined += 1
                    return mux.join(_free_tag(mux, tag)), child
            for mux, child in self.processes:
                if mux.key == key and mux.open and len(mux.members) < self.max_threads:
                    self.joined += 1
                    return mux.join(_free_tag(mux, tag)), child
            mux, child = await self._spawn(spec, key)
            self.joined += 1
            log.info(
                "shared codex process %s spawned: pid %s (up to %d threads%s)",
                mux.name,
                child.pid,
                self.max_threads,
                "" if mux.holder_id is None else f", held by {mux.holder_id}",
            )
            return mux.join(tag), child

    async def _spawn(self, spec: LaunchSpec, key: str) -> tuple[CodexMultiplexer, RealProcess]:
        assert self._nursery is not None, "the shared codex pool is not running"
        child: RealProcess
        if self.holders is None:
            child = await TrioProcessLauncher(self._nursery).launch(spec)
            self._numbers += 1
            mux = CodexMultiplexer(child, key=key, number=self._numbers)
        else:
            h = self.holders
            paths = await start_holder(h.root, spec, grace_s=h.grace_s, owner=h.owner)
            (paths.dir / SHARED_MARK).write_text(key)
            held = await attach(paths, 0)
            await self._nursery.start(held.serve)
            mux = self._held_mux(held, key)
            child = held
        await self._start(mux, child)
        self.spawned += 1
        return mux, child

    def _held_mux(self, held: HeldProcess, key: str) -> CodexMultiplexer:
        self._numbers += 1
        mux = CodexMultiplexer(
            held,
            key=key,
            number=self._numbers,
            holder_id=held.holder_id,
            journaled=held.receive_lines_with_offsets,
        )
        # A reattach's journal has the earlier daemon's requests: the routing's half.
        held.on_input = mux.replayed
        return mux

    async def _start(self, mux: CodexMultiplexer, child: RealProcess) -> None:
        assert self._nursery is not None
        mux.on_done = self._done
        await self._nursery.start(mux.run)
        self.processes.append((mux, child))

    # -- reattach (a daemon restart) -------------------------------------------------

    async def reattach_holders(self, held: list[Reattach]) -> list[Reattach]:
        """Attach once to each shared holder of ``held`` and replay its journal through
        a multiplexer whose members are the held sessions; returns those that failed."""
        assert self._nursery is not None, "the shared codex pool is not running"
        by_holder: dict[str, list[Reattach]] = {}
        for h in held:
            by_holder.setdefault(h.paths.holder_id, []).append(h)
        failed: list[Reattach] = []
        for group in by_holder.values():
            paths = group[0].paths
            try:
                child = await attach(paths, 0)
                await self._nursery.start(child.serve)
            except (HolderError, OSError) as exc:
                log.warning("shared holder %s: cannot reattach: %s", paths.holder_id, exc)
                failed.extend(group)
                continue
            mux = self._held_mux(child, shared_key(paths) or "")
            mux.replay = JournalReplay(child.welcome.journaled, _replayed(child))
            child.on_replayed = mux.replay_handed_out
            for h in group:
                self._reattached[h.session.id] = (
                    mux.join(h.session.id, committed=h.committed),
                    child,
                )
            await self._start(mux, child)
            log.info(
                "shared codex process %s (holder %s, pid %s) reattached with %d thread(s)",
                mux.name,
                paths.holder_id,
                child.pid,
                len(group),
            )
        return failed

    def reattach_launcher(self, held: Reattach) -> SupervisedLauncher:
        member, child = self._reattached.pop(held.session.id)
        return ReattachedLauncher(member, child, self)

    def drop_unclaimed(self) -> None:
        """Members no runtime took (its reattach failed) leave their process."""
        for member, _child in self._reattached.values():
            self.soon(member.mux.leave, member, ExitStatus(code=None, signal=None))
        self._reattached.clear()

    def leave_held(self) -> None:
        """The daemon goes: held processes stay with their holders (and their grace)."""
        for mux, child in self.processes:
            if isinstance(child, HeldProcess):
                mux.leave_running()
                child.leave_running()

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
                "holder": mux.holder_id,
            }
            for mux, child in self.processes
        ]

    def kill_all(self) -> None:
        for _mux, child in self.processes:
            child.signal_group(signal.SIGKILL)


def held_with_threads(held: list[dict[str, object]], reader: ReadModel) -> list[dict[str, object]]:
    """Each holder of ``held`` (``describe_held``) with the app threads whose live sessions
    it holds: one for a process of one thread, all of them for a shared one."""
    threads: dict[str, list[str]] = {}
    sessions: dict[str, str] = {
        s.id: s.holder.holder_id
        for s in reader.select_by_status(ProviderSession, LIVE_SESSION)
        if s.holder is not None
    }
    for pt in reader.select(ProviderThread):
        holder = sessions.get(pt.provider_session_id) if pt.provider_session_id else None
        if holder is not None and pt.app_thread_id is not None:
            threads.setdefault(holder, []).append(pt.app_thread_id)
    return [{**h, "threads": sorted(threads.get(str(h["holderId"]), []))} for h in held]


def _replayed(held: HeldProcess) -> Callable[[], bool]:
    return lambda: held.replayed


def _free_tag(mux: CodexMultiplexer, tag: str | None) -> str | None:
    """``tag``, unless a member of ``mux`` has it already (then one of its own)."""
    return None if tag is None or mux.member(tag) is not None else tag


__all__ = [
    "SHARED_MARK",
    "HolderSettings",
    "ReattachedLauncher",
    "SharedChild",
    "SharedCodexPool",
    "SharedLauncher",
    "compatibility_key",
    "held_with_threads",
    "shared_key",
]
