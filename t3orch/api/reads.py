"""The API's own read connection, used off the event loop one read at a time.

Snapshots can be large (a long thread's turn items), so they run on a worker
thread. The API opens its own read-only connection for that instead of sharing
``core.reader``: the core's reader is used synchronously from the trio thread by
others, and one SQLite connection cannot hold two read transactions at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import trio

from t3orch.projections.views import FleetHosts, fleet_hosts
from t3orch.store.interface import ReadStore
from t3orch.store.open import open_reader, open_registry

T = TypeVar("T")


class ApiReader:
    def __init__(self, db_path: str) -> None:
        self.store = open_reader(db_path)
        self.registry = open_registry(db_path, readonly=True)
        # One at a time: the connection is shared by every API read.
        self._limiter = trio.CapacityLimiter(1)

    async def snapshot(self, fn: Callable[[ReadStore], T]) -> T:
        """``fn(store)`` inside one read transaction: every query sees one committed state."""

        def run() -> T:
            with self.store.snapshot():
                return fn(self.store)

        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    async def hosts(self) -> FleetHosts:
        """Each fleet daemon's host and whether it is online, as of now."""
        daemons = await trio.to_thread.run_sync(self.registry.daemons, limiter=self._limiter)
        return fleet_hosts(daemons, time.time())

    def close(self) -> None:
        self.registry.close()
        self.store.close()
