"""Two daemons, two state dirs, one PostgreSQL log (a real server: ``tests/pg.py``).

Each drives its own stand-in threads; both see the whole fleet: the same gap-free
sequence, both daemons' threads with their hosts. A send through daemon A to a
thread of daemon B runs on B. A SIGKILL of B leaves A serving, B's threads shown
offline and their commands refused naming B's host; B's restart settles only its
own runs, while A's go on.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from t3orch.domain.provider import ProviderSession, ProviderThread
from t3orch.domain.run import Run
from t3orch.events import RuntimeReconciled
from t3orch.state import copy_state_dir
from t3orch.store.postgres.backend import PostgresStore
from tests.daemon.support import Served, cli, rpc, serve

#: A stand-in turn takes seconds (400 ms a line): long enough to be caught in flight.
_SLOW = ["--slow-ms", "400"]


def _config(tmp: Path, host: str, url: str) -> Path:
    cmd = [sys.executable, "-m", "adapters.standin", *_SLOW]
    path = tmp / f"{host}.toml"
    # No holders: what a returning daemon settles is what this test is about (with
    # holders, B's restart would reattach its run instead: tests/daemon/test_live_restore.py).
    path.write_text(
        f'[daemon]\nhost_name = "{host}"\nheartbeat_s = 0.2\nheartbeat_timeout_s = 1.5\n'
        "reattach_grace_s = 0\n"
        f'[store]\nurl = "{url}"\n'
        f"[providers.standin]\ncommand = {json.dumps(cmd)}\n"
    )
    return path


def _wait(pred: Any, within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if value := pred():
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {within}s")


@pytest.fixture
def log(pg_url: str) -> Iterator[PostgresStore]:
    PostgresStore(pg_url).close()  # migrated once, before either daemon
    store = PostgresStore(pg_url, readonly=True)
    yield store
    store.close()


def _run(log: PostgresStore, run_id: str) -> Run:
    with log.snapshot():
        run = log.get(Run, run_id)
    assert run is not None
    return run


def _session_of(log: PostgresStore, thread_id: str) -> ProviderSession:
    """The provider session the thread's provider thread runs in."""
    with log.snapshot():
        (pt,) = [p for p in log.select(ProviderThread) if p.app_thread_id == thread_id]
        assert pt.provider_session_id is not None
        session = log.get(ProviderSession, pt.provider_session_id)
    assert session is not None
    return session


def _shell(state: Path) -> dict[str, dict[str, Any]]:
    threads = rpc(state, "view.read", {"topic": "threadShell"})["data"]["threads"]
    return {e["thread"]["id"]: e for e in threads}


def _events(state: Path) -> list[tuple[int, str]]:
    got = rpc(state, "events.read", {"afterSequence": 0, "limit": 5000})["events"]
    return [(e["sequence"], e["eventId"]) for e in got]


def _send(state: Path, thread_id: str, cid: str) -> str:
    sent = rpc(state, "run.send", {"commandId": cid, "threadId": thread_id, "text": "hi"})
    return str(sent["result"]["runId"])


def _start(stack: ExitStack, state: Path, config: Path) -> Served:
    d = stack.enter_context(serve(state, config))
    d.wait_notify("READY=1")
    return d


