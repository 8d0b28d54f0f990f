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
"""

from __future__ import annotations

import os
import secrets

import attrs
import psutil

#: The environment variable that carries the mark.
OWNER_ENV = "T3ORCH_OWNER"
#: The environment variable that names one launch of a provider.
SPAWN_ENV = "T3ORCH_SPAWN"
#: Start times are compared to this precision (psutil reports 10 ms clock ticks).
START_TIME_TOLERANCE_S = 0.05


def _centiseconds(t: float) -> float:
    return round(t, 2)


@attrs.frozen
class OwnerMark:
    """A daemon process, named forever by its pid and the kernel's start time.

    The start time is kept to the kernel's clock tick (10 ms), so a mark read
    back from an environment equals the one it was written from.
    """

    pid: int
    started_at: float = attrs.field(converter=_centiseconds)

    def token(self) -> str:
        return f"{self.pid}:{self.started_at:.2f}"

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a reuse of its pid)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.started_at) > START_TIME_TOLERANCE_S:
                return False
            return bool(proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

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
        _self = (pid, OwnerMark(pid, float(psutil.Process(pid).create_time())))
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
