"""Deciding skips the reads of rows the key filter says were never stored.

A row the filter wrongly called absent would be created again at a new position
(upserts keep the first position), so every test here checks positions too.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from t3orch.store.sqlite import keyfilter
from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.sqlite.keyfilter import KeyFilter
from tests.store.contract import upsert


def test_every_key_added_is_found_and_few_others_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyfilter, "MIN_CAPACITY", 1)
    rng = random.Random(7)
    keys = KeyFilter(capacity=5_000)
    added = [("turn_item", f"itm_{rng.getrandbits(64):016x}") for _ in range(5_000)]
    for key in added:
        keys.add(key)
    assert all(key in keys for key in added)
    assert not keys.full
    others = [("turn_item", f"itm_{rng.getrandbits(64):016x}") for _ in range(20_000)]
    assert sum(key in keys for key in others) < 20_000 * 0.02
    keys.add(("node", "one more"))
    assert keys.full


def _reads(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    store._decide_conn.set_trace_callback(seen.append)
    return seen


def test_a_new_row_is_decided_without_a_read(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        reads = _reads(store)
        store.commit_batch([upsert(1)])
        assert not [sql for sql in reads if "FROM rows" in sql]
        # A stored row is still read back: its position is kept.
        store.commit_batch([upsert(2)])
        reads.clear()
        store.commit_batch([upsert(1, title="again")])
        assert [sql for sql in reads if "FROM rows" in sql]
        first = store.row("thread", "thr_0001")
        assert first is not None and first.position == 1
    finally:
        store.close()


def test_rows_stored_before_opening_are_read(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.commit_batch([upsert(i) for i in range(1, 4)])
    store.close()
    store = SQLiteStore(tmp_path / "s.db")
    try:
        store.commit_batch([upsert(2, title="renamed")])
        row = store.row("thread", "thr_0002")
        assert row is not None and row.position == 2
        assert [r.id for r in store.rows("thread")] == ["thr_0001", "thr_0002", "thr_0003"]
    finally:
        store.close()


def test_a_full_filter_is_rebuilt_from_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyfilter, "MIN_CAPACITY", 4)
    store = SQLiteStore(tmp_path / "s.db")
    try:
        store.commit_batch([upsert(i) for i in range(1, 11)])
        assert store._keys.full
        before = store._keys
        store.commit_batch([upsert(11)])
        assert store._keys is not before
        assert all(("thread", f"thr_{i:04d}") in store._keys for i in range(1, 12))
        store.commit_batch([upsert(i, title="again") for i in range(1, 12)])
        assert [r.position for r in store.rows("thread")] == [*range(1, 12)]
    finally:
        store.close()


def test_a_table_too_large_to_scan_reads_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.commit_batch([upsert(i) for i in range(1, 4)])
    store.close()
    monkeypatch.setattr(keyfilter, "MAX_SCANNED_ROWS", 2)
    store = SQLiteStore(tmp_path / "s.db")
    try:
        assert ("thread", "thr_0009") in store._keys
        reads = _reads(store)
        store.commit_batch([upsert(9), upsert(2, title="renamed")])
        assert len([sql for sql in reads if "FROM rows" in sql]) >= 2
        assert [(r.id, r.position) for r in store.rows("thread")] == [
            ("thr_0001", 1),
            ("thr_0002", 2),
            ("thr_0003", 3),
            ("thr_0009", 4),
        ]
    finally:
        store.close()
