"""The PostgreSQL log beyond the contract: migrations, bad URLs, several writers at
once (threads, processes, daemons' writers), and commits waking other daemons."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
import trio

from t3orch.core import Core, open_core
from t3orch.events import EventEnvelope
from t3orch.ids import CommandId
from t3orch.store import writer as writer_module
from t3orch.store.errors import SchemaTooNew, StoreError, StoreUnavailable
from t3orch.store.open import open_reader
from t3orch.store.postgres.backend import PostgresStore
from t3orch.store.postgres.schema import SCHEMA_VERSION
from tests.pg import PgServer
from tests.store.contract import diag, upsert

REPO = Path(__file__).resolve().parents[2]


def _end_sessions(url: str, where: str) -> int:
    """End the database's other sessions matching ``where`` (as a restart would)."""
    with psycopg.connect(url, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = current_database() AND pid <> pg_backend_pid() AND {where}) AS t"
        ).fetchone()
    return int(ended[0]) if ended else 0


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 't3orch'"
        ).fetchall()
    return {str(r[0]) for r in rows}


def test_migrates_an_empty_database_once(pg_url: str) -> None:
    assert _tables(pg_url) == set()
    store = PostgresStore(pg_url)
    store.commit_batch([upsert(1)])
    store.close()
    assert {"events", "rows", "command_receipts", "log_head", "schema_version"} <= _tables(pg_url)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM t3orch.schema_version").fetchall() == [
            (SCHEMA_VERSION,)
        ]
    again = PostgresStore(pg_url)  # already current: nothing to do, data kept
    try:
        assert again.last_sequence() == 1
    finally:
        again.close()


