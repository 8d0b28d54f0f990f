"""Before serving: kill what a dead daemon left running, then settle its records.

A provider leader dies with its daemon (parent-death signal), but what it
started does not: a helper in its process group, or one that escaped into a
session of its own. So the sweep works on what the leader leaves behind, and it
kills only with evidence, never on an id alone:

* **The owner must be gone.** Each recorded process names the daemon that
  spawned it (pid + start time, :class:`~t3orch.domain.provider.ProcessOwner`).
  While that daemon lives its processes are its own, whatever state dir we were
  opened on: a daemon on a copy of a live state dir (a restored backup, a drill)
  leaves the original's agents alone and says that the dir is a copy.
* **The group must be the recorded one.** With the leader alive, its start time
  must match the record (else the pid was reused). With the leader dead, group
  members count only if they are in the recorded session and group, started no
  earlier than the leader, and one of them carries the dead owner's mark
  (:mod:`adapters.ownership`) in its environment; Linux does not hand out a pid
  that is still some group's id, so such a group cannot be a stranger's.
* **Escaped descendants** (a new session, another group) are found by the mark.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import attrs
import psutil
import trio

from adapters.ownership import (
    SPAWN_ENV,
    OwnerMark,
    mark_of,
    same_start,
    started_at,
    started_since,
    this_process,
)
from supervisor.holder.client import HOLDER_ENV
from supervisor.reattach import Reattach, held_of
from t3orch.domain.provider import ProcessOwner, ProviderSession
from t3orch.service import CoreService
from t3orch.store.interface import ReadModel

log = logging.getLogger(__name__)

#: The daemon status file (written by the daemon once it serves); a copy carries it along.
STATUS_FILE = "daemon.json"


@attrs.frozen
class SweepResult:
    #: Pids signalled: group members of dead daemons' providers, and marked escapees.
    killed: list[int]
    #: Recorded pids now naming another process (reused): left alone.
    skipped_reused: list[int]
    #: Recorded pids whose owning daemon still runs: its own, left alone.
    left_to_live_owner: list[int]
    #: Live daemons that own this store's records but serve another state dir.
    copy_of: list[ProcessOwner]


@attrs.frozen
class _Proc:
    proc: psutil.Process
    pgid: int
    sid: int
    started_at: float
    zombie: bool


def _process_table() -> dict[int, _Proc]:
    table: dict[int, _Proc] = {}
    for proc in psutil.process_iter():
        pid = proc.pid
        start = started_at(pid)
        if start is None:
            continue
        try:
            table[pid] = _Proc(
                proc,
                os.getpgid(pid),
                os.getsid(pid),
                start,
                proc.status() == psutil.STATUS_ZOMBIE,
            )
        except (psutil.Error, OSError):
            continue
    return table


def _owner_mark(owner: ProcessOwner) -> OwnerMark:
    return OwnerMark(owner.daemon_pid, owner.daemon_started_at)


def _group(
    s: ProviderSession, pid: int, owner: OwnerMark | None, table: dict[int, _Proc]
) -> list[_Proc] | None:
    """The live members of the recorded provider's group; None if the id was reused."""
    started = s.process_started_at
    leader = table.get(pid)
    if leader is not None:
        if started is not None and not same_start(leader.started_at, started):
            return None  # the pid names another process now (and so does the group id)
        return [p for p in table.values() if p.pgid == pid and not p.zombie]
    if started is None or owner is None:
        return []  # a record from before owners were kept: a dead leader proves nothing
    members = [
        p
        for p in table.values()
        if p.pgid == pid and p.sid == pid and not p.zombie and started_since(p.started_at, started)
    ]
    if members and not any(mark_of(p.proc) == owner for p in members):
        log.warning(
            "process group %d has %d member(s) but none carries the mark of daemon %d: left alone",
            pid,
            len(members),
            owner.pid,
        )
        return []
    return members


