"""A `t3orch serve` child process with a real NOTIFY_SOCKET listener, a socket client, and
reads of its state dir's store (read-only, beside the running daemon)."""

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
import psutil

from t3orch.cli.polling import wait_until
from t3orch.cli.served import exchange, state_rows
from t3orch.daemon import stop_agents
from t3orch.store.sqlite.backend import SQLiteStore

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


def config_file(
    tmp: Path, *standin_args: str, reattach_grace_s: float = 0, transcript: Path | None = None
) -> Path:
    """The stand-in with ``standin_args`` (playing ``transcript``, if given); no holders
    unless ``reattach_grace_s`` (the tests of live restore): the other daemon tests are
    about providers that die with it."""
    cmd = [sys.executable, "-m", "adapters.standin", *standin_args]
    path = tmp / "t3orch.toml"
    text = (
        f"[daemon]\nreattach_grace_s = {reattach_grace_s}\n"
        f"[providers.standin]\ncommand = {json.dumps(cmd)}\n"
    )
    if transcript is not None:
        text += f"transcript = {json.dumps(str(transcript))}\n"
    path.write_text(text)
    return path


#: The decoded projection rows of a kind in the state dir's store, as committed now.
rows = state_rows


def events(state_dir: Path, type_: str) -> list[Any]:
    """The committed events of type ``type_`` in the state dir's store, in sequence order."""
    store = SQLiteStore(state_dir / "events.sqlite3", readonly=True)
    try:
        return [e for e in store.iter_events() if e.type == type_]
    finally:
        store.close()


#: The first true value of a predicate (polled), or a TimeoutError naming what was awaited.
wait_for = wait_until


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


def cli_ok(state: Path, *args: str) -> str:
    """``t3orch ARGS --state-dir STATE``, which must succeed; its output."""
    done = cli(*args, "--state-dir", str(state))
    assert done.returncode == 0, done.stderr
    return done.stdout


def alive(pid: int) -> bool:
    """The process runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
