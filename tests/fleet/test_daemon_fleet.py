"""A real ``t3orch serve`` as a member of the fleet, on SQLite (a fleet of one).

It registers and heartbeats (``daemon.heartbeat_s``), shows its host beside its
threads, marks itself offline at a clean stop, keeps its id across restarts, and
refuses a command for a thread of another daemon that is offline or unreachable,
naming that daemon's host, with nothing written.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from t3orch.commands.specs import CreateThread
from t3orch.core import open_core
from t3orch.ids import DaemonId
from t3orch.store.interface import DaemonRecord
from t3orch.store.sqlite.registry import SQLiteRegistry
from tests.daemon.support import cli, rpc, serve

B = DaemonId("dmn_b0b")


def _config(tmp: Path, host: str) -> Path:
    cmd = [sys.executable, "-m", "adapters.standin"]
    path = tmp / f"{host}.toml"
    path.write_text(
        f'[daemon]\nhost_name = "{host}"\nheartbeat_s = 0.2\nheartbeat_timeout_s = 1.0\n'
        f"[providers.standin]\ncommand = {json.dumps(cmd)}\n"
    )
    return path


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, "--state-dir", str(state))


def _registered(state: Path) -> list[DaemonRecord]:
    reg = SQLiteRegistry(state / "events.sqlite3", readonly=True)
    try:
        return reg.daemons()
    finally:
        reg.close()


def _wait(pred: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_daemon_registers_beats_shows_its_host_and_goes_offline_at_stop(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with serve(state, _config(tmp_path, "box-a")) as d:
        d.wait_notify("READY=1")
        status = rpc(state, "daemon.status")
        me = status["daemonId"]
        assert status["host"] == "box-a" and me == (state / "daemon-id").read_text().strip()
        (rec,) = _registered(state)
        port = int((state / "api.port").read_text())
        assert (rec.daemon_id, rec.host, rec.pid) == (me, "box-a", d.proc.pid)
        assert rec.api_url == f"ws://127.0.0.1:{port}" and rec.online(time.time())
        _wait(lambda: _registered(state)[0].heartbeat_at > rec.heartbeat_at)
        tid = rpc(
            state, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": str(tmp_path)}
        )["result"]["threadId"]
        shell = rpc(state, "view.read", {"topic": "threadShell"})["data"]["threads"]
        assert shell[0]["host"] == {"daemonId": me, "host": "box-a", "online": True}
        assert shell[0]["thread"]["ownerDaemonId"] == me
        listed = _cli(state, "threads")
        assert listed.returncode == 0 and "HOST" in listed.stdout
        assert f"{tid}" in listed.stdout and "box-a" in listed.stdout
        assert "offline" not in listed.stdout
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
    (rec,) = _registered(state)
    assert not rec.online(time.time())  # a clean stop does not wait for the timeout
    offline = _cli(state, "threads")  # the store read without a daemon
    assert offline.returncode == 0 and "box-a (offline)" in offline.stdout
    shown = _cli(state, "show", tid)
    assert shown.returncode == 0 and "on box-a (offline)" in shown.stdout
    events = [json.loads(line) for line in _cli(state, "events").stdout.splitlines()]
    assert {e["host"] for e in events if e["threadId"] == tid} == {"box-a"}
    assert {e["host"] for e in events if e["threadId"] is None} == {None}
    with serve(state, _config(tmp_path, "box-a")) as d:
        d.wait_notify("READY=1")
        assert rpc(state, "daemon.status")["daemonId"] == me  # the same member again
        assert [r.daemon_id for r in _registered(state)] == [me]


def _thread_of_b(state: Path, tmp: Path, *, online: bool, api_url: str) -> str:
    """A thread daemon B made on this log, and B's row: as if B had served here."""
    state.mkdir(mode=0o700)

    async def make() -> str:
        async with open_core(state / "events.sqlite3") as core:
            core.service.daemon_id = B
            res = await core.service.create_thread(CreateThread(provider="standin", cwd=str(tmp)))
            return str(res.result["threadId"])

    tid = trio.run(make)
    now = time.time()
    reg = SQLiteRegistry(state / "events.sqlite3")
    reg.upsert_daemon(
        DaemonRecord(
            daemon_id=B,
            host="box-b",
            version="0",
            pid=1,
            api_url=api_url,
            token="0" * 64,
            started_at=now - 100,
            heartbeat_at=now - (0 if online else 60),
            expires_at=now + 600 if online else now - 50,
        )
    )
    reg.close()
    return tid


@pytest.mark.parametrize(
    ("online", "code", "says"),
    [(False, "owner_offline", "which is offline"), (True, "owner_unreachable", "did not take")],
)
def test_a_command_for_a_thread_of_a_daemon_that_cannot_take_it_is_refused(
    tmp_path: Path, online: bool, code: str, says: str
) -> None:
    state = tmp_path / "state"
    # Port 1 on loopback: nothing listens there.
    tid = _thread_of_b(state, tmp_path, online=online, api_url="ws://127.0.0.1:1")
    with serve(state, _config(tmp_path, "box-a")) as d:
        d.wait_notify("READY=1")
        with pytest.raises(RuntimeError) as refused:
            rpc(state, "run.send", {"commandId": "s1", "threadId": tid, "text": "hi"})
        error = refused.value.args[0]
        assert error["data"]["code"] == code
        assert "box-b" in error["message"] and says in error["message"]
        (entry,) = rpc(state, "view.read", {"topic": "threadShell"})["data"]["threads"]
        assert entry["runCount"] == 0  # nothing was written
        assert entry["host"] == {"daemonId": B, "host": "box-b", "online": online}
        sent = _cli(state, "send", tid, "hi")
        assert sent.returncode == 3 and "box-b" in sent.stderr
        assert len(sent.stderr.strip().splitlines()) == 1
        listed = _cli(state, "threads").stdout
        assert ("box-b (offline)" in listed) is not online


def test_a_damaged_daemon_id_is_one_line_and_exit_2(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "daemon-id").write_text("not an id\n")
    with serve(state, _config(tmp_path, "box-a")) as d:
        assert d.proc.wait(timeout=30) == 2
        assert d.proc.stderr is not None
        err = d.proc.stderr.read().decode().strip().splitlines()
    assert len(err) == 1 and "daemon-id does not hold a t3orch daemon id" in err[0]
    assert (state / "daemon-id").read_text() == "not an id\n"  # left as it was


def test_an_owner_registered_at_this_daemons_own_address_is_not_forwarded_to(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = tmp_path / "state"
    tid = _thread_of_b(state, tmp_path, online=True, api_url=f"ws://127.0.0.1:{port}")
    config = _config(tmp_path, "box-a")
    config.write_text(config.read_text().replace("[daemon]\n", f"[daemon]\napi_port = {port}\n"))
    with serve(state, config) as d:
        d.wait_notify("READY=1")
        with pytest.raises(RuntimeError) as refused:
            rpc(state, "run.send", {"commandId": "s1", "threadId": tid, "text": "hi"})
        error = refused.value.args[0]
        assert error["data"]["code"] == "owner_unreachable"
        assert "advertise_host" in error["message"]
