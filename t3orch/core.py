"""Opening the core: the store's log + the command service, as one trio service."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from t3orch.clock import WallClock, system_clock
from t3orch.ids import IdFactory
from t3orch.service import CoreService
from t3orch.store.broadcast import Broadcast
from t3orch.store.interface import ReadStore, Store
from t3orch.store.open import Synchronous, open_log
from t3orch.store.writer import EventWriter


@attrs.define
class Core:
    store: Store
    #: A second connection for snapshots, so reads never wait on the writer thread.
    reader: ReadStore
    writer: EventWriter
    service: CoreService
    broadcast: Broadcast
    #: Where the store lives (its path): the API opens its own reader there.
    location: str


@asynccontextmanager
async def open_core(
    db_path: str | Path,
    *,
    synchronous: Synchronous = "FULL",
    clock: WallClock = system_clock,
    ids: IdFactory | None = None,
    max_batch: int = 256,
    fsync: Callable[[int], None] = os.fsync,
) -> AsyncIterator[Core]:
    ids = ids or IdFactory()
    async with open_log(
        db_path, synchronous=synchronous, clock=clock, ids=ids, max_batch=max_batch, fsync=fsync
    ) as log:
        service = CoreService(log.writer, ids)
        yield Core(log.store, log.reader, log.writer, service, log.broadcast, log.location)
