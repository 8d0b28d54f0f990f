"""The state directory: where the store, the token and the diagnostics live."""

from __future__ import annotations

import os
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
