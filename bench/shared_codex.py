"""Shared Codex processes (issue 21): provider RSS and turn latency, shared against one each.

Prints figures; it is not a timed test. The real daemon (``run_daemon``) runs the
real pinned ``codex app-server`` against the loopback fake model
(``fixtures/fakes/responses_api.py``), once with
``providers.codex.max_threads_per_process = 16`` (shared) and once with ``1`` (a
process per thread, the behaviour before issue 21), in the same run, with the default
daemon config (``daemon.reattach_grace_s`` = 600: every process under a holder; the
holders' own RSS is summed apart):

1. **RSS**: for each count in ``--threads`` (default 10 and 50), that many Codex
   threads each run one plain turn (all sent at once); once every run has
   completed and the processes have been idle ``--settle`` seconds, the RSS of every
   ``codex app-server`` process (and its descendants) the daemon runs is summed.
   Target: 10 threads <= 400 MB shared.
2. **Latency**: ``--latency-threads`` threads (default 10), each with one turn done
   already (the processes are warm), send a turn at once; per turn, the time from
   ``send_message`` to the committed completed run. Median and max, on one process
   against one process per thread.

Run: ``python bench/shared_codex.py [--threads 10,50] [--latency-threads 10] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]

from supervisor.holder.layout import describe_held  # noqa: E402
from t3orch.cli.environment import provider_environment  # noqa: E402
from t3orch.commands.specs import CreateThread  # noqa: E402
from t3orch.config import Config, DaemonConfig, discover_codex  # noqa: E402
from t3orch.daemon import Daemon, run_daemon  # noqa: E402

TERMINAL = ("completed", "failed", "interrupted", "cancelled")


def _tree_rss(p: psutil.Process) -> int:
    total = p.memory_info().rss
    for c in p.children(recursive=True):
        total += c.memory_info().rss
    return total


def _codex_rss(state: Path) -> tuple[int, int]:
    """(processes, total RSS bytes) of the ``codex app-server`` processes of the daemon:
    its children, and the providers its holders (their own sessions) run."""
    me = psutil.Process(os.getpid())
    candidates = list(me.children(recursive=True))
    for held in describe_held(state):
        with contextlib.suppress(psutil.Error):
            candidates.append(psutil.Process(int(str(held["providerPid"]))))
    count = total = 0
    seen: set[int] = set()
    for p in candidates:
        try:
            if p.pid in seen or p.cmdline()[-1:] != ["app-server"]:
                continue
            seen.add(p.pid)
            count += 1
            total += _tree_rss(p)
        except psutil.Error:
            continue
    return count, total


def _holder_rss(state: Path) -> tuple[int, int]:
    """(holders, their own RSS bytes): the live-restore holders of the daemon, without
    the provider each holds (that is :func:`_codex_rss`'s)."""
    count = total = 0
    for held in describe_held(state):
        try:
            total += psutil.Process(int(str(held["holderPid"]))).memory_info().rss
            count += 1
        except psutil.Error:
            continue
    return count, total


def _status(daemon: Daemon, run_id: str) -> str | None:
    with daemon.core.reader.snapshot():
        row = daemon.core.reader.row("run", run_id)
    return None if row is None else row.decode().status


async def _turns(daemon: Daemon, tids: list[str], text: str) -> list[float]:
    """One turn on each thread, sent at once; seconds from send to committed end."""
    took: list[float] = []

    async def one(tid: str) -> None:
        start = trio.current_time()
        sent = await daemon.manager.send_message(tid, text)
        run_id = sent.result["runId"]
        with trio.fail_after(300):
            while (status := _status(daemon, run_id)) not in TERMINAL:  # noqa: ASYNC110
                await trio.sleep(0.01)
        if status != "completed":
            raise RuntimeError(f"run {run_id} ended {status}")
        took.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        for tid in tids:
            nursery.start_soon(one, tid)
    return took


async def _threads(daemon: Daemon, work: Path, n: int) -> list[str]:
    out = []
    for _ in range(n):
        created = await daemon.core.service.create_thread(
            CreateThread(provider="codex", cwd=str(work))
        )
        out.append(created.result["threadId"])
    return out


def _with_sharing(config: Config, per_process: int) -> Config:
    codex = attrs.evolve(config.providers.codex, max_threads_per_process=per_process)
    return attrs.evolve(config, providers=attrs.evolve(config.providers, codex=codex))


async def _measure(
    base: Config, tmp: Path, per_process: int, counts: list[int], latency_n: int, settle: float
) -> dict[str, Any]:
    config = _with_sharing(base, per_process)
    out: dict[str, Any] = {"rss": {}}
    for n in counts:
        state = tmp / f"state-{per_process}-{n}"
        async with trio.open_nursery() as nursery:
            daemon: Daemon = await nursery.start(run_daemon, config, state)
            tids = await _threads(daemon, tmp / "work", n)
            await _turns(daemon, tids, "hello")
            await trio.sleep(settle)
            processes, rss = _codex_rss(state)
            holders, holder_rss = _holder_rss(state)
            out["rss"][n] = {
                "processes": processes,
                "rss_mb": round(rss / 2**20, 1),
                "holders": holders,
                "holders_mb": round(holder_rss / 2**20, 1),
            }
            await daemon.shutdown()
            nursery.cancel_scope.cancel()
    state = tmp / f"state-{per_process}-latency"
    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(run_daemon, config, state)
        tids = await _threads(daemon, tmp / "work", latency_n)
        await _turns(daemon, tids, "warm up")
        took = await _turns(daemon, tids, "hello again")
        out["latency"] = {
            "processes": _codex_rss(state)[0],
            "median_s": round(statistics.median(took), 3),
            "max_s": round(max(took), 3),
        }
        await daemon.shutdown()
        nursery.cancel_scope.cancel()
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    counts = [int(c) for c in args.threads.split(",") if c]
    with tempfile.TemporaryDirectory(prefix="t3-shared-bench-") as d:
        tmp = Path(d)
        work = tmp / "work"
        work.mkdir()
        await trio.run_process(["git", "init", "-q", str(work)])
        # The default daemon config: live restore on, so every process is held.
        daemon_cfg = DaemonConfig()
        with provider_environment(work, tmp, ["codex"], daemon=daemon_cfg) as (config, kinds):
            if kinds != ["codex"]:
                raise SystemExit("the codex binary is not installed (scripts/install-codex)")
            shared = await _measure(
                config, tmp, args.per_process, counts, args.latency_threads, args.settle
            )
            single = await _measure(config, tmp, 1, counts, args.latency_threads, args.settle)
    return {"loadavg": os.getloadavg(), "shared": shared, "one_per_thread": single}


def _print(result: dict[str, Any], per_process: int) -> None:
    print(f"load average at end: {', '.join(f'{x:.2f}' for x in result['loadavg'])}")
    print("idle provider RSS after one turn per thread")
    print(f"{'threads':>8} {'shared (procs)':>22} {'one per thread (procs)':>26}")
    for n, s in result["shared"]["rss"].items():
        o = result["one_per_thread"]["rss"][n]
        print(
            f"{n:>8} {s['rss_mb']:>14.1f} MB ({s['processes']:>2}) "
            f"{o['rss_mb']:>18.1f} MB ({o['processes']:>2})"
        )
        print(
            f"{'holders':>8} {s['holders_mb']:>14.1f} MB ({s['holders']:>2}) "
            f"{o['holders_mb']:>18.1f} MB ({o['holders']:>2})"
        )
    s, o = result["shared"]["latency"], result["one_per_thread"]["latency"]
    print("turn latency, threads streaming at once (send -> committed completed run)")
    for name, r in (("shared", s), ("one per thread", o)):
        print(
            f"  {name}, {r['processes']} process(es): median {r['median_s']} s, max {r['max_s']} s"
        )
    print(f"(shared: providers.codex.max_threads_per_process = {per_process})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="10,50", help="thread counts for the RSS figure")
    parser.add_argument("--latency-threads", type=int, default=10)
    parser.add_argument("--per-process", type=int, default=16, help="the shared setting")
    parser.add_argument("--settle", type=float, default=2.0, help="idle seconds before RSS")
    parser.add_argument("--json", action="store_true")
    if discover_codex() is None:
        raise SystemExit("the codex binary is not installed (scripts/install-codex)")
    ns = parser.parse_args()
    logging.disable(logging.WARNING)  # the providers' config warnings, once per process
    res = trio.run(main, ns)
    if ns.json:
        print(json.dumps(res, indent=2))
    else:
        _print(res, ns.per_process)
