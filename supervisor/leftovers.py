"""Commands an interrupted turn left running.

Measured on Codex 0.169: a turn interrupted while its shell command runs ends
``interrupted`` at once, but the command (which Codex starts in a session of its
own, ``setsid``) keeps running until Codex exits. The user interrupted the work:
it must not go on unbeknown. So once an interrupted turn has ended, the
provider's descendants that started during the turn are looked at:

* those that lead a session of their own are the provider's commands: their
  process group gets SIGTERM, then SIGKILL after a grace;
* any other (still in the provider's own group: its own helper, or a command it
  will stop itself) is left to the provider and only reported.

Either way the run's thread gets a ``provider.diagnostic`` that names them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import attrs
import psutil
import trio

from adapters.ownership import START_TIME_TOLERANCE_S, boot_clock, started_at

#: How long an interrupted turn's command has after SIGTERM before SIGKILL.
TERM_GRACE_S = 2.0


@attrs.frozen
class Leftover:
    pid: int
    command: str


@attrs.frozen
class TurnLeftovers:
    stopped: list[Leftover]
    still_running: list[Leftover]

    def describe(self, run_id: str) -> str | None:
        parts = []
        if self.stopped:
            parts.append(
                f"stopped {len(self.stopped)} command(s) interrupted run {run_id} left running: "
                + "; ".join(f"{c.command} (pid {c.pid})" for c in self.stopped)
            )
        if self.still_running:
            parts.append(
                f"{len(self.still_running)} process(es) started during interrupted run {run_id} "
                "still run in the provider's group (they end with it): "
                + "; ".join(f"{c.command} (pid {c.pid})" for c in self.still_running)
            )
        return ". ".join(parts) or None


def process_clock() -> float:
    """Now, on the clock of a process's start time (the boot clock, ``adapters.ownership``)."""
    return boot_clock()


def _command(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:200] or proc.name()
    except psutil.Error:
        return "?"


def _started_during_turn(provider_pid: int, since: float, until: float) -> list[psutil.Process]:
    try:
        children = psutil.Process(provider_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for proc in children:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            started = started_at(proc.pid)
            if started is None:
                continue
            if not since - START_TIME_TOLERANCE_S <= started <= until + START_TIME_TOLERANCE_S:
                continue  # not this turn's: an earlier helper, or the next turn's work
        except psutil.Error:
            continue
        out.append(proc)
    return out


def _leads_own_session(proc: psutil.Process) -> bool:
    with contextlib.suppress(OSError):
        return os.getsid(proc.pid) == proc.pid
    return False


async def stop_turn_leftovers(
    provider_pid: int,
    since: float,
    until: float,
    *,
    grace_s: float = TERM_GRACE_S,
    within: str | None = None,
) -> TurnLeftovers:
    """Stop the commands an interrupted turn left running (``since`` to ``until``, both on
    :func:`process_clock`).

    ``within``: the provider process is shared with other threads (issue 21), whose
    commands of the same minutes must not be stopped: only commands working inside
    this directory (the thread's cwd) count as the turn's.
    """
    procs = _started_during_turn(provider_pid, since, until)
    if within is not None:
        procs = [p for p in procs if _works_within(p, within)]
    leaders = [p for p in procs if _leads_own_session(p)]
    stopped: list[Leftover] = []
    groups: list[tuple[psutil.Process, int]] = []
    for proc in leaders:
        desc = _command(proc)
        try:
            # psutil checks that the pid still names the process it listed.
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            continue
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)  # its pipeline: the group it leads
        groups.append((proc, proc.pid))
        stopped.append(Leftover(proc.pid, desc))
    deadline = time.monotonic() + grace_s
    while groups and time.monotonic() < deadline:
        groups = [(p, g) for p, g in groups if _running(p)]
        if groups:
            await trio.sleep(0.05)
    for proc, group in groups:
        if _running(proc):
            # The leader still runs, so the group id is still its own.
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
    in_groups = {p.pid for p in leaders}
    still = [
        Leftover(p.pid, _command(p))
        for p in procs
        if p.pid not in in_groups and not _in_stopped_group(p, in_groups) and _running(p)
    ]
    return TurnLeftovers(stopped, still)


def _works_within(proc: psutil.Process, directory: str) -> bool:
    try:
        cwd = proc.cwd()
    except psutil.Error:
        return False
    root = os.path.realpath(directory)
    return cwd == root or cwd.startswith(root.rstrip(os.sep) + os.sep)


def _running(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _in_stopped_group(proc: psutil.Process, groups: set[int]) -> bool:
    with contextlib.suppress(OSError):
        return os.getpgid(proc.pid) in groups
    return False
