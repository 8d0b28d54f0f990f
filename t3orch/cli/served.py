"""A real ``t3orch serve`` in a child process, for the drills, the benchmarks and the tests.

It is started as systemd would (``NOTIFY_SOCKET``: READY is heard on a datagram
socket), talked to over its API socket, and killed or restarted by the caller
(:func:`served`: the daemons of one state dir, one after another); its state is read
from the state dir's log (:func:`state_rows`) until what is awaited is there
(:func:`t3orch.cli.polling.wait_until`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from t3orch.store.open import open_reader


def notify_listener(path: Path) -> socket.socket:
    """The datagram socket a served daemon says READY on (its ``NOTIFY_SOCKET``)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(path))
    return listener


def serve_daemon(
    state: Path,
    config_path: Path,
    notify: Path | None,
    *,
    env: Mapping[str, str] | None = None,
    profile: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``t3orch serve`` on ``state``, saying READY on ``notify`` (if given); ``env`` is
    added to this process's environment; ``profile``: run it under cProfile, the figures
    written there at its exit."""
    said = {"NOTIFY_SOCKET": str(notify)} if notify is not None else {}
    profiled = ["-m", "cProfile", "-o", os.fspath(profile)] if profile is not None else []
    return subprocess.Popen(
        [
            sys.executable,
            *profiled,
            "-m",
            "t3orch.cli.main",
            "serve",
            "--state-dir",
            str(state),
            "--config",
            str(config_path),
        ],
        env={**os.environ, **(env or {}), **said},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@attrs.define
class ServedDaemons:
    """The daemons served on one state dir, one after another, each saying READY on the
    one listener (see :func:`served`)."""

    state: Path
    config_path: Path
    listener: socket.socket
    notify: Path
    env: Mapping[str, str] | None = None
    procs: list[subprocess.Popen[bytes]] = attrs.field(factory=list)

    def start(self, *, profile: Path | None = None) -> subprocess.Popen[bytes]:
        """A daemon on the state dir (not yet READY: :meth:`ready`)."""
        proc = serve_daemon(
            self.state, self.config_path, self.notify, env=self.env, profile=profile
        )
        self.procs.append(proc)
        return proc

    def ready(self, proc: subprocess.Popen[bytes], within: float = 60) -> float:
        """Seconds until ``proc`` said READY (:func:`wait_ready`)."""
        return wait_ready(self.listener, proc, within)


@contextmanager
def served(
    state: Path, config_path: Path, notify: Path, *, env: Mapping[str, str] | None = None
) -> Iterator[ServedDaemons]:
    """Daemons served on ``state`` with ``config_path``, READY heard on ``notify``; leaving
    kills and reaps any still running and closes the listener (a held runtime's holder is
    the caller's to stop)."""
    daemons = ServedDaemons(state, config_path, notify_listener(notify), notify, env)
    try:
        yield daemons
    finally:
        for proc in daemons.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        daemons.listener.close()


def state_rows(state: Path, kind: str) -> list[Any]:
    """The projection rows of ``kind`` in the log of ``state`` (a state dir), decoded."""
    store = open_reader(state / "events.sqlite3")
    try:
        with store.snapshot():
            return [r.decode() for r in store.rows(kind)]
    finally:
        store.close()


def wait_ready(listener: socket.socket, proc: subprocess.Popen[bytes], within: float = 60) -> float:
    """Seconds until the daemon said READY; raises if it exits or stays silent first."""
    t0 = time.monotonic()
    listener.settimeout(within)
    while True:
        msg = listener.recv(4096).decode()
        if "READY=1" in msg:
            return time.monotonic() - t0
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited {proc.returncode} before READY")


def exchange(state: Path, request: dict[str, Any], timeout: float = 15) -> dict[str, Any]:
    """One JSON-RPC request on the daemon's API socket; the reply as it came."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(state / "api.sock"))
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    reply: dict[str, Any] = json.loads(buf)
    return reply


def rpc(state: Path, method: str, params: dict[str, Any], timeout: float = 15) -> Any:
    """One JSON-RPC call on the daemon's API socket; its result (an error raises)."""
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = exchange(state, request, timeout)
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]
