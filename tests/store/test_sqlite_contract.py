"""SQLite passes the store contract: durable (both synchronous modes) and in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.sqlite.registry import SQLiteRegistry
from tests.store.contract import (
    DurableStoreContract,
    OpenRegistry,
    OpenStore,
    RegistryContract,
    StoreContract,
)


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


class TestSQLiteRegistry(RegistryContract):
    @pytest.fixture
    def open_registry(self, tmp_path: Path) -> OpenRegistry:
        path = tmp_path / "events.sqlite3"
        SQLiteStore(path).close()  # the store exists before its registry opens
        return lambda: SQLiteRegistry(path)


def test_a_read_only_registry_of_a_store_never_served_has_no_daemons(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite3"
    SQLiteStore(path).close()
    assert SQLiteRegistry(path, readonly=True).daemons() == []
