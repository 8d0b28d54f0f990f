"""What the in-process daemon tests of the real binaries share: a row read, a bounded poll."""

from __future__ import annotations

from typing import Any

from t3orch.cli import polling
from t3orch.daemon import Daemon


def stored_row(daemon: Daemon, kind: str, id: str) -> Any:
    """The daemon's stored row of ``kind`` ``id``, decoded (None: not there)."""
    with daemon.core.reader.snapshot():
        row = daemon.core.reader.row(kind, id)
    return None if row is None else row.decode()


async def until(predicate: Any, within: float = 40.0) -> Any:
    """The first true value of ``predicate``, polled; trio.TooSlowError after ``within`` s."""
    return await polling.until(predicate, within, every=0.02)
