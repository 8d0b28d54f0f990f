"""This daemon as a member of the fleet: its stable id and its heartbeat.

The id lives in ``<state-dir>/daemon-id`` (made once): the state dir is what a
daemon is, so a restart is the same member and settles what it owned. The row in
the registry (``DaemonRecord``) is renewed every ``daemon.heartbeat_s``; others
count the daemon offline once ``expires_at`` passes, and a clean stop expires it
at once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import msgspec
import psutil
import trio

from t3orch.ids import DaemonId, IdFactory
from t3orch.store.errors import StateDirInvalid, StoreError
from t3orch.store.interface import DaemonRecord, DaemonRegistry

log = logging.getLogger(__name__)

DAEMON_ID_FILE = "daemon-id"


def load_or_create_daemon_id(state_dir: Path) -> DaemonId:
    """The state dir's daemon id, made on its first serve."""
    path = state_dir / DAEMON_ID_FILE
    if path.exists():
        return _read_daemon_id(path)
    new = IdFactory().new(DaemonId)
    tmp = path.with_name(f".{DAEMON_ID_FILE}.{os.getpid()}")
    try:
        tmp.write_text(new + "\n")
        # A link appears whole or not at all: a crash never leaves an empty id file.
        os.link(tmp, path)
    except FileExistsError:
        return _read_daemon_id(path)
    except OSError as exc:
        raise StateDirInvalid(f"cannot create {path}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return new


def _read_daemon_id(path: Path) -> DaemonId:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise StateDirInvalid(f"cannot read {path}: {exc.strerror}") from None
    if not text.startswith("dmn_") or not text[4:].isalnum():
        raise StateDirInvalid(f"{path} does not hold a t3orch daemon id (dmn_…): {text!r}")
    return DaemonId(text)


def host_name(configured: str) -> str:
    return configured or socket.gethostname()


def _running(pid: int, heartbeat_at: float) -> bool:
    """Whether ``pid`` still names the process that wrote a row's last heartbeat.

    That process had the pid at ``heartbeat_at``: one that reused it started after. Not
    compared with the row's ``started_at`` (a fraction of a second after the process
    start): ``create_time`` is on the wall clock, so a step of the clock forward since
    (NTP's first sync) made a live daemon look like a reused pid and let its copy serve.
    Measured from the last beat, a step would have to exceed the daemon's age; the
    doubt (the boot time's whole second) counts as running: a refusal says what to do.
    """
    try:
        return psutil.Process(pid).create_time() <= heartbeat_at + 1.0
    except psutil.Error:
        return False


@attrs.define
class Membership:
    """This daemon's row in the registry, and what it last read of the others'."""

    registry: DaemonRegistry
    me: DaemonRecord
    heartbeat_s: float
    timeout_s: float
    clock: Callable[[], float] = time.time
    #: Every daemon as of the last beat (this one included), by id.
    known: dict[str, DaemonRecord] = attrs.field(factory=dict)
    _limiter: trio.CapacityLimiter = attrs.field(factory=lambda: trio.CapacityLimiter(1))

    @classmethod
    def starting(
        cls,
        registry: DaemonRegistry,
        daemon_id: DaemonId,
        *,
        host: str,
        version: str,
        token: str,
        heartbeat_s: float,
        timeout_s: float,
        clock: Callable[[], float] = time.time,
    ) -> Membership:
        now = clock()
        me = DaemonRecord(
            daemon_id=daemon_id,
            host=host,
            version=version,
            pid=os.getpid(),
            api_url="",
            token=token,
            started_at=now,
            heartbeat_at=now,
            expires_at=now,
        )
        return cls(registry, me, heartbeat_s, timeout_s, clock)

    @property
    def daemon_id(self) -> DaemonId:
        return self.me.daemon_id

    def listening(self, api_url: str) -> None:
        """Where other daemons reach this one (from the next beat on)."""
        self.me = msgspec.structs.replace(self.me, api_url=api_url)

    async def _write(self, record: DaemonRecord) -> None:
        def write() -> list[DaemonRecord]:
            self.registry.upsert_daemon(record)
            return self.registry.daemons()

        found = await trio.to_thread.run_sync(write, limiter=self._limiter)
        self.known = {d.daemon_id: d for d in found}

    async def beat(self) -> None:
        now = self.clock()
        self.me = msgspec.structs.replace(
            self.me, heartbeat_at=now, expires_at=now + self.timeout_s
        )
        await self._write(self.me)

    async def lookup(self, daemon_id: str) -> DaemonRecord | None:
        """The daemon's row as it is now (not as of the last beat)."""

        def read() -> list[DaemonRecord]:
            return self.registry.daemons()

        found = await trio.to_thread.run_sync(read, limiter=self._limiter)
        self.known = {d.daemon_id: d for d in found}
        return self.known.get(daemon_id)

    async def check_alone(self, where: Path) -> None:
        """Refuse to serve a shared log that another live daemon serves under this id.

        A copy of a state dir carries its ``daemon-id``: on one shared log the two would
        own, settle and route the same threads. The row of a predecessor that died
        (its pid gone, or reused by a later process) is no such daemon.
        """
        theirs = await self.lookup(self.daemon_id)
        if theirs is None or not theirs.online(self.clock()):
            return
        if (theirs.host, theirs.pid) == (self.me.host, self.me.pid):
            return
        if theirs.host == self.me.host and not _running(theirs.pid, theirs.heartbeat_at):
            return
        raise StateDirInvalid(
            f"daemon {self.daemon_id} already serves this log from {theirs.host} (pid "
            f"{theirs.pid}, last heartbeat {self.clock() - theirs.heartbeat_at:.0f}s ago): "
            f"is {where} a copy of its state dir? Stop that daemon, or remove "
            f"{where / DAEMON_ID_FILE} to serve as a new member (if it is gone, its row "
            f"lapses in {max(0.0, theirs.expires_at - self.clock()):.0f}s)"
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, then beat until cancelled; on the way out, say offline at once."""
        await self.beat()
        task_status.started()
        try:
            while True:
                await trio.sleep(self.heartbeat_s)
                try:
                    await self.beat()
                except StoreError as exc:
                    # A missed beat is not a reason to stop serving: the next one may land.
                    log.warning("fleet heartbeat failed: %s", exc)
        finally:
            with trio.CancelScope(shield=True):
                gone = msgspec.structs.replace(self.me, expires_at=self.clock())
                try:
                    await self._write(gone)
                except StoreError as exc:
                    log.warning("could not mark this daemon offline in the registry: %s", exc)
