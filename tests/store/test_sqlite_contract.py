"""SQLite passes the store contract: durable (both synchronous modes) and in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from t3orch.store.sqlite.backend import SQLiteStore
from tests.store.contract import DurableStoreContract, OpenStore, StoreContract


class TestSQLiteFull(DurableStoreContract):
    @pytest.fixture
    def open_store(self, tmp_path: Path) -> OpenStore:
        return lambda: SQLiteStore(tmp_path / "events.sqlite3", synchronous="FULL")


class TestSQLiteNormal(DurableStoreContract):
    @pytest.fixture
    def open_store(self, tmp_path: Path) -> OpenStore:
        return lambda: SQLiteStore(tmp_path / "events.sqlite3", synchronous="NORMAL")


class TestSQLiteMemory(StoreContract):
    @pytest.fixture
    def open_store(self) -> OpenStore:
        return lambda: SQLiteStore(":memory:")