def _marked(
    owners: Iterable[OwnerMark], table: dict[int, _Proc], spared: Spared | None = None
) -> list[_Proc]:
    """Processes anywhere that carry a dead owner's mark (escaped the provider's group)."""
    dead = set(owners)
    if not dead:
        return []
    out = []
    for p in table.values():
        if p.zombie:
            continue
        mark = mark_of(p.proc)
        if mark in dead and started_since(p.started_at, mark.started_at):
            if spared is not None and spared.spares(p.proc):
                continue
            out.append(p)
    return out


@attrs.frozen
class Spared:
    """What live holders keep running: their own processes and their providers' launches
    (found by the marks in their environments), left to the daemon that reattaches."""

    holder_ids: frozenset[str]
    spawn_ids: frozenset[str]

    def spares(self, proc: psutil.Process) -> bool:
        try:
            env = proc.environ()
        except psutil.Error:
            return False
        return env.get(HOLDER_ENV) in self.holder_ids or env.get(SPAWN_ENV) in self.spawn_ids


def _signal(procs: Iterable[_Proc], sig: int) -> list[_Proc]:
    sent = []
    for p in procs:
        try:
            # psutil checks that the pid still names the process it saw (start time).
            p.proc.send_signal(sig)
        except psutil.Error:
            continue
        sent.append(p)
    return sent


def _gone(p: _Proc) -> bool:
    try:
        return bool(p.proc.status() == psutil.STATUS_ZOMBIE) or not p.proc.is_running()
    except psutil.Error:
        return True


async def _wait_gone(procs: list[_Proc], within: float) -> list[_Proc]:
    """Until each is dead (a zombie counts: init reaps it, not us); returns those still alive."""
    deadline = time.monotonic() + within
    alive = procs
    while alive:
        alive = [p for p in alive if not _gone(p)]
        if not alive or time.monotonic() >= deadline:
            break
        await trio.sleep(0.02)
    return alive