def test_two_daemons_on_one_log(tmp_path: Path, pg_url: str, log: PostgresStore) -> None:
    sa, sb = tmp_path / "a", tmp_path / "b"
    ca, cb = _config(tmp_path, "box-a", pg_url), _config(tmp_path, "box-b", pg_url)
    with ExitStack() as stack:
        a, b = _start(stack, sa, ca), _start(stack, sb, cb)
        ida, idb = rpc(sa, "daemon.status")["daemonId"], rpc(sb, "daemon.status")["daemonId"]
        assert ida != idb
        new = {"provider": "standin", "cwd": str(tmp_path)}
        ta = rpc(sa, "thread.create", {"commandId": "ta", **new})["result"]["threadId"]
        tb = rpc(sb, "thread.create", {"commandId": "tb", **new})["result"]["threadId"]

        # One view: each daemon shows both daemons' threads, each with its host.
        for state in (sa, sb):
            shell = _wait(lambda s=state: len(_shell(s)) == 2 and _shell(s))
            assert shell[ta]["host"] == {"daemonId": ida, "host": "box-a", "online": True}
            assert shell[tb]["host"] == {"daemonId": idb, "host": "box-b", "online": True}

        # Driving at once, across: a send through A to B's thread runs on B, and back.
        runs = [_send(sa, tb, "s1"), _send(sb, ta, "s2")]
        for run in runs:
            _wait(lambda r=run: _run(log, r).status == "completed", 60)
        # Each thread's provider process was spawned by its owner daemon.
        for thread, owner, daemon in ((tb, idb, b), (ta, ida, a)):
            session = _session_of(log, thread)
            assert session.owner_daemon_id == owner
            assert session.owner is not None and session.owner.daemon_pid == daemon.proc.pid
        assert _run(log, runs[0]).thread_id == tb

        # The owner's refusal is the answer, as it gave it.
        with pytest.raises(RuntimeError) as refused:
            rpc(
                sa,
                "thread.configure",
                {"commandId": "cf", "threadId": tb, "cwd": str(tmp_path / "nowhere")},
            )
        assert refused.value.args[0]["data"]["code"] == "invalid_cwd"

        # The same gap-free sequence from both.
        seen_a, seen_b = _events(sa), _events(sb)
        assert seen_a == seen_b
        assert [s for s, _ in seen_a] == list(range(1, len(seen_a) + 1))
        # And the CLI's view of the fleet, through either daemon and from the log itself.
        for state in (sa, sb):
            listed = cli("threads", "--state-dir", str(state))
            rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
            assert rows[ta].rstrip().endswith("box-a") and rows[tb].rstrip().endswith("box-b")
        status = cli("status", "--state-dir", str(sa)).stdout
        assert f"daemon     {ida} on box-a" in status and "fleet      box-b (online)" in status
        lines = [json.loads(x) for x in cli("events", "--store", pg_url).stdout.splitlines()]
        assert {e["host"] for e in lines if e["threadId"] == ta} == {"box-a"}
        assert {e["host"] for e in lines if e["threadId"] == tb} == {"box-b"}

        # SIGKILL B with a run of its in flight: A serves on, and shows B offline.
        lost = _send(sa, tb, "s3")
        _wait(lambda: _run(log, lost).status == "running")
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(timeout=10)
        assert rpc(sa, "daemon.status")["daemonId"] == ida
        _wait(lambda: not _shell(sa)[tb]["host"]["online"], 10)
        assert _shell(sa)[ta]["host"]["online"]
        with pytest.raises(RuntimeError) as refused:
            _send(sa, tb, "s4")
        assert refused.value.args[0]["data"]["code"] == "owner_offline"
        assert "box-b" in refused.value.args[0]["message"]

        # B returns while a run of A's is in flight: B settles its own run only.
        going = _send(sa, ta, "s5")
        _wait(lambda: _run(log, going).status == "running")
        stack.enter_context(serve(sb, cb)).wait_notify("READY=1")
        assert rpc(sb, "daemon.status")["daemonId"] == idb  # the same member
        settled = _run(log, lost)
        assert (settled.status, settled.last_error) == ("interrupted", "daemon_restart")
        assert _run(log, going).status == "running"  # A's, left to A
        # B counted its own only: A's live provider is no orphan of B's, nor A a copy.
        with log.snapshot():
            counts = [e.payload for e in log.iter_events() if e.type == "runtime.reconciled"]
        assert isinstance(counts[-1], RuntimeReconciled)
        got = counts[-1].counts
        assert got["run"] == 1 and got["provider_session"] == 1
        assert got["orphans_left_to_live_daemon"] == got["copy_of_live_state_dir"] == 0
        _wait(lambda: _run(log, going).status == "completed", 60)
        _wait(lambda: _shell(sa)[tb]["host"]["online"], 10)
        # The CLI through A, waiting on A's stream of B's events: routed to the returned B.
        sent = cli("send", "--state-dir", str(sa), tb, "again", "--wait", "--timeout", "60")
        assert sent.returncode == 0, sent.stderr
        assert _session_of(log, tb).owner_daemon_id == idb
        seen_a, seen_b = _events(sa), _events(sb)
        assert seen_a == seen_b
        assert [s for s, _ in seen_a] == list(range(1, len(seen_a) + 1))


def test_a_copy_of_a_live_daemons_state_dir_is_refused_on_the_shared_log(
    tmp_path: Path, pg_url: str, log: PostgresStore
) -> None:
    sa = tmp_path / "a"
    ca = _config(tmp_path, "box-a", pg_url)
    with ExitStack() as stack:
        a = _start(stack, sa, ca)
        me = rpc(sa, "daemon.status")["daemonId"]
        copy = tmp_path / "copy"
        copy_state_dir(sa, copy)
        with serve(copy, ca) as twin:
            assert twin.proc.wait(timeout=30) == 2
            assert twin.proc.stderr is not None
            err = twin.proc.stderr.read().decode()
            assert f"daemon {me} already serves this log from box-a" in err
            assert str(copy / "daemon-id") in err
        assert rpc(sa, "daemon.status")["daemonId"] == me  # the original serves on
        # A SIGKILLed daemon's row is still fresh, but its pid is gone: a restart is fine.
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        again = _start(stack, sa, ca)
        assert rpc(sa, "daemon.status")["daemonId"] == me
        assert again.proc.poll() is None
