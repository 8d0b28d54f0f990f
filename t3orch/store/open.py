"""Opening a store: the one place above the backend that knows which backend it is.

``open_log`` opens the daemon's log (the writer's connection, a reader for the
core, the single writer on its thread and the backend's background upkeep) as
one trio service; ``open_reader`` opens a read-only store for the CLI's
daemon-less reads and the API's snapshot connection. Everything else sees the
contract (``EventStore``, ``ReadModel``) only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from t3orch.clock import WallClock, system_clock
from t3orch.ids import IdFactory
from t3orch.store.broadcast import Broadcast
from t3orch.store.interface import DaemonRegistry, ReadStore, Store
from t3orch.store.sqlite.backend import SQLiteStore, Synchronous
from t3orch.store.sqlite.checkpointer import SAFETY_PAGES, WalCheckpointer
from t3orch.store.sqlite.registry import SQLiteRegistry
from t3orch.store.writer import EventWriter

__all__ = [
    "OpenLog",
    "Synchronous",
    "open_log",
    "open_reader",
    "open_registry",
    "open_writable",
]


@attrs.define
class OpenLog:
    #: The writer's store (its reads run on the writer's connection: tests only).
    store: Store
    #: A second connection for reads on the event loop, so they never wait on the writer.
    reader: ReadStore
    writer: EventWriter
    broadcast: Broadcast
    #: Where the store lives (its path), for the API's own reader and the state dir.
    location: str


def open_reader(path: str | Path) -> ReadStore:
    """A read-only store (it must exist; a store needing migration is refused)."""
    return SQLiteStore(path, readonly=True)


def open_registry(location: str | Path, *, readonly: bool = False) -> DaemonRegistry:
    """The fleet's daemon registry of the store at ``location`` (which must exist)."""
    return SQLiteRegistry(location, readonly=readonly)


def open_writable(
    path: str | Path,
    *,
    synchronous: Synchronous = "FULL",
    clock: WallClock = system_clock,
    ids: IdFactory | None = None,
) -> Store:
    """A store to write to without a writer (tools and tests that commit directly)."""
    return SQLiteStore(path, synchronous=synchronous, clock=clock, ids=ids)


async def _run_shielded(writer: EventWriter, *, task_status: trio.TaskStatus[None]) -> None:
    with trio.CancelScope(shield=True):
        await writer.run(task_status=task_status)


@asynccontextmanager
async def open_log(
    db_path: str | Path,
    *,
    synchronous: Synchronous = "FULL",
    clock: WallClock = system_clock,
    ids: IdFactory | None = None,
    max_batch: int = 256,
) -> AsyncIterator[OpenLog]:
    store = SQLiteStore(
        db_path, synchronous=synchronous, clock=clock, ids=ids, wal_autocheckpoint=SAFETY_PAGES
    )
    try:
        reader = SQLiteStore(db_path, readonly=True)
    except BaseException:
        store.close()
        raise
    broadcast = Broadcast()
    writer = EventWriter(store, broadcast, max_batch=max_batch, commit_loop=store.commit_loop)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(_run_shielded, writer)
            checkpoints = trio.CancelScope()

            async def checkpointing(*, task_status: trio.TaskStatus[None]) -> None:
                with checkpoints:
                    await WalCheckpointer(db_path, writer).run(task_status=task_status)

            if str(db_path) != ":memory:":
                await nursery.start(checkpointing)
            try:
                yield OpenLog(store, reader, writer, broadcast, str(db_path))
            finally:
                # The writer outlives everything nested in the block (a runtime recording
                # its release during shutdown): it stops only once the block has ended.
                writer.close()
                checkpoints.cancel()
    finally:
        broadcast.close()
        reader.close()
        store.close()
