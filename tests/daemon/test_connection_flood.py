"""A local connection flood on the WebSocket port must not lock the owner out.

The daemon runs with RLIMIT_NOFILE lowered to 256, so 1,100 raw TCP connects that
never handshake (127.0.0.1 only) are far more than it has descriptors for. The
Unix socket must keep answering, the daemon must live, and every flood connection
must be closed: at once past the bound on unauthenticated connections, the rest
at the auth timeout.
"""

from __future__ import annotations

import errno
import resource
import select
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio
import trio_websocket

from t3orch.api.auth import read_token
from tests.daemon.support import rpc, serve

FLOOD = 1_100
NOFILE = 256
AUTH_TIMEOUT_S = 1.0


@contextmanager
def descriptors(needed: int) -> Iterator[None]:
    """This (test) process's soft RLIMIT_NOFILE raised for the flood's sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        yield
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def connect_raw(port: int, count: int) -> list[socket.socket]:
    socks: list[socket.socket] = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        assert err in (0, errno.EINPROGRESS), errno.errorcode.get(err)
        socks.append(s)
    return socks


def wait_all_closed(socks: list[socket.socket], within: float) -> int:
    """Reads each socket to EOF (or reset); returns how many the peer did not close."""
    poller = select.poll()
    open_ = {s.fileno(): s for s in socks}
    for fd in open_:
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    deadline = time.monotonic() + within
    while open_ and time.monotonic() < deadline:
        for fd, _ in poller.poll(100):
            try:
                data = open_[fd].recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                poller.unregister(fd)
                del open_[fd]
    return len(open_)


async def ws_status(port: int, token: str | None) -> object:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    async with trio_websocket.open_websocket(
        "127.0.0.1", port, "/", use_ssl=False, extra_headers=headers
    ) as ws:
        await ws.send_message('{"jsonrpc": "2.0", "id": 1, "method": "daemon.status"}')
        return await ws.get_message()


def run_status(state: Path, thread_id: str, run_id: str, within: float = 20) -> str:
    deadline = time.monotonic() + within
    while True:
        view = rpc(state, "view.read", {"topic": "threadDetail", "threadId": thread_id})
        (run,) = [r for r in view["data"]["runs"] if r["id"] == run_id]
        if run["status"] in ("completed", "failed", "interrupted") or time.monotonic() > deadline:
            return str(run["status"])
        time.sleep(0.05)


def test_a_connection_flood_leaves_the_unix_socket_answering(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = tmp_path / "t3orch.toml"
    config.write_text(f"[daemon]\napi_auth_timeout_s = {AUTH_TIMEOUT_S}\n")
    # Fewer where this process may not hold 1,100 sockets: any count well past the
    # daemon's 256 descriptors is the same flood to it.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    count = FLOOD if hard == resource.RLIM_INFINITY else min(FLOOD, hard - 64)
    assert count > 2 * NOFILE
    with descriptors(count + 64), serve(state, config, nofile=NOFILE) as d:
        d.wait_notify("READY=1")
        port = int((state / "api.port").read_text())
        flood = connect_raw(port, count)
        try:
            # The owner's CLI path: a status over the Unix socket, within 2 s, while the
            # daemon is taking in the flood and after.
            for _ in range(3):
                started = time.monotonic()
                status = rpc(state, "daemon.status")
                assert time.monotonic() - started < 2.0
                assert status["pid"] == d.proc.pid
                time.sleep(0.3)
            # Work goes on meanwhile: a stand-in run (its pipes need descriptors too).
            tid = rpc(
                state,
                "thread.create",
                {"commandId": "flood-t", "provider": "standin", "cwd": str(tmp_path)},
            )["result"]["threadId"]
            run = rpc(state, "run.send", {"commandId": "flood-r", "threadId": tid, "text": "hi"})
            assert run_status(state, tid, run["result"]["runId"]) == "completed"
            api = status["api"]
            assert api["unauthenticated"] <= api["limits"]["maxUnauthenticated"] < NOFILE
            assert api["refused"] > 0
            # Every flood connection is closed by the daemon: past the bound at once,
            # the ones it held at the auth timeout.
            assert wait_all_closed(flood, within=AUTH_TIMEOUT_S + 10) == 0
            assert d.proc.poll() is None
        finally:
            for s in flood:
                s.close()
        # Flood over: the owner's WebSocket works again; the Unix socket still does.
        reply = trio.run(ws_status, port, read_token(state))
        assert '"result"' in str(reply)
        assert rpc(state, "daemon.status")["api"]["unauthenticated"] == 0
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=20) == 0


def open_files_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no 'Max open files' line")


def test_the_daemon_raises_its_soft_descriptor_limit_to_the_hard_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve(state, nofile=(256, 2048)) as d:
        d.wait_notify("READY=1")
        assert open_files_limit(d.proc.pid) == (2048, 2048)
        # The WebSocket bound is sized from the raised limit.
        limits = rpc(state, "daemon.status")["api"]["limits"]
        # (from 256 it would have been 256 - 128).
        assert limits["maxConnections"] == 1024
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=20) == 0
