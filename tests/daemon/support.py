"""A `t3orch serve` child process with a real NOTIFY_SOCKET listener, and a socket client."""

from __future__ import annotations

import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from t3orch.cli.served import exchange
from t3orch.daemon import stop_agents

REPO = Path(__file__).resolve().parents[2]


@attrs.define
class Served:
    proc: subprocess.Popen[bytes]
    state_dir: Path
    notify: socket.socket
    messages: list[str] = attrs.field(factory=list)

    def wait_notify(self, needle: str, within: float = 30.0) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for m in self.messages:
                if needle in m:
                    return m
            self.notify.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                self.messages.append(self.notify.recv(4096).decode())
            except TimeoutError:
                break
            if self.proc.poll() is not None and not any(needle in m for m in self.messages):
                raise AssertionError(f"daemon exited {self.proc.returncode} before {needle!r}")
        raise AssertionError(f"no {needle!r} from the daemon within {within}s: {self.messages}")


_ids = itertools.count(1)


def rpc(state_dir: Path, method: str, params: dict[str, Any] | None = None) -> Any:
    """One JSON-RPC call over the daemon's Unix socket."""
    req = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
    reply = exchange(state_dir, req, timeout=10)
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply["result"]


def config_file(tmp: Path, *standin_args: str, reattach_grace_s: float = 0) -> Path:
    """The stand-in with ``standin_args``; no holders unless ``reattach_grace_s`` (the
    tests of live restore): the other daemon tests are about providers that die with it."""
    cmd = [sys.executable, "-m", "adapters.standin", *standin_args]
    path = tmp / "t3orch.toml"
    path.write_text(
        f"[daemon]\nreattach_grace_s = {reattach_grace_s}\n"
        f"[providers.standin]\ncommand = {json.dumps(cmd)}\n"
    )
    return path


@contextmanager
def serve(
    state_dir: Path,
    config: Path | None = None,
    watchdog_usec: int | None = None,
    nofile: int | tuple[int, int] | None = None,
    keep_holders: bool = False,
) -> Iterator[Served]:
    """``nofile``: the daemon's RLIMIT_NOFILE (soft and hard, or both as one), so a
    test can exhaust it cheaply. The daemon's exit leaves held providers to their holders
    (issue 20); after it they are stopped as ``t3orch stop-agents`` does, unless
    ``keep_holders`` (a test of live restore, whose next daemon reattaches)."""
    sock_path = state_dir.parent / f"notify-{os.getpid()}-{time.monotonic_ns()}.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(sock_path))
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "PYTHONPATH": str(REPO)}
    if watchdog_usec:
        env["WATCHDOG_USEC"] = str(watchdog_usec)
    args = [sys.executable, "-m", "t3orch.cli.main", "serve", "--state-dir", str(state_dir)]
    if config is not None:
        args += ["--config", str(config)]

    def limit_descriptors() -> None:
        if nofile is not None:
            limits = nofile if isinstance(nofile, tuple) else (nofile, nofile)
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)

    proc = subprocess.Popen(
        args,
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limit_descriptors if nofile is not None else None,
    )
    try:
        yield Served(proc, state_dir, listener)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if not keep_holders:
            stop_agents(state_dir)
        if proc.stderr:
            proc.stderr.close()
        listener.close()
        sock_path.unlink(missing_ok=True)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``t3orch ARGS`` in a child process, its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
