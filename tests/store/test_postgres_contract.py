"""PostgreSQL passes the store contract, on a real server (``tests/pg.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from t3orch.store.postgres.backend import PostgresStore
from t3orch.store.postgres.registry import PostgresRegistry
from tests.store.contract import (
    DurableStoreContract,
    OpenRegistry,
    OpenStore,
    RegistryContract,
    daemon,
)


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


class TestPostgresRegistry(RegistryContract):
    @pytest.fixture
    def open_registry(self, pg_url: str) -> Iterator[OpenRegistry]:
        PostgresStore(pg_url).close()  # migrated before its registry opens
        opened: list[PostgresRegistry] = []

        def open_() -> PostgresRegistry:
            reg = PostgresRegistry(pg_url)
            opened.append(reg)
            return reg

        yield open_
        for reg in opened:
            reg.close()


def test_a_read_only_registry_of_a_store_never_served_has_no_daemons(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    reg = PostgresRegistry(pg_url, readonly=True)
    assert reg.daemons() == []
    reg.close()


def test_the_registry_connects_again_when_the_server_dropped_it(pg_url: str) -> None:
    """A connection the server ended (a restart) is found dead on use, and made again."""
    PostgresStore(pg_url).close()
    reg = PostgresRegistry(pg_url)
    reg.upsert_daemon(daemon(1))
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    # Neither a beat nor a read of the fleet (a send's routing) is lost to it.
    assert reg.daemons() == [daemon(1)]
    reg.upsert_daemon(daemon(1, beat=200.0))
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    reg.upsert_daemon(daemon(1, beat=300.0))
    assert reg.daemons() == [daemon(1, beat=300.0)]
    reg.close()
