"""Which daemon spawned a process: a mark every provider process and its descendants carry.

Each provider is started with ``T3ORCH_OWNER=<daemon pid>:<daemon start time>``
and ``T3ORCH_SPAWN=<random id of this launch>`` in its environment. Children
inherit the environment, so a helper the provider started (in its process group
or escaped into a session of its own) still carries the marks after the
provider, or the daemon, is dead. They are read from ``/proc/PID/environ``
(same user): the startup sweep takes the owner mark as evidence that a process
really is a dead daemon's leftover and not an unrelated one that reused an id;
a provider's exit takes the spawn id to find the helpers that left its group.
A process that scrubs its environment loses the marks: it is not found.

**Start times are on the boot clock**, seconds since boot, read from the kernel's
``starttime`` (``/proc/PID/stat``): a pid with its start time names one process
forever. Not ``psutil.Process.create_time()``: that adds the kernel's boot time,
which is the wall clock minus the time since boot, in whole seconds, so it moves
when the wall clock is stepped (NTP's first sync, a VM resumed, an administrator's
``date``) — measured here: a second between a holder's start and ``t3orch
stop-agents``, which then took the live holder for a reused pid and left it
running. A start recorded by an earlier version (the wall clock, > 1e9) is still
understood, to the second.
"""

from __future__ import annotations

import os
import secrets
import time

import attrs
import psutil

#: The environment variable that carries the mark.
OWNER_ENV = "T3ORCH_OWNER"
#: The environment variable that names one launch of a provider.
SPAWN_ENV = "T3ORCH_SPAWN"
#: Start times are compared to this precision (the kernel keeps them in 10 ms ticks).
START_TIME_TOLERANCE_S = 0.05
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
#: A recorded start time above this is an earlier version's, on the wall clock.
_WALL_CLOCK = 1e9


def _centiseconds(t: float) -> float:
    return round(t, 2)


def _stat(pid: int) -> tuple[bytes, float] | None:
    """``pid``'s state letter and start (seconds since boot); None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields follow its last ")".
    fields = data.rpartition(b")")[2].split()
    return fields[0], _centiseconds(int(fields[19]) / _TICKS_PER_S)


def started_at(pid: int) -> float | None:
    """When ``pid`` started, in seconds since boot (the boot clock); None if it is gone."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def boot_clock() -> float:
    """Now, on the clock of :func:`started_at`."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _on_boot_clock(recorded: float) -> tuple[float, float]:
    """A recorded start on the boot clock, and the precision to compare it to."""
    if recorded > _WALL_CLOCK:  # an earlier version's: boot time (whole seconds) + since boot
        return recorded - psutil.boot_time(), 1.0 + START_TIME_TOLERANCE_S
    return recorded, START_TIME_TOLERANCE_S


def same_start(start: float, recorded: float) -> bool:
    """Whether a process that started at ``start`` is the one recorded at ``recorded``."""
    at, precision = _on_boot_clock(recorded)
    return abs(start - at) <= precision


def started_since(start: float, recorded: float) -> bool:
    """Whether a process that started at ``start`` started at or after ``recorded``."""
    at, precision = _on_boot_clock(recorded)
    return start >= at - precision


@attrs.frozen
class OwnerMark:
    """A daemon process, named forever by its pid and the kernel's start time.

    The start time (the boot clock, :func:`started_at`) is kept to the kernel's clock
    tick (10 ms), so a mark read back from an environment equals the one it was
    written from.
    """

    pid: int
    started_at: float = attrs.field(converter=_centiseconds)

    def token(self) -> str:
        return f"{self.pid}:{self.started_at:.2f}"

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a reuse of its pid)."""
        stat = _stat(self.pid)
        return stat is not None and stat[0] != b"Z" and same_start(stat[1], self.started_at)

    @staticmethod
    def parse(token: str) -> OwnerMark | None:
        pid, sep, started = token.partition(":")
        try:
            return OwnerMark(int(pid), float(started)) if sep else None
        except ValueError:
            return None


_self: tuple[int, OwnerMark] | None = None


def this_process() -> OwnerMark:
    """The mark of the running process (recomputed after a fork)."""
    global _self
    pid = os.getpid()
    if _self is None or _self[0] != pid:
        start = started_at(pid)
        assert start is not None, "this process has a /proc entry"
        _self = (pid, OwnerMark(pid, start))
    return _self[1]


def mark_of(proc: psutil.Process) -> OwnerMark | None:
    """The owner mark in a process's environment; None if absent or unreadable."""
    try:
        token = proc.environ().get(OWNER_ENV)
    except psutil.Error:
        return None
    return OwnerMark.parse(token) if token else None


def new_spawn_id() -> str:
    return secrets.token_hex(8)


def spawned_by(spawn_id: str, *, exclude: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Live processes that carry ``spawn_id``: what one provider launch started, wherever."""
    out = []
    for proc in psutil.process_iter():
        if proc.pid in exclude or proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(SPAWN_ENV) != spawn_id:
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        out.append(proc)
    return out
