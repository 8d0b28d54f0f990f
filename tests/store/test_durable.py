"""Visible, then durable: the SQLite writer fsyncs its ``-wal`` itself (issue 17).

Under ``synchronous = FULL`` the writer's connection runs ``NORMAL`` and the store
fsyncs the ``-wal`` after each COMMIT: a commit is *visible* (in the OS page cache:
it survives a crash of the daemon, and every reader sees it) when COMMIT returns,
*durable* after the fsync. A ticket queued ``early`` is answered at visible; every
``outcome()`` and the publish wait for durable; a failed fsync stops the writer
with nothing acknowledged. The only fake is the filesystem's fsync
(``tests/store/fsync.py``); the store, the writer and SQLite are real.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest
import trio

from t3orch.events import EventEnvelope
from t3orch.store.broadcast import Broadcast
from t3orch.store.errors import StoreClosed, StoreNotDurable
from t3orch.store.open import open_log
from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.writer import EventWriter
from tests.store.contract import diag
from tests.store.fsync import FsyncGate

_WAIT_S = 10


async def test_an_early_ticket_is_answered_during_the_fsync_and_nobody_is_told_before(
    tmp_path: Path,
) -> None:
    gate = FsyncGate()
    published: list[int] = []
    async with open_log(tmp_path / "v.db", fsync=gate) as log:
        log.broadcast.listen(lambda events: published.extend(e.sequence for e in events))
        with trio.fail_after(_WAIT_S):
            await log.writer.submit(diag(1).decide)
            release = threading.Event()
            gate.hold_until(release.is_set)
            ticket = await log.writer.enqueue(diag(2).decide, early=True)
            seen = await ticket.visible()
            assert gate.entered.is_set() or await trio.to_thread.run_sync(
                gate.entered.wait, _WAIT_S
            )
            # Visible: committed, read by another connection, while its fsync runs.
            assert [e.sequence for e in seen.events] == [2, 3]
            assert log.reader.last_sequence() == 3
            # Durable: not yet; nobody is told.
            assert not ticket.done and published == [1]
            release.set()
            done = await ticket.outcome()
    assert gate.held is True
    assert done is seen and published == [1, 2, 3]


async def test_the_writer_fsyncs_the_wal_sqlite_writes_through_resets_and_truncation(
    tmp_path: Path,
) -> None:
    gate = FsyncGate()
    db = tmp_path / "w.db"
    store = SQLiteStore(db, fsync=gate)
    try:
        (mode,) = store._conn.execute("PRAGMA synchronous").fetchone()
        assert mode == 1  # NORMAL: the commit's fsync is the store's own
        store.commit_batch([diag(1)])
        wal = os.stat(f"{db}-wal").st_ino
        # The directory entry once, then the -wal at each commit.
        assert gate.synced == [os.stat(tmp_path).st_ino, wal]
        other = sqlite3.connect(db)
        try:
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            other.close()
        assert os.stat(f"{db}-wal").st_size == 0
        store.commit_batch([diag(1)])  # the log restarts at the -wal's start
        store.commit_batch([diag(1)])
        assert gate.synced[2:] == [wal, wal] and os.stat(f"{db}-wal").st_ino == wal
    finally:
        store.close()
    assert _reopened_head(db) == 3


def test_normal_and_memory_stores_make_no_fsync_of_their_own(tmp_path: Path) -> None:
    gate = FsyncGate()
    for store in (
        SQLiteStore(tmp_path / "n.db", synchronous="NORMAL", fsync=gate),
        SQLiteStore(":memory:", fsync=gate),
    ):
        try:
            assert not store.visible_first
            store.commit_batch([diag(1)])
        finally:
            store.close()
    assert gate.synced == []


async def test_a_failed_fsync_stops_the_writer_and_nothing_is_acknowledged(
    tmp_path: Path,
) -> None:
    """EIO from the fsync: the batch's callers get StoreNotDurable (never its
    outcome), nothing is published, the writer stops and ``run`` raises it (the
    daemon fails); no later fsync is trusted. A restart reads what the disk kept."""
    gate = FsyncGate()
    db = tmp_path / "f.db"
    store = SQLiteStore(db, fsync=gate)
    published: list[EventEnvelope] = []
    broadcast = Broadcast()
    broadcast.listen(published.extend)
    writer = EventWriter(store, broadcast)
    failures: list[BaseException] = []
    with trio.fail_after(_WAIT_S), pytest.RaisesGroup(StoreNotDurable):
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            await writer.submit(diag(1).decide)
            gate.fail_next()
            try:
                await writer.submit(diag(2).decide)
            except StoreNotDurable as exc:
                failures.append(exc)
            try:
                await writer.submit(diag(1).decide)
            except StoreClosed as exc:
                failures.append(exc)
            await trio.sleep_forever()  # the writer's failure ends it
    not_durable, closed = failures
    assert isinstance(not_durable, StoreNotDurable) and "fsync failed" in str(not_durable)
    assert "Input/output error" in str(not_durable)
    assert isinstance(closed, StoreClosed)
    assert [e.sequence for e in published] == [1]
    with pytest.raises(StoreNotDurable):
        store.commit_batch([diag(1)])  # nothing is written after it
    store.close()
    # The restart: here the disk (the page cache) kept the batch nobody was told of.
    assert _reopened_head(db) == 3


def _reopened_head(db: Path) -> int:
    """The last sequence of the store at ``db``, opened again (a restart)."""
    again = SQLiteStore(db)
    try:
        return again.last_sequence()
    finally:
        again.close()
