"""The API's own read connection, used off the event loop one read at a time.

Snapshots can be large (a long thread's turn items), so they run on a worker
thread. The API opens its own read-only connection for that instead of sharing
``core.reader``: the core's reader is used synchronously from the trio thread by
others, and one SQLite connection cannot hold two read transactions at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

from t3orch.store.interface import ReadStore
from t3orch.store.open import open_reader

T = TypeVar("T")


class ApiReader:
    def __init__(self, db_path: str) -> None:
        self.store = open_reader(db_path)
        # One at a time: the connection is shared by every API read.
        self._limiter = trio.CapacityLimiter(1)

    async def snapshot(self, fn: Callable[[ReadStore], T]) -> T:
        """``fn(store)`` inside one read transaction: every query sees one committed state."""

        def run() -> T:
            with self.store.snapshot():
                return fn(self.store)

        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    def close(self) -> None:
        self.store.close()
