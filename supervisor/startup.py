"""Before serving: kill what a dead daemon left running, then settle its records.

Providers die with the daemon (parent-death signal, and systemd's control-group
kill), so leftovers are rare; but a daemon started by hand and SIGKILLed under
a different parent can leave some. A recorded pid is only trusted together
with its process start time: a pid reused by an unrelated process is left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

import attrs
import psutil
import trio

from t3orch.service import CoreService
from t3orch.store.sqlite.backend import SQLiteStore

log = logging.getLogger(__name__)

#: Start times are compared to this precision (psutil reports 10 ms clock ticks).
START_TIME_TOLERANCE_S = 0.05


@attrs.frozen
class SweepResult:
    killed: list[int]
    skipped_reused: list[int]


def _matches(pid: int, started_at: float | None) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if started_at is not None and abs(proc.create_time() - started_at) > START_TIME_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            # Dead already, only not reaped yet (by init): nothing to kill, and
            # waiting for it would stall startup until init gets round to it.
            return None
        return proc
    except psutil.Error:
        return None


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def sweep_orphans(reader: SQLiteStore, *, grace_s: float = 2.0) -> SweepResult:
    """Terminate provider process groups recorded by a previous daemon that still run."""
    with reader.snapshot():
        sessions = [r.decode() for r in reader.rows("provider_session")]
    killed: list[int] = []
    skipped: list[int] = []
    victims: list[psutil.Process] = []
    for s in sessions:
        if s.pid is None or s.pid == os.getpid():
            continue
        proc = _matches(s.pid, s.process_started_at)
        if proc is None:
            if _running(s.pid):
                skipped.append(s.pid)
            continue
        try:
            # Each provider leads its own process group: take the whole group.
            os.killpg(os.getpgid(s.pid), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            continue
        victims.append(proc)
        killed.append(s.pid)
    if victims:
        _, alive = await trio.to_thread.run_sync(
            lambda: psutil.wait_procs(victims, timeout=grace_s)
        )
        for proc in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        log.warning("killed %d provider process group(s) left by a previous daemon", len(killed))
    return SweepResult(killed, skipped)


async def settle_previous_run(core: CoreService, reader: SQLiteStore) -> dict[str, int]:
    """The startup step: orphan sweep, then one reconciliation transaction."""
    sweep = await sweep_orphans(reader)
    counts = await core.reconcile("daemon_restart")
    counts["orphans_killed"] = len(sweep.killed)
    return counts
