"""``t3orch drill NAME``: crash-recovery drills on the embedded default, with a verdict.

Each drill runs the real daemon on a fresh state dir, breaks something the way
production breaks, and reports: committed events lost (must be 0), how long
the failure took to be recorded, how long until a live runtime served the
thread again, and processes left behind (must be 0).

* ``provider-crash`` — SIGKILL the provider's process group mid-turn.
* ``daemon-crash`` — SIGKILL a ``t3orch serve`` process mid-turn, start it again.
* ``reap-resume`` — let the idle reaper release the runtime, then resume it; a
  canary fact told before the reap must reach the model after.
* ``hang`` — SIGSTOP the provider mid-turn: the stall is reported and the
  runtime killed, and the thread works again.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio

from t3orch import daemonlog
from t3orch.cli.environment import config_toml, provider_environment
from t3orch.commands.specs import CreateThread
from t3orch.config import Config, DaemonConfig
from t3orch.daemon import Daemon, run_daemon
from t3orch.state import prepare_state_dir
from t3orch.store.sqlite.backend import SQLiteStore

DRILLS = ("provider-crash", "daemon-crash", "reap-resume", "hang")
SLOW = {"codex": "SLOW", "claude": "SLOW", "standin": "a slow turn"}
STANDIN_SLOW = [sys.executable, "-m", "adapters.standin", "--slow-ms", "400"]


@attrs.define
class Verdict:
    drill: str
    provider: str
    lost_events: int = 0
    detection_s: float | None = None
    live_again_s: float | None = None
    orphans: int = 0
    checks: dict[str, bool] = attrs.field(factory=dict)
    notes: list[str] = attrs.field(factory=list)

    @property
    def passed(self) -> bool:
        return self.lost_events == 0 and self.orphans == 0 and all(self.checks.values())


def _store_rows(state: Path, kind: str) -> list[Any]:
    store = SQLiteStore(state / "events.sqlite3", readonly=True)
    try:
        with store.snapshot():
            return [r.decode() for r in store.rows(kind)]
    finally:
        store.close()


def _event_ids(state: Path) -> dict[int, str]:
    store = SQLiteStore(state / "events.sqlite3", readonly=True)
    try:
        with store.snapshot():
            return {e.sequence: e.event_id for e in store.iter_events()}
    finally:
        store.close()


def _orphans(pids: list[int]) -> int:
    _, alive = psutil.wait_procs([p for p in (_proc(pid) for pid in pids) if p], timeout=5)
    return len([p for p in alive if p.status() != psutil.STATUS_ZOMBIE])


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


async def _until(predicate: Callable[[], Any], within: float = 30.0) -> Any:
    with trio.fail_after(within):
        while True:
            value = predicate()
            if value:
                return value
            await trio.sleep(0.01)


# -- in-process drills -------------------------------------------------------------


async def _thread(daemon: Daemon, kind: str, work: Path) -> str:
    res = await daemon.core.service.create_thread(
        CreateThread(provider=kind, cwd=str(work), title=f"drill {kind}")  # type: ignore[arg-type]
    )
    return str(res.result["threadId"])


def _row(daemon: Daemon, kind: str, id: str | None) -> Any:
    if id is None:
        return None
    with daemon.core.reader.snapshot():
        row = daemon.core.reader.row(kind, id)
    return None if row is None else row.decode()


async def _turn(daemon: Daemon, thread_id: str, text: str, within: float = 40.0) -> Any:
    res = await daemon.manager.send_message(thread_id, text)
    run_id = res.result["runId"]
    return await _until(
        lambda: (
            (r := _row(daemon, "run", run_id)) is not None
            and r.status in ("completed", "failed", "interrupted", "cancelled")
            and r
        ),
        within,
    )


async def _start_slow(daemon: Daemon, thread_id: str, kind: str) -> tuple[str, int]:
    res = await daemon.manager.send_message(thread_id, SLOW[kind])
    run_id = res.result["runId"]
    await _until(lambda: (r := _row(daemon, "run", run_id)) is not None and r.status == "running")
    runner = daemon.manager.runners[thread_id]
    assert runner.runtime is not None and runner.runtime.pid is not None
    return run_id, runner.runtime.pid


async def _in_process(name: str, kind: str, config: Config, state: Path, work: Path) -> Verdict:
    v = Verdict(name, kind)
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    async with trio.open_nursery() as nursery:
        daemon: Daemon = await nursery.start(run_daemon, config, state)
        if name == "hang":
            daemon.manager.stall_after_s = 1.0
            daemon.manager.kill_stalled_after_s = 1.0
        tid = await _thread(daemon, kind, work)
        canary = "the canary is blue-42"
        first = await _turn(daemon, tid, f"remember: {canary}")
        v.checks["first turn completed"] = first.status == "completed"
        pids: list[int] = []
        if name == "reap-resume":
            runner = daemon.manager.runners[tid]
            session = runner.session_id
            pt_before = _row(
                daemon,
                "provider_thread",
                runner.binding.provider_thread_id if runner.binding else None,
            )
            reaped = await _until(
                lambda: (
                    (s := _row(daemon, "provider_session", session)) is not None
                    and s.status == "stopped"
                    and s
                ),
                within=30,
            )
            v.checks["released by the reaper"] = reaped.status == "stopped"
            started = time.monotonic()
            again = await _turn(daemon, tid, "RECALL" if kind != "standin" else "again")
            v.live_again_s = time.monotonic() - started
            pt_after = _row(daemon, "provider_thread", pt_before.id)
            v.checks["same provider thread resumed"] = (
                again.status == "completed"
                and pt_after.native_thread_ref == pt_before.native_thread_ref
                and again.provider_thread_id == pt_before.id
            )
            if kind != "standin":
                with daemon.core.reader.snapshot():
                    texts = [
                        m.decode().text for m in daemon.core.reader.rows("message", thread_id=tid)
                    ]
                v.checks["canary reached the model after resume"] = canary in texts[-1]
            else:
                v.notes.append("the stand-in cannot prove history; run with codex or claude")
        else:
            run_id, pid = await _start_slow(daemon, tid, kind)
            pids.append(pid)
            runner = daemon.manager.runners[tid]
            session = runner.session_id
            before = {e.sequence: e.event_id for e in daemon.core.reader.iter_events()}
            t0 = time.monotonic()
            os.killpg(
                os.getpgid(pid), signal.SIGKILL if name == "provider-crash" else signal.SIGSTOP
            )
            await _until(
                lambda: (
                    (s := _row(daemon, "provider_session", session)) is not None
                    and s.status in ("error", "stopped")
                ),
                within=30,
            )
            v.detection_s = time.monotonic() - t0
            failed = _row(daemon, "run", run_id)
            v.checks["interrupted run ended failed"] = failed.status == "failed"
            again = await _turn(daemon, tid, "after recovery")
            v.live_again_s = time.monotonic() - t0
            v.checks["next run completed on a new runtime"] = again.status == "completed"
            after = {e.sequence: e.event_id for e in daemon.core.reader.iter_events()}
            v.lost_events = sum(1 for s, e in before.items() if after.get(s) != e)
            if name == "hang":
                v.checks["stall reported"] = any(
                    e.type == "provider.diagnostic"
                    and getattr(e.payload, "code", "") == "turn_stalled"
                    for e in daemon.core.reader.iter_events()
                )
        await daemon.shutdown()
        nursery.cancel_scope.cancel()
    left = [
        p.pid for p in psutil.Process().children(recursive=True) if p.pid not in children_before
    ]
    v.orphans = _orphans(left + pids)
    return v


# -- the daemon-crash drill (a real `t3orch serve` process) ---------------------------


def _rpc(state: Path, method: str, params: dict[str, Any]) -> Any:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(15)
        s.connect(str(state / "api.sock"))
        s.sendall(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
            + b"\n"
        )
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    reply = json.loads(buf)
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]


def _serve(state: Path, config_path: Path, notify: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NOTIFY_SOCKET": str(notify)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "t3orch.cli.main",
            "serve",
            "--state-dir",
            str(state),
            "--config",
            str(config_path),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_ready(
    listener: socket.socket, proc: subprocess.Popen[bytes], within: float = 60
) -> float:
    t0 = time.monotonic()
    listener.settimeout(within)
    while True:
        msg = listener.recv(4096).decode()
        if "READY=1" in msg:
            return time.monotonic() - t0
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited {proc.returncode} before READY")


def _wait(predicate: Callable[[], Any], within: float = 30) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"condition not met within {within}s")


def _daemon_crash(kind: str, config: Config, state: Path, work: Path, tmp: Path) -> Verdict:
    v = Verdict("daemon-crash", kind)
    config_path = tmp / "t3orch.toml"
    config_path.write_text(config_toml(config, standin_command=STANDIN_SLOW))
    notify = tmp / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        proc = _serve(state, config_path, notify)
        procs.append(proc)
        _wait_ready(listener, proc)
        tid = _rpc(state, "thread.create", {"commandId": "d1", "provider": kind, "cwd": str(work)})[
            "result"
        ]["threadId"]
        _rpc(state, "run.send", {"commandId": "d2", "threadId": tid, "text": "hello"})
        _wait(lambda: any(r.status == "completed" for r in _store_rows(state, "run")), 40)
        _rpc(state, "run.send", {"commandId": "d3", "threadId": tid, "text": SLOW[kind]})
        _wait(lambda: any(r.status == "running" for r in _store_rows(state, "run")), 30)
        provider_pids = [s.pid for s in _store_rows(state, "provider_session") if s.pid]
        before = _event_ids(state)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        v.orphans = _orphans(provider_pids)
        v.detection_s = time.monotonic() - t0  # until every provider of the dead daemon is gone
        proc2 = _serve(state, config_path, notify)
        procs.append(proc2)
        ready_s = _wait_ready(listener, proc2)
        v.notes.append(f"restart to READY {ready_s:.2f}s")
        after = _event_ids(state)
        v.lost_events = sum(1 for s, e in before.items() if after.get(s) != e)
        runs = _store_rows(state, "run")
        v.checks["in-flight run settled as interrupted before READY"] = any(
            r.status == "interrupted" for r in runs
        )
        _rpc(state, "run.send", {"commandId": "d4", "threadId": tid, "text": "after the crash"})
        _wait(lambda: sum(r.status == "completed" for r in _store_rows(state, "run")) >= 2, 40)
        v.live_again_s = time.monotonic() - t0
        v.checks["next run completed on a new daemon"] = True
        proc2.send_signal(signal.SIGTERM)
        v.checks["graceful stop"] = proc2.wait(timeout=30) == 0
        v.orphans += _orphans([s.pid for s in _store_rows(state, "provider_session") if s.pid])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        listener.close()
    return v


def _print(v: Verdict, as_json: bool) -> None:
    if as_json:
        print(json.dumps({**attrs.asdict(v), "passed": v.passed}))
        return

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}s"

    print(f"drill {v.drill} ({v.provider}): {'PASS' if v.passed else 'FAIL'}")
    print(f"  committed events lost: {v.lost_events}")
    print(f"  detection: {fmt(v.detection_s)}; live runtime again after: {fmt(v.live_again_s)}")
    print(f"  processes left behind: {v.orphans}")
    for check, ok in v.checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {check}")
    for note in v.notes:
        print(f"  note: {note}")


def cmd_drill(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="t3orch-drill-") as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=False)
        state = Path(args.state_dir) if args.state_dir else root / "state"
        want = [args.provider] if args.provider else None
        daemon_cfg = DaemonConfig(
            synchronous="FULL", idle_timeout_s=1.0 if args.name == "reap-resume" else 1800.0
        )
        with provider_environment(work, root, want, daemon=daemon_cfg) as (config, kinds):
            kind = kinds[0]
            if kind == "standin":
                config = attrs.evolve(
                    config,
                    providers=attrs.evolve(
                        config.providers,
                        standin=attrs.evolve(config.providers.standin, command=STANDIN_SLOW),
                    ),
                )
            if args.name == "daemon-crash":
                verdict = _daemon_crash(kind, config, state, work, root)
            else:
                prepare_state_dir(state, create=True)
                with daemonlog.logging_to(state, stderr=False):
                    verdict = trio.run(_in_process, args.name, kind, config, state, work)
    _print(verdict, args.json)
    return 0 if verdict.passed else 1
