"""Opening a store: the one place above the backend that knows which backend it is.

``open_log`` opens the daemon's log (the writer's connection, a reader for the
core, the single writer on its thread and the backend's background upkeep) as
one trio service; ``open_reader`` opens a read-only store for the CLI's
daemon-less reads and the API's snapshot connection. Everything else sees the
contract (``EventStore``, ``ReadModel``) only.

A store's *location* is a SQLite file's path, or a ``postgresql://`` URL (a log
shared by several daemons: ``store/postgres/``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from t3orch.clock import WallClock, system_clock
from t3orch.ids import IdFactory
from t3orch.store.broadcast import Broadcast
from t3orch.store.interface import DaemonRegistry, ReadStore, Store
from t3orch.store.postgres.backend import PostgresStore, is_postgres_url, open_pool, prepare
from t3orch.store.postgres.follow import LogFollower
from t3orch.store.postgres.registry import PostgresRegistry
from t3orch.store.sqlite.backend import SQLiteStore, Synchronous
from t3orch.store.sqlite.checkpointer import SAFETY_PAGES, WalCheckpointer
from t3orch.store.sqlite.registry import SQLiteRegistry
from t3orch.store.writer import EventWriter

__all__ = [
    "OpenLog",
    "Synchronous",
    "is_postgres_url",
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
    #: Where the store lives (its path or URL), for the API's own reader and the state dir.
    location: str


def open_reader(path: str | Path) -> ReadStore:
    """A read-only store (it must exist; a store needing migration is refused)."""
    if is_postgres_url(str(path)):
        return PostgresStore(str(path), readonly=True)
    return SQLiteStore(path, readonly=True)


def open_registry(location: str | Path, *, readonly: bool = False) -> DaemonRegistry:
    """The fleet's daemon registry of the store at ``location`` (which must exist)."""
    if is_postgres_url(str(location)):
        return PostgresRegistry(str(location), readonly=readonly)
    return SQLiteRegistry(location, readonly=readonly)


def open_writable(
    path: str | Path,
    *,
    synchronous: Synchronous = "FULL",
    clock: WallClock = system_clock,
    ids: IdFactory | None = None,
) -> Store:
    """A store to write to without a writer (tools and tests that commit directly)."""
    if is_postgres_url(str(path)):
        return PostgresStore(str(path), clock=clock, ids=ids)
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
    fsync: Callable[[int], None] = os.fsync,
) -> AsyncIterator[OpenLog]:
    """The daemon's log at ``db_path`` (a SQLite path or a PostgreSQL URL).

    ``fsync``: how the SQLite writer syncs its ``-wal`` (tests fake the filesystem).
    """
    if is_postgres_url(str(db_path)):
        async with _open_postgres_log(
            str(db_path), clock=clock, ids=ids, max_batch=max_batch
        ) as log:
            yield log
        return
    store = SQLiteStore(
        db_path,
        synchronous=synchronous,
        clock=clock,
        ids=ids,
        wal_autocheckpoint=SAFETY_PAGES,
        fsync=fsync,
    )
    try:
        reader = SQLiteStore(db_path, readonly=True)
    except BaseException:
        store.close()
        raise
    broadcast = Broadcast()
    writer = EventWriter(store, broadcast, max_batch=max_batch)
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


@asynccontextmanager
async def _open_postgres_log(
    url: str, *, clock: WallClock, ids: IdFactory | None, max_batch: int
) -> AsyncIterator[OpenLog]:
    """A shared log: the writer commits in order (the server's lock orders daemons);
    the follower publishes every daemon's commits in sequence order (follow.py)."""
    await trio.to_thread.run_sync(lambda: prepare(url, readonly=False))
    pool = await trio.to_thread.run_sync(open_pool, url)
    try:
        store = PostgresStore(url, clock=clock, ids=ids, pool=pool)
        reader = PostgresStore(url, readonly=True, pool=pool)
        published = await trio.to_thread.run_sync(store.last_sequence)
        # The writer publishes to the follower only; the follower to everyone.
        own = Broadcast()
        broadcast = Broadcast()
        follower = LogFollower(url, reader, broadcast, published)
        own.listen(follower.local)
        writer = EventWriter(store, own, max_batch=max_batch)
        async with trio.open_nursery() as nursery:
            following = trio.CancelScope()

            async def follow(*, task_status: trio.TaskStatus[None]) -> None:
                with following:
                    await follower.run(task_status=task_status)

            await nursery.start(follow)
            try:
                async with trio.open_nursery() as writing:
                    await writing.start(_run_shielded, writer)
                    try:
                        yield OpenLog(store, reader, writer, broadcast, url)
                    finally:
                        writer.close()
            finally:
                # After the writer's last batch (the inner nursery waited for it).
                following.cancel()
    finally:
        broadcast.close()
        await trio.to_thread.run_sync(pool.close)
