"""Moves WAL pages into the database file off the writer's commit path.

SQLite checkpoints automatically inside whichever ``COMMIT`` pushes the WAL past
``wal_autocheckpoint`` pages: that commit then copies the pages and fsyncs the
database file, and every event waiting on it is published that much later
(``bench/fanout.py``: COMMIT p99 16.8 ms with it, 4.9 ms without). Here a passive
checkpoint runs on its own connection, in a worker thread, after the writer has
committed; it never blocks the writer, and durability is the WAL's either way.
The writer keeps an automatic checkpoint at a high mark (``SAFETY_PAGES``) so the
WAL stays bounded if this falls behind.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio

from t3orch.store.writer import EventWriter

#: The writer's own ``wal_autocheckpoint`` once this runs (pages, ~40 MB of 4 KiB).
SAFETY_PAGES = 10_000
#: How often to look for new commits; the WAL holds at most this much writing.
#: Each checkpoint copies the pages written since the last one and fsyncs the
#: database file: every 250 ms cost the Codex adapter + log bench ~10%.
INTERVAL_S = 1.0


class WalCheckpointer:
    def __init__(self, path: str | Path, writer: EventWriter) -> None:
        self.path = str(path)
        self._writer = writer
        self._limiter = trio.CapacityLimiter(1)
        #: Rounds that tried a checkpoint, and those that completed one.
        self.attempts = 0
        self.completed = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 1000")
            task_status.started()
            seen = self._writer.stats.batches
            while True:
                await trio.sleep(INTERVAL_S)
                if self._writer.stats.batches == seen:
                    continue
                seen = self._writer.stats.batches
                await trio.to_thread.run_sync(self._checkpoint, conn, limiter=self._limiter)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        self.attempts += 1
        try:
            (busy, _frames, _moved) = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            # A failing checkpoint loses nothing (the WAL keeps the pages, and the
            # writer's safety mark still checkpoints); the next round retries.
            return
        if not busy:
            self.completed += 1
