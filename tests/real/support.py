"""What the in-process daemon tests of the real binaries share: a row read, a bounded poll."""

from __future__ import annotations

from typing import Any

import trio

from t3orch.daemon import Daemon


def stored_row(daemon: Daemon, kind: str, id: str) -> Any:
    """The daemon's stored row of ``kind`` ``id``, decoded (None: not there)."""
    with daemon.core.reader.snapshot():
        row = daemon.core.reader.row(kind, id)
    return None if row is None else row.decode()


async def until(predicate: Any, within: float = 40.0) -> Any:
    """The first true value of ``predicate``, polled; trio.TooSlowError after ``within`` s."""
    with trio.fail_after(within):
        while not (value := predicate()):  # noqa: ASYNC110 - polling processes and rows
            await trio.sleep(0.02)
        return value
