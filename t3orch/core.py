"""Opening the core: store + writer + command service, as one trio service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from t3orch.clock import WallClock, system_clock
from t3orch.ids import IdFactory
from t3orch.service import CoreService
from t3orch.store.broadcast import Broadcast
from t3orch.store.sqlite.backend import SQLiteStore, Synchronous
from t3orch.store.sqlite.checkpointer import SAFETY_PAGES, WalCheckpointer
from t3orch.store.writer import EventWriter


@attrs.define
class Core:
    store: SQLiteStore
    #: A second connection for snapshots, so reads never wait on the writer thread.
    reader: SQLiteStore
    writer: EventWriter
    service: CoreService
    broadcast: Broadcast


async def _run_shielded(writer: EventWriter, *, task_status: trio.TaskStatus[None]) -> None:
    with trio.CancelScope(shield=True):
        await writer.run(task_status=task_status)


@asynccontextmanager
async def open_core(
    db_path: str | Path,
    *,
    synchronous: Synchronous = "FULL",
    clock: WallClock = system_clock,
    ids: IdFactory | None = None,
    max_batch: int = 256,
) -> AsyncIterator[Core]:
    ids = ids or IdFactory()
    store = SQLiteStore(
        db_path, synchronous=synchronous, clock=clock, ids=ids, wal_autocheckpoint=SAFETY_PAGES
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
                yield Core(store, reader, writer, CoreService(writer, ids), broadcast)
            finally:
                # The writer outlives everything nested in the block (a runtime recording
                # its release during shutdown): it stops only once the block has ended.
                writer.close()
                checkpoints.cancel()
    finally:
        broadcast.close()
        reader.close()
        store.close()
