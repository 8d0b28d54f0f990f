"""The state directory: where the store, the token and the diagnostics live."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from t3orch.store.errors import StateDirInvalid

DB_NAME = "events.sqlite3"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "t3orch"


def resolve_state_dir(arg: str | None) -> Path:
    """``--state-dir``, else ``$T3ORCH_STATE_DIR``, else the XDG state home."""
    chosen = arg or os.environ.get("T3ORCH_STATE_DIR")
    return Path(chosen).expanduser().absolute() if chosen else default_state_dir()


def prepare_state_dir(path: Path, *, create: bool) -> Path:
    """Check (and for the daemon, create) the state dir; returns the database path."""
    if path.exists() and not path.is_dir():
        raise StateDirInvalid(f"state dir {path} exists but is not a directory")
    if not path.exists():
        if not create:
            raise StateDirInvalid(f"state dir {path} does not exist")
        try:
            path.mkdir(parents=True, mode=0o700)
        except OSError as exc:
            raise StateDirInvalid(f"cannot create state dir {path}: {exc.strerror}") from exc
    if create and not os.access(path, os.W_OK | os.X_OK):
        raise StateDirInvalid(f"state dir {path} is not writable")
    return path / DB_NAME


def state_dir_identity(path: Path) -> str:
    """``device:inode`` of the state dir: moving it keeps it, a copy of it has another."""
    st = path.stat()
    return f"{st.st_dev}:{st.st_ino}"


#: What a copy of a state dir leaves out besides sockets: the daemon's lock (a copy's
#: daemon takes its own) and files being written.
_NOT_COPIED = ("daemon.lock", "*.tmp")


def copy_state_dir(source: Path, target: Path) -> None:
    """Copy a state dir, live or not (a backup, a crash drill's copy), as a daemon can
    start on it: the Unix sockets are left out (the API's, each holder's: a socket
    cannot be copied, and a copy's daemon must not reach the original's holders
    through one), and so are the lock and files being written."""
    names_out = shutil.ignore_patterns(*_NOT_COPIED)

    def ignore(directory: str, names: list[str]) -> set[str]:
        out = set(names_out(directory, names))
        for name in names:
            try:
                if stat.S_ISSOCK(os.lstat(os.path.join(directory, name)).st_mode):
                    out.add(name)
            except FileNotFoundError:
                out.add(name)  # gone meanwhile (a holder that ended)
        return out

    shutil.copytree(source, target, ignore=ignore, symlinks=True)
