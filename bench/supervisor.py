"""Supervisor benchmark: 200 stand-in sessions under one daemon process, then a daemon crash.

Prints figures; it is not a timed test. The *daemon* is a child process of this
script (``--daemon``): the real core (``open_core``, ``synchronous=FULL`` as the
daemon's default) and the real ``SessionManager`` driving ``python -m
adapters.standin`` (the echo transcript, Codex adapter, real pipes) for every
session. This script measures it from outside, then kills it:

1. **Start**: ``--sessions`` threads, one message each, sent at once. Printed: the
   time until every ProviderSession reached ``ready`` and until every run completed
   its first turn (both from the first send, seen on ``core.broadcast``).
2. **Daemon RSS** (the daemon process alone, children excluded; psutil) with all
   sessions live. Target < 200 MB.
3. **Idle CPU** of the daemon process over ``--idle-s`` seconds with every session
   live and idle. Target < 2 %.
4. **Exit detection**: ``--kills`` provider process groups SIGKILLed one at a time
   (by the daemon itself, so both clocks are the same); each latency runs from
   ``killpg`` to the commit of the ``provider_session.upserted`` event that moves the
   session out of ``ready``/``running`` (delivered by ``core.broadcast``). p50/p99.
   G3 target: p99 < 50 ms.
5. **Daemon crash**: the daemon is SIGKILLed with the remaining sessions live. Printed:
   how long until no provider it started is alive (G6: 0 after 5 s; parent-death
   signal). Then a new process (``--restart``) opens the store and runs
   ``supervisor.startup.settle_previous_run`` (orphan sweep + one reconciliation
   transaction): printed are the settle time and the time from spawning that process
   to READY (interpreter start and imports included). Target: restart to READY < 2 s.

Run: ``python bench/supervisor.py [--sessions N] [--kills K] [--idle-s S] [--dir D] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import psutil
import trio

# Run as ``python bench/supervisor.py``, this file's directory comes first on
# sys.path, and this file's name would shadow the ``supervisor`` package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]

from supervisor.manager import SessionManager  # noqa: E402
from supervisor.providers import standin_settings  # noqa: E402
from supervisor.startup import settle_previous_run  # noqa: E402
from t3orch.commands.specs import CreateThread  # noqa: E402
from t3orch.core import open_core  # noqa: E402
from t3orch.events import ProviderSessionUpserted, RunUpserted  # noqa: E402

RSS_TARGET_MB = 200.0
IDLE_CPU_TARGET_PCT = 2.0
RESTART_TARGET_S = 2.0
EXIT_P99_TARGET_MS = 50.0
ORPHAN_GRACE_S = 5.0


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# -- the daemon (child process) ---------------------------------------------------------


async def _daemon(db: Path, sessions: int) -> None:
    async with open_core(db, synchronous="FULL") as core:
        manager = SessionManager(
            core=core.service, reader=core.reader, providers={"standin": standin_settings()}
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            sub = core.broadcast.subscribe(capacity=1_000_000)
            threads = []
            for _ in range(sessions):
                res = await core.service.create_thread(CreateThread(provider="standin", cwd="/tmp"))
                threads.append(str(res.result["threadId"]))
            t0 = time.perf_counter()
            runs = set()
            for tid in threads:
                runs.add((await manager.send_message(tid, "hello")).result["runId"])
            ready: dict[str, float] = {}
            done: dict[str, float] = {}
            with trio.fail_after(600):
                async for env in sub:
                    p = env.payload
                    now = time.perf_counter() - t0
                    if isinstance(p, ProviderSessionUpserted) and p.session.status == "ready":
                        ready.setdefault(p.session.id, now)
                    elif isinstance(p, RunUpserted) and p.run.id in runs:
                        if p.run.status in ("failed", "interrupted", "cancelled"):
                            raise RuntimeError(f"run {p.run.id} ended {p.run.status}")
                        if p.run.status == "completed":
                            done.setdefault(p.run.id, now)
                    if len(done) == len(runs) and len(ready) >= sessions:
                        break
            sub.close()
            pids = {
                r.session_id: r.runtime.pid
                for r in manager.runners.values()
                if r.runtime is not None and r.session_id is not None
            }
            _emit(
                {
                    "event": "started",
                    "all_ready_s": max(ready.values()),
                    "all_first_turn_s": max(done.values()),
                    "provider_pids": sorted(p for p in pids.values() if p is not None),
                }
            )
            stdin = trio.lowlevel.FdStream(os.dup(0))
            while True:
                line = await stdin.receive_some(4096)
                if not line:
                    return
                command = line.decode().split()
                if command and command[0] == "kill":
                    latencies = await _exit_latencies(core, manager, pids, int(command[1]))
                    _emit({"event": "exits", "latencies_ms": latencies})


async def _exit_latencies(
    core: Any, manager: SessionManager, pids: dict[str, int | None], kills: int
) -> list[float]:
    latencies = []
    for session_id, pid in list(pids.items())[:kills]:
        if pid is None:
            continue
        sub = core.broadcast.subscribe(capacity=1_000_000)
        try:
            killed_at = time.perf_counter()
            os.killpg(pid, signal.SIGKILL)
            with trio.fail_after(10):
                async for env in sub:
                    p = env.payload
                    if (
                        isinstance(p, ProviderSessionUpserted)
                        and p.session.id == session_id
                        and p.session.status not in ("ready", "running", "waiting")
                    ):
                        latencies.append((time.perf_counter() - killed_at) * 1000)
                        break
        finally:
            sub.close()
        pids.pop(session_id)
    return latencies


async def _restart(db: Path) -> None:
    started = time.perf_counter()
    async with open_core(db, synchronous="FULL") as core:
        opened = time.perf_counter()
        counts = await settle_previous_run(core.service, core.reader)
        settled = time.perf_counter()
        with core.reader.snapshot():
            sessions = core.reader.rows("provider_session")
            statuses: dict[str, int] = {}
            for row in sessions:
                s = row.decode()
                statuses[s.status] = statuses.get(s.status, 0) + 1
        _emit(
            {
                "event": "ready",
                "open_s": opened - started,
                "settle_s": settled - opened,
                "counts": counts,
                "session_statuses": statuses,
            }
        )


# -- the measuring parent ----------------------------------------------------------------


def _read_event(stream: IO[str], name: str) -> dict[str, Any]:
    while True:
        line = stream.readline()
        if not line:
            raise RuntimeError(f"the daemon ended before {name!r}")
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("event") == name:
            return dict(record)


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def run(
    sessions: int, kills: int, idle_s: float, idle_wait_s: float, state_dir: Path
) -> dict[str, Any]:
    db = state_dir / "t3orch.db"
    me = str(Path(__file__).resolve())
    daemon = subprocess.Popen(
        [sys.executable, me, "--daemon", str(db), "--sessions", str(sessions)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert daemon.stdin is not None and daemon.stdout is not None
    try:
        started = _read_event(daemon.stdout, "started")
        proc = psutil.Process(daemon.pid)
        rss_mb = proc.memory_info().rss / 2**20
        daemon_cpu = proc.cpu_times()
        children = proc.children()
        children_rss_mb = 0.0
        children_cpu_s = 0.0
        for child in children:
            try:
                children_rss_mb += child.memory_info().rss / 2**20
                times = child.cpu_times()
                children_cpu_s += times.user + times.system
            except psutil.Error:
                continue
        time.sleep(idle_wait_s)
        proc.cpu_percent(None)
        time.sleep(idle_s)
        idle_cpu = proc.cpu_percent(None)

        daemon.stdin.write(f"kill {kills}\n")
        daemon.stdin.flush()
        exits = _read_event(daemon.stdout, "exits")
        latencies: list[float] = exits["latencies_ms"]

        provider_pids: list[int] = started["provider_pids"]
        live = _alive(provider_pids)
        crashed_at = time.perf_counter()
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        while _alive(live) and time.perf_counter() - crashed_at < ORPHAN_GRACE_S:
            time.sleep(0.005)
        survivors = _alive(live)
        gone_s = time.perf_counter() - crashed_at
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()

    spawned = time.perf_counter()
    restart = subprocess.run(
        [sys.executable, me, "--restart", str(db)], capture_output=True, text=True, check=True
    )
    restart_wall_s = time.perf_counter() - spawned
    ready = next(
        json.loads(line)
        for line in restart.stdout.splitlines()
        if line.startswith("{") and json.loads(line).get("event") == "ready"
    )
    return {
        "sessions": sessions,
        "all_ready_s": started["all_ready_s"],
        "all_first_turn_s": started["all_first_turn_s"],
        "daemon_rss_mb": rss_mb,
        "daemon_cpu_start_s": daemon_cpu.user + daemon_cpu.system,
        "children_cpu_start_s": children_cpu_s,
        "children": len(children),
        "children_rss_mb": children_rss_mb,
        "idle_cpu_pct": idle_cpu,
        "idle_s": idle_s,
        "idle_wait_s": idle_wait_s,
        "exit_kills": len(latencies),
        "exit_p50_ms": statistics.median(latencies) if latencies else math.nan,
        "exit_p99_ms": _percentile(latencies, 0.99),
        "exit_max_ms": max(latencies) if latencies else math.nan,
        "live_at_crash": len(live),
        "providers_gone_s": gone_s,
        "orphans_after_5s": len(survivors),
        "restart_open_s": ready["open_s"],
        "restart_settle_s": ready["settle_s"],
        "restart_to_ready_s": restart_wall_s,
        "reconciled": ready["counts"],
        "session_statuses": ready["session_statuses"],
    }


def _line(label: str, value: str, target: str = "", ok: bool | None = None) -> None:
    verdict = "" if ok is None else _verdict(ok)
    print(f"  {label:<40} {value:>22}  {target:<18} {verdict}".rstrip())


def report(r: dict[str, Any]) -> None:
    n = r["sessions"]
    print(f"supervisor bench: {n} stand-in sessions, one daemon process, {os.cpu_count()} CPUs")
    _line(f"all {n} sessions ready", f"{r['all_ready_s']:.2f} s")
    _line(f"all {n} first turns completed", f"{r['all_first_turn_s']:.2f} s")
    _line(
        "  CPU by then: daemon / all stand-ins",
        f"{r['daemon_cpu_start_s']:.1f} s / {r['children_cpu_start_s']:.1f} s",
    )
    _line(
        "daemon RSS (children excluded)",
        f"{r['daemon_rss_mb']:.1f} MB",
        f"< {RSS_TARGET_MB:.0f} MB",
        r["daemon_rss_mb"] < RSS_TARGET_MB,
    )
    _line(f"  {r['children']} stand-ins together", f"{r['children_rss_mb']:.0f} MB")
    _line(
        f"daemon CPU, idle, over {r['idle_s']:.0f} s"
        + (f" (after {r['idle_wait_s']:.0f} s)" if r["idle_wait_s"] else ""),
        f"{r['idle_cpu_pct']:.2f} %",
        f"< {IDLE_CPU_TARGET_PCT:.0f} %",
        r["idle_cpu_pct"] < IDLE_CPU_TARGET_PCT,
    )
    _line(
        f"exit detection p50 / p99 ({r['exit_kills']} SIGKILLs)",
        f"{r['exit_p50_ms']:.1f} / {r['exit_p99_ms']:.1f} ms",
        f"p99 < {EXIT_P99_TARGET_MS:.0f} ms",
        r["exit_p99_ms"] < EXIT_P99_TARGET_MS,
    )
    _line(
        f"daemon SIGKILL: {r['live_at_crash']} providers gone after",
        f"{r['providers_gone_s'] * 1000:.0f} ms",
    )
    _line(
        "  providers alive 5 s later",
        str(r["orphans_after_5s"]),
        "0",
        r["orphans_after_5s"] == 0,
    )
    _line("restart: open the store", f"{r['restart_open_s'] * 1000:.0f} ms")
    _line(
        f"restart: settle_previous_run ({n} sessions)",
        f"{r['restart_settle_s'] * 1000:.0f} ms",
    )
    _line(
        "restart to READY (new process)",
        f"{r['restart_to_ready_s']:.2f} s",
        f"< {RESTART_TARGET_S:.0f} s",
        r["restart_to_ready_s"] < RESTART_TARGET_S,
    )
    print(f"  recorded sessions after the restart: {r['session_statuses']}")
    print(f"  reconciled: {r['reconciled']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument(
        "--idle-wait-s", type=float, default=0.0, help="wait this long idle before measuring CPU"
    )
    parser.add_argument("--dir", type=Path, help="state directory (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--daemon", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--restart", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.daemon is not None:
        trio.run(_daemon, args.daemon, args.sessions)
        return
    if args.restart is not None:
        trio.run(_restart, args.restart)
        return
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        result = run(args.sessions, args.kills, args.idle_s, args.idle_wait_s, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="t3orch-bench-") as tmp:
            result = run(args.sessions, args.kills, args.idle_s, args.idle_wait_s, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)


if __name__ == "__main__":
    main()
