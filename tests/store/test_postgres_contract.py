"""PostgreSQL passes the store contract, on a real server (``tests/pg.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from t3orch.store.postgres.backend import PostgresStore
from tests.store.contract import DurableStoreContract, OpenStore


class TestPostgres(DurableStoreContract):
    @pytest.fixture
    def open_store(self, pg_url: str) -> Iterator[OpenStore]:
        opened: list[PostgresStore] = []

        def open_() -> PostgresStore:
            store = PostgresStore(pg_url)
            opened.append(store)
            return store

        yield open_
        for store in opened:
            store.close()