def _previous_status_owner(state_dir: Path | None) -> ProcessOwner | None:
    """The owner a copied ``daemon.json`` names (the daemon that last served the original)."""
    if state_dir is None:
        return None
    try:
        data = json.loads((state_dir / STATUS_FILE).read_text())
        owner = data.get("owner")
        return ProcessOwner(
            daemon_pid=int(owner["daemonPid"]),
            daemon_started_at=float(owner["daemonStartedAt"]),
            state_dir=str(owner["stateDir"]),
            state_dir_id=str(owner["stateDirId"]),
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


@attrs.define
class _Plan:
    victims: dict[int, _Proc] = attrs.field(factory=dict)
    skipped: list[int] = attrs.field(factory=list)
    left: list[int] = attrs.field(factory=list)
    copies: dict[OwnerMark, ProcessOwner] = attrs.field(factory=dict)


@attrs.define
class _Planner:
    """Which processes the records of this store prove to be a dead daemon's leftovers."""

    sessions: list[ProviderSession]
    me: ProcessOwner | None
    spared: Spared | None = None
    ours: OwnerMark = attrs.field(factory=this_process)
    protected: frozenset[int] = attrs.field(
        factory=lambda: frozenset({os.getpid(), *(p.pid for p in psutil.Process().parents())})
    )
    #: One liveness check per daemon, not per row (a store holds many rows per daemon).
    _alive: dict[OwnerMark, bool] = attrs.field(factory=dict)

    def live_elsewhere(self, owner: ProcessOwner, plan: _Plan) -> bool:
        mark = _owner_mark(owner)
        if mark == self.ours:
            return False
        if mark not in self._alive:
            self._alive[mark] = mark.alive()
        if not self._alive[mark]:
            return False
        if self.me is not None and owner.state_dir_id != self.me.state_dir_id:
            plan.copies[mark] = owner
        return True

    def plan(self, table: dict[int, _Proc]) -> _Plan:
        plan = _Plan()
        dead: set[OwnerMark] = set()
        for s in self.sessions:
            owner = s.owner
            mark = _owner_mark(owner) if owner is not None else None
            if owner is not None:
                if self.live_elsewhere(owner, plan):
                    if s.pid is not None:
                        plan.left.append(s.pid)
                    continue
                if mark != self.ours:
                    assert mark is not None
                    dead.add(mark)
            if s.pid is None or s.pid in self.protected:
                continue
            members = _group(s, s.pid, mark, table)
            if members is None:
                plan.skipped.append(s.pid)
                continue
            plan.victims.update((p.proc.pid, p) for p in members)
        plan.victims.update((p.proc.pid, p) for p in _marked(dead, table, self.spared))
        for pid in self.protected:
            plan.victims.pop(pid, None)
        return plan


async def sweep_orphans(
    reader: ReadModel,
    *,
    me: ProcessOwner | None = None,
    state_dir: Path | None = None,
    grace_s: float = 2.0,
    daemon_id: str | None = None,
    held: list[Reattach] | None = None,
) -> SweepResult:
    """Terminate what dead daemons recorded in this store left running; leave live ones' alone
    (and what live holders keep, ``held``: the daemon reattaches to it).

    ``daemon_id``: in a fleet, only this daemon's sessions (and those without an
    owner) are looked at: another daemon's pids name processes of its own machine.
    """
    kept = {r.session.id for r in held or ()}
    sessions = [
        s
        for s in reader.select(ProviderSession)
        if s.id not in kept and (daemon_id is None or s.owner_daemon_id in (None, daemon_id))
    ]
    spared = Spared(
        frozenset(r.state.holder_id for r in held or ()),
        frozenset(r.state.spawn_id for r in held or ()),
    )
    planner = _Planner(sessions, me, spared if held else None)
    plan = planner.plan(_process_table())
    previous = _previous_status_owner(state_dir)
    if previous is not None:
        planner.live_elsewhere(previous, plan)

    killed = {p.proc.pid: p for p in _signal(plan.victims.values(), signal.SIGTERM)}
    if killed:
        await _wait_gone(list(killed.values()), grace_s)
        # Again, on a fresh table: what ignored SIGTERM, and what was forked meanwhile.
        stragglers = _signal(planner.plan(_process_table()).victims.values(), signal.SIGKILL)
        killed.update((p.proc.pid, p) for p in stragglers)
        await _wait_gone(stragglers, grace_s)
        log.warning("killed %d process(es) left running by a previous daemon", len(killed))
    return SweepResult(sorted(killed), plan.skipped, plan.left, list(plan.copies.values()))


def copy_message(state_dir: Path | None, owner: ProcessOwner) -> str:
    here = f"state dir {state_dir}" if state_dir is not None else "this state dir"
    return (
        f"{here} is a copy of {owner.state_dir}, whose daemon (pid {owner.daemon_pid}) is "
        f"running: its provider processes are left alone, and runs it had in flight are "
        f"settled here as interrupted by daemon_restart"
    )


async def settle_previous_run(
    core: CoreService,
    reader: ReadModel,
    *,
    me: ProcessOwner | None = None,
    state_dir: Path | None = None,
    held: list[Reattach] | None = None,
) -> dict[str, int]:
    """The startup step: orphan sweep, then one reconciliation transaction; what live
    holders keep (``held``) is neither swept nor settled."""
    sweep = await sweep_orphans(
        reader, me=me, state_dir=state_dir, daemon_id=core.daemon_id, held=held
    )
    for owner in sweep.copy_of:
        message = copy_message(state_dir, owner)
        log.warning("%s", message)
        await core.note(None, "warning", "state_dir_copy", message)
    swept = {
        "orphans_killed": len(sweep.killed),
        "orphans_left_to_live_daemon": len(sweep.left_to_live_owner),
        "copy_of_live_state_dir": len(sweep.copy_of),
    }
    return await core.reconcile("daemon_restart", swept, held_of(held or []))
