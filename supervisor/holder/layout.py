"""Where a holder keeps its files: ``<state-dir>/held/<holder-id>/``.

* ``journal``: every record (:mod:`supervisor.holder.wire`), appended in order;
* ``s``: the holder's 0600 Unix socket;
* ``holder.json``: the holder's and its provider's pids and start times (written
  once the provider runs), so ``t3orch status`` and a starting daemon find it;
* ``holder.log``: the holder's own log lines (it has no terminal).

The directory is 0700; it stays after the holder exits until the daemon that
reads the end of its journal removes it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import msgspec

from adapters.ownership import OwnerMark

HELD_DIR = "held"
#: Longest socket path bound or connected to directly (sun_path holds 108 bytes).
_SUN_PATH_MAX = 100


class HeldSpec(msgspec.Struct, rename="camel"):
    """What a holder runs (argv, the provider's complete environment, cwd, the line bound,
    the owning daemon's mark, the grace time): handed over on its stdin, never a file."""

    holder_id: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    max_line_bytes: int
    #: The owner mark (:mod:`adapters.ownership`) the provider carries: the daemon's.
    owner: str
    #: No daemon attached this long: the provider is stopped and the holder exits.
    grace_s: float


class HolderState(msgspec.Struct, rename="camel"):
    holder_id: str
    holder_pid: int
    holder_started_at: float
    provider_pid: int
    provider_started_at: float
    spawn_id: str
    owner: str
    grace_s: float
    #: Since when no daemon is attached (wall clock), None while one is.
    alone_since: float | None = None


@attrs.frozen
class HeldPaths:
    dir: Path

    @property
    def holder_id(self) -> str:
        return self.dir.name

    @property
    def journal(self) -> Path:
        return self.dir / "journal"

    @property
    def socket(self) -> Path:
        return self.dir / "s"

    @property
    def state(self) -> Path:
        return self.dir / "holder.json"

    @property
    def log(self) -> Path:
        return self.dir / "holder.log"

    def serves(self) -> bool:
        """Whether a holder serves this directory's socket: a copy of a state dir has no
        sockets (``t3orch.state.copy_state_dir``), so the holder its files name is the
        original's, not the copy's."""
        return self.socket.is_socket()

    def read_state(self) -> HolderState | None:
        """The holder's record, or None before it wrote one (or if it is unreadable)."""
        try:
            return msgspec.json.decode(self.state.read_bytes(), type=HolderState)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None


def held_root(state_dir: Path) -> Path:
    return state_dir / HELD_DIR


def held_dirs(state_dir: Path) -> list[HeldPaths]:
    """Every holder directory under ``state_dir``, oldest name first."""
    root = held_root(state_dir)
    try:
        return [HeldPaths(p) for p in sorted(root.iterdir()) if p.is_dir()]
    except FileNotFoundError:
        return []


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new 0600 file atomically (rename over)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@contextlib.contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits ``sun_path``: itself, or through an ``O_PATH``
    descriptor of its directory (``/proc/self/fd/N/s``) when the path is too long."""
    text = os.fspath(path)
    if len(text.encode()) <= _SUN_PATH_MAX:
        yield text
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def describe_held(state_dir: Path) -> list[dict[str, object]]:
    """The live holders of ``state_dir``: ids, pids, attached or how long their grace has
    left (``t3orch status``, ``t3orch held``). Read from their files, no daemon needed."""
    import time

    out: list[dict[str, object]] = []
    for paths in held_dirs(state_dir):
        state = paths.read_state()
        if state is None or not paths.serves():
            continue
        if not OwnerMark(state.holder_pid, state.holder_started_at).alive():
            continue
        left = None
        if state.alone_since is not None:
            left = max(0.0, state.grace_s - (time.time() - state.alone_since))
        out.append(
            {
                "holderId": state.holder_id,
                "holderPid": state.holder_pid,
                "providerPid": state.provider_pid,
                "attached": state.alone_since is None,
                "graceS": state.grace_s,
                "graceLeftS": None if left is None else round(left, 1),
            }
        )
    return out


def prune_held(state_dir: Path, keep: frozenset[str]) -> list[str]:
    """Remove the directories of holders that are gone (their runtimes are settled by
    now), except ``keep``; returns the ids removed."""
    import shutil

    alive = {str(h["holderId"]) for h in describe_held(state_dir)}
    removed = []
    for paths in held_dirs(state_dir):
        if paths.holder_id in keep or paths.holder_id in alive:
            continue
        shutil.rmtree(paths.dir, ignore_errors=True)
        removed.append(paths.holder_id)
    return removed
