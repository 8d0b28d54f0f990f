"""The PostgreSQL store through the CLI and the daemon: ``[store] url`` / ``--store``,
``t3orch check`` and ``events`` against it, bad URLs, and the crash test."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from t3orch.store.postgres.backend import PostgresStore
from tests.cli.test_store_cli import _cli
from tests.daemon.support import config_file, rpc, serve
from tests.pg import PgServer
from tests.store.contract import upsert
from tests.store.test_crash import kill_rounds

REPO = Path(__file__).resolve().parents[2]


def _wait(predicate: Any, within: float) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {within}s")


def test_serve_on_a_store_url_then_check_events_and_threads_read_it(
    tmp_path: Path, pg_url: str
) -> None:
    config = config_file(tmp_path)
    config.write_text(config.read_text() + f'\n[store]\nurl = "{pg_url}"\n')
    state = tmp_path / "state"
    with serve(state, config) as d:
        d.wait_notify("READY=1")
        created = rpc(
            state, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": str(tmp_path)}
        )
        thread_id = created["result"]["threadId"]
        rpc(state, "run.send", {"commandId": "c2", "threadId": thread_id, "text": "hi"})
        store = PostgresStore(pg_url, readonly=True)
        try:
            _wait(lambda: any(r.status == "completed" for r in store.rows("run")), 30)
        finally:
            store.close()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
    # The daemon wrote nothing of its log into the state dir.
    assert not (state / "events.sqlite3").exists()

    check = _cli("check", "--store", pg_url)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("ok:")
    events = _cli("events", "--store", pg_url)
    assert events.returncode == 0, events.stderr
    lines = [json.loads(line) for line in events.stdout.splitlines()]
    assert [e["sequence"] for e in lines] == list(range(1, len(lines) + 1))
    assert "thread.upserted" in {e["type"] for e in lines}
    # No daemon: `threads` reads the store named by --store.
    threads = _cli("threads", "--state-dir", str(state), "--store", pg_url, "--json")
    assert threads.returncode == 0, threads.stderr
    assert thread_id in threads.stdout
    # `logs THREAD` finds the thread's provider sessions in that store.
    logs = _cli("logs", thread_id, "--state-dir", str(state), "--store", pg_url)
    assert logs.returncode == 0, logs.stderr
    assert "pss_" in logs.stdout


def test_check_finds_a_projection_row_that_differs_from_the_log(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    store.commit_batch([upsert(1), upsert(2)])
    store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE t3orch.rows SET body = convert_to('{}', 'UTF8') WHERE id = 'thr_0002'")
    check = _cli("check", "--store", pg_url)
    assert check.returncode == 1
    assert "thr_0002" in check.stderr


def test_a_bad_store_url_is_one_line_and_exit_2(tmp_path: Path, pg_server: PgServer) -> None:
    cases = [
        ("check", "--store", "mysql://x@127.0.0.1/db"),
        ("events", "--store", "postgresql://t3orch:hunter2@127.0.0.1:1/nowhere"),
        ("check", "--store", pg_server.url("no_such_database")),
        (
            "serve",
            "--state-dir",
            str(tmp_path / "s2"),
            "--store",
            "postgresql://t3orch:hunter2@127.0.0.1:1/x",
        ),
    ]
    for argv in cases:
        out = _cli(*argv)
        assert out.returncode == 2, (argv, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "hunter2" not in out.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[store]\nurl = "sqlite:///x"\n')
    out = _cli("check", "--config", str(bad))
    assert out.returncode == 2
    assert "store.url" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    served = _cli("serve", "--state-dir", str(tmp_path / "s"), "--store", "nope")
    assert served.returncode == 2 and "--store" in served.stderr


def test_sigkill_of_a_writer_on_postgres_loses_no_acknowledged_event(pg_url: str) -> None:
    """tests/store/test_crash.py against the PostgreSQL log: a writer process streaming
    through the core is SIGKILLed at random points; every acknowledged event is there."""
    kill_rounds(pg_url, lambda: PostgresStore(pg_url), 8, 20261201)
    check = _cli("check", "--store", pg_url)
    assert check.returncode == 0, check.stderr


def test_events_follow_on_a_store_url_prints_later_commits(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    try:
        store.commit_batch([upsert(1)])
        proc = subprocess.Popen(
            [sys.executable, "-m", "t3orch.cli.main", "events", "--follow", "--store", pg_url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert json.loads(proc.stdout.readline())["sequence"] == 1
            store.commit_batch([upsert(2)])  # another process's commit, after the start
            assert json.loads(proc.stdout.readline())["sequence"] == 2
        finally:
            proc.kill()
            proc.communicate(timeout=10)
    finally:
        store.close()
