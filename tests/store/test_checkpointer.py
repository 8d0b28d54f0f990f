"""WAL checkpoints run beside the writer, not inside its commits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

from t3orch.core import open_core
from t3orch.store.sqlite.checkpointer import INTERVAL_S, SAFETY_PAGES, WalCheckpointer
from tests.store.contract import diag


async def _eventually(condition: Callable[[], bool], rounds: int = 25) -> None:
    """Polls a file or a counter: neither can wake a trio task."""
    for _ in range(rounds):
        if condition():
            return
        await trio.sleep(INTERVAL_S / 5)
    raise AssertionError(f"not within {rounds * INTERVAL_S / 5:.0f} s")


async def test_open_core_raises_the_writers_mark_and_checkpoints_after_commits(
    tmp_path: Path,
) -> None:
    db = tmp_path / "events.sqlite3"
    async with open_core(db) as core:
        (mark,) = core.store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()
        assert mark == SAFETY_PAGES
        before = db.stat().st_size
        for _ in range(20):
            await core.writer.submit(diag(50).decide)
        # Far below the writer's mark nothing checkpoints inline: the database file
        # grows only when the checkpointer copies the WAL's pages into it.
        await _eventually(lambda: db.stat().st_size > before)
        assert core.store.last_sequence() == 1000


async def test_checkpointer_checkpoints_only_after_new_commits(tmp_path: Path) -> None:
    db = tmp_path / "events.sqlite3"
    async with open_core(db) as core:
        await core.writer.submit(diag(5).decide)
        # A checkpointer of our own (the core's runs too: only one checkpoint runs at
        # a time, so a round of this one may find the other busy).
        checkpointer = WalCheckpointer(db, core.writer)
        async with trio.open_nursery() as nursery:
            await nursery.start(checkpointer.run)
            await trio.sleep(INTERVAL_S * 1.5)
            assert checkpointer.attempts == 0  # nothing committed since it started
            await core.writer.submit(diag(5).decide)
            await _eventually(lambda: checkpointer.attempts > 0)
            nursery.cancel_scope.cancel()