def test_two_stores_opening_an_empty_database_at_once_migrate_it_once(pg_url: str) -> None:
    errors: list[BaseException] = []
    stores: list[PostgresStore] = []

    def open_one() -> None:
        try:
            stores.append(PostgresStore(pg_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM t3orch.schema_version").fetchone() == (1,)


def test_a_newer_schema_is_refused_with_one_line_and_left_alone(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE t3orch.schema_version SET version = 99")
    for readonly in (False, True):
        with pytest.raises(SchemaTooNew) as caught:
            PostgresStore(pg_url, readonly=readonly)
        text = str(caught.value)
        assert "\n" not in text and "schema version 99" in text and "newer t3orch" in text
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM t3orch.schema_version").fetchone() == (99,)


def test_a_read_only_open_of_a_database_without_a_store_is_refused(pg_url: str) -> None:
    with pytest.raises(StoreError, match="no t3orch store in this database"):
        open_reader(pg_url)
    assert _tables(pg_url) == set()  # nothing was created


def test_an_unreachable_server_or_bad_url_is_one_clear_line(pg_server: PgServer) -> None:
    dead = "postgresql://t3orch:secret@127.0.0.1:1/nowhere"
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        PostgresStore(dead)
    assert time.monotonic() - started < 10
    text = str(caught.value)
    assert "\n" not in text and "cannot connect" in text and "127.0.0.1:1" in text
    assert "secret" not in text  # the password is never printed
    with pytest.raises(StoreError) as caught:
        PostgresStore("postgresql://t3orch@127.0.0.1:1/x?password=secret2&connect_timeout=2")
    assert "secret2" not in str(caught.value) and "cannot connect" in str(caught.value)
    with pytest.raises(StoreError, match="cannot connect"):
        PostgresStore("postgresql://t3orch@127.0.0.1:1/x?sslmode=bogus")
    with pytest.raises(StoreError, match="does not exist"):
        PostgresStore(pg_server.url("no_such_database"))


def test_concurrent_writer_threads_get_gap_free_contiguous_sequences(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    commits: list[list[int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        store = PostgresStore(pg_url)
        try:
            for i in range(30):
                out = store.commit_batch([diag(1 + (i + w) % 4), upsert(w * 100 + i)])
                seqs = [e.sequence for o in out for e in o.events]
                with lock:
                    commits.append(seqs)
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for seqs in commits:  # each commit's events are contiguous
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    every = sorted(s for seqs in commits for s in seqs)
    assert every == list(range(1, len(every) + 1))
    store = PostgresStore(pg_url)
    try:
        assert [e.sequence for e in store.iter_events()] == every
        assert store.projection_sequence() == store.last_sequence() == len(every)
        assert store.integrity_problems() == []
    finally:
        store.close()


def test_concurrent_writer_processes_through_the_core_are_gap_free(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.store.pg_writer", pg_url, "150", f"w{w}"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(2)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    commits: list[tuple[int, int, int]] = []
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.endswith("done\n")
        commits += [
            (int(a), int(b), int(n))
            for line in out.splitlines()
            if line.startswith("ack")
            for a, b, n in [line.split()[1:]]
        ]
    assert len(commits) == 300
    for first, last, n in commits:
        assert last - first + 1 == n
    every = sorted(s for first, last, _ in commits for s in range(first, last + 1))
    assert every == list(range(1, len(every) + 1))
    store = PostgresStore(pg_url)
    try:
        # Both processes' events interleave in the log: the lock ordered them.
        codes = [str(getattr(e.payload, "code", "")) for e in store.iter_events()]
        assert {"w0", "w1"} <= set(codes)
        assert len(codes) == len(every) == store.projection_sequence()
    finally:
        store.close()


async def test_a_daemon_publishes_every_daemons_commits_in_sequence_order(
    pg_url: str,
) -> None:
    """Two cores on one log (two daemons): a subscriber of either sees the commits of
    both, in order, with no gap and nothing twice."""
    seen: dict[str, list[EventEnvelope]] = {"a": [], "b": []}
    total = 0
    async with open_core(pg_url) as a, open_core(pg_url) as b:
        subs = {"a": a.broadcast.subscribe(), "b": b.broadcast.subscribe()}

        async def drive(core: Core, n: int, width: int) -> None:
            for i in range(n):
                await core.writer.submit(diag(1 + i % width).decide)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive, a, 40, 3)
            nursery.start_soon(drive, b, 40, 2)
        total = await trio.to_thread.run_sync(a.reader.last_sequence)

        async def collect(name: str) -> None:
            with trio.fail_after(10):
                while len(seen[name]) < total:
                    seen[name] += await subs[name].batch()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect, "a")
            nursery.start_soon(collect, "b")
    assert total == sum(1 + i % 3 for i in range(40)) + sum(1 + i % 2 for i in range(40))
    for name in ("a", "b"):
        assert [e.sequence for e in seen[name]] == list(range(1, total + 1)), name
    assert seen["a"] == seen["b"]


async def test_a_commit_reaches_another_daemons_subscriber_quickly(pg_url: str) -> None:
    async with open_core(pg_url) as a, open_core(pg_url) as b:
        sub = a.broadcast.subscribe()
        latencies = []
        for _ in range(20):
            started = trio.current_time()
            out = await b.writer.submit(diag(1).decide)
            with trio.fail_after(5):
                got = await sub.batch()
            assert [e.sequence for e in got] == [e.sequence for e in out.events]
            latencies.append(trio.current_time() - started)
    latencies.sort()
    assert latencies[len(latencies) // 2] < 0.25, latencies


async def test_a_lost_listening_connection_is_reopened_and_nothing_is_missed(
    pg_url: str,
) -> None:
    async with open_core(pg_url) as a, open_core(pg_url) as b:
        sub = a.broadcast.subscribe()

        # a's and b's LISTEN connections.
        assert await trio.to_thread.run_sync(_end_sessions, pg_url, "query LIKE 'LISTEN%'") == 2
        # Committed while nobody listens: a's follower must still publish them.
        first = await b.writer.submit(diag(3).decide)
        later = await b.writer.submit(diag(1).decide)
        got: list[EventEnvelope] = []
        with trio.fail_after(10):
            while len(got) < 4:
                got += await sub.batch()
        assert [e.sequence for e in got] == [e.sequence for e in (*first.events, *later.events)]


async def test_connections_the_server_ended_cost_no_commit_and_no_read(pg_url: str) -> None:
    """A server restart (or an administrator) ends every pooled connection: the next
    commit and the next read go through on new ones, nothing written twice."""
    async with open_core(pg_url) as core:
        await core.writer.submit(diag(1).decide)

        assert await trio.to_thread.run_sync(_end_sessions, pg_url, "true") >= 2
        out = await core.writer.submit(diag(2).decide)
        assert [e.sequence for e in out.events] == [2, 3]
        assert await trio.to_thread.run_sync(_end_sessions, pg_url, "true") >= 1
        assert core.reader.last_sequence() == 3
        assert [e.sequence for e in core.reader.read_events()] == [1, 2, 3]


async def test_a_snapshot_after_the_server_ended_the_pooled_connections_reads(
    pg_url: str,
) -> None:
    """A snapshot (every API read of a thread, ``status``) began on a pooled connection
    the server had ended and failed: after a PostgreSQL restart the daemon answered its
    first few calls with ``terminating connection due to administrator command``."""
    async with open_core(pg_url) as core:
        await core.writer.submit(diag(1).decide)
        with core.reader.snapshot():  # the pool has a connection to keep
            assert core.reader.last_sequence() == 1
        assert await trio.to_thread.run_sync(_end_sessions, pg_url, "true") >= 1
        for _ in range(4):  # the pool's size: none of its connections is handed out dead
            with core.reader.snapshot():
                assert core.reader.last_sequence() == 1


def _allow_connections(url: str, allowed: bool) -> None:
    """The database refusing new connections, its sessions ended: the server as a
    restart or a failover leaves it for a while, seen from a client."""
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )


async def test_the_writer_waits_for_a_server_that_cannot_be_reached(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No connection within the pool's timeout is ``StoreUnavailable``: the writer
    refuses commands meanwhile and commits the rest once the server answers (it raised
    out of the writer, and the daemon ended with every runtime not held)."""
    monkeypatch.setattr(writer_module, "FULL_RETRY_S", 0.05)
    async with open_core(pg_url) as core:
        await core.writer.submit(diag(1).decide)
        await trio.to_thread.run_sync(_allow_connections, pg_url, False)
        try:
            waiting = await core.writer.enqueue(diag(3).decide)  # provider events
            with trio.fail_after(60):
                while core.writer.stalled is None:  # noqa: ASYNC110 - the writer thread sets it
                    await trio.sleep(0.05)
            assert isinstance(core.writer.stalled, StoreUnavailable)
            assert not waiting.done
            with trio.fail_after(60), pytest.raises(StoreUnavailable, match="not committed"):
                await core.writer.submit(diag(1).decide, command_id=CommandId("cmd-1"))
        finally:
            await trio.to_thread.run_sync(_allow_connections, pg_url, True)
        with trio.fail_after(60):
            out = await waiting.outcome()
        assert [e.sequence for e in out.events] == [2, 3, 4]
        assert core.writer.stalled is None
        assert core.store.receipt(CommandId("cmd-1")) is None
