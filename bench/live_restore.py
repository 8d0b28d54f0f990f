"""Live restore benchmark (issue 20): reattach time, buffered frames, the holder hop.

Prints figures; it is not a timed test.

1. **Restart**: ``--runtimes`` stand-in runtimes (default 200) streaming under their holders
   in a real ``t3orch serve``; the daemon is SIGKILLed, stays down ``--down-s``, and starts
   again. Printed: start to READY (reattach is before READY), the daemon's own reattach
   time, and whether every reply then landed in the log whole and once — including the
   frames the holders journaled while no daemon was there (target: all reattached < 1 s).
2. **Hop**: one provider writing ``--frames`` Codex delta lines as fast as it can, read
   through a child's pipe (``ChildProcess.receive_lines``) and through a holder
   (``HeldProcess.receive_lines``): lines/s each, and the holder's cost per frame.
3. **Adapter + log**: the stand-in playing a ``--turn-frames`` delta turn at full speed
   through the real daemon (in process: adapter, ingest stream, store), with and without a
   holder: frames/s end to end (target: >= 50,000 with the holder). The stand-in itself
   (a Python transcript player) is part of this path and may be what bounds it.

Run: ``python bench/live_restore.py [--runtimes N] [--frames N] [--turn-frames N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adapters.ownership import this_process  # noqa: E402
from adapters.process import open_child_process  # noqa: E402
from adapters.transport import LaunchSpec  # noqa: E402
from supervisor.holder.client import attach, start_holder  # noqa: E402
from t3orch.cli.drill import long_reply  # noqa: E402
from t3orch.cli.polling import wait_until  # noqa: E402
from t3orch.cli.served import rpc, served, state_rows  # noqa: E402
from t3orch.daemon import stop_agents  # noqa: E402
from t3orch.store.open import open_reader  # noqa: E402

DELTA = json.dumps(
    {
        "method": "item/agentMessage/delta",
        "params": {"threadId": "t", "turnId": "u", "itemId": "m", "delta": "word "},
    }
)


# -- 1. restart ------------------------------------------------------------------------


def _deltas(state: Path) -> dict[str, str]:
    store = open_reader(state / "events.sqlite3")
    try:
        out: dict[str, str] = {}
        for e in store.iter_events():
            if e.type == "turn_item.delta":
                out[e.payload.item_id] = out.get(e.payload.item_id, "") + e.payload.text  # type: ignore[union-attr]
        return out
    finally:
        store.close()


def bench_restart(runtimes: int, down_s: float, profile: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="t3orch-bench-restore-") as tmp_s:
        tmp = Path(tmp_s)
        state = tmp / "state"
        words = [f"w{i} " for i in range(300)]
        transcript = long_reply(tmp, words, every_ms=100)  # a 30 s reply each
        cfg = tmp / "t3orch.toml"
        cmd = [sys.executable, "-m", "adapters.standin"]
        cfg.write_text(
            "[daemon]\nreattach_grace_s = 600\nrestart_intensity = 100\n"
            f"[providers.standin]\ncommand = {json.dumps(cmd)}\n"
            f"transcript = {json.dumps(str(transcript))}\n"
        )
        env = {"PYTHONPATH": str(ROOT)}
        try:
            with served(state, cfg, tmp / "notify.sock", env=env) as daemons:
                d = daemons.start()
                daemons.ready(d, within=300)
                for i in range(runtimes):
                    tid = rpc(
                        state,
                        "thread.create",
                        {"commandId": f"t{i}", "provider": "standin", "cwd": "/tmp"},
                    )["result"]["threadId"]
                    rpc(state, "run.send", {"commandId": f"r{i}", "threadId": tid, "text": "go"})
                wait_until(
                    lambda: (
                        sum(1 for s in state_rows(state, "provider_session") if s.holder)
                        >= runtimes
                    ),
                    600,
                    every=0.1,
                )
                time.sleep(0.5)
                d.send_signal(signal.SIGKILL)
                d.wait()
                time.sleep(down_s)  # the holders journal what the providers say meanwhile
                d2 = daemons.start(profile=profile)
                load_at_restart = os.getloadavg()
                ready_s = daemons.ready(d2, within=300)
                log = (state / "daemon.log").read_text().splitlines()
                reattach = [line for line in log if "reattached" in line][-1]
                wait_until(
                    lambda: all(r.status == "completed" for r in state_rows(state, "run")),
                    600,
                    every=0.1,
                )
                texts = _deltas(state)
                whole = sum(1 for t in texts.values() if t == "".join(words))
                d2.send_signal(signal.SIGTERM)
                d2.wait(timeout=120)
                return {
                    "runtimes": runtimes,
                    "downS": down_s,
                    "loadAverageAtRestart": [round(x, 2) for x in load_at_restart],
                    "startToReadyS": round(ready_s, 3),
                    "daemonSays": reattach.split(": ", 1)[-1],
                    "repliesWholeAndOnce": whole,
                    "replies": len(texts),
                }
        finally:
            stop_agents(state, within=120)


# -- 2. hop --------------------------------------------------------------------------------


def _writer(frames: int) -> LaunchSpec:
    code = (
        "import sys\n"
        f"line = {DELTA!r}.encode() + b'\\n'\n"
        f"block = line * 1000\n"
        f"for _ in range({frames // 1000}):\n    sys.stdout.buffer.write(block)\n"
        "sys.stdout.buffer.flush()\nsys.stdin.read()\n"
    )
    return LaunchSpec(argv=[sys.executable, "-c", code], env=dict(os.environ), cwd="/tmp")


async def _drain(read: Any, frames: int) -> float:
    t0 = time.perf_counter()
    got = 0
    while got < frames:
        lines = await read()
        if not lines:
            break
        got += len(lines)
    return time.perf_counter() - t0


async def bench_hop(frames: int) -> dict[str, Any]:
    async with open_child_process(_writer(frames)) as child:
        direct = await _drain(child.receive_lines, frames)
        await child.close_stdin()
    with tempfile.TemporaryDirectory(prefix="t3orch-bench-hop-") as tmp:
        paths = await start_holder(
            Path(tmp), _writer(frames), grace_s=30, owner=this_process().token()
        )
        async with trio.open_nursery() as nursery:
            held = await attach(paths, 0)
            await nursery.start(held.serve)
            through = await _drain(held.receive_lines, frames)
            await held.kill()
            await held.wait()
    return {
        "frames": frames,
        "directLinesPerS": round(frames / direct),
        "heldLinesPerS": round(frames / through),
        "holderCostUsPerFrame": round((through - direct) / frames * 1e6, 2),
    }


# -- 3. adapter + log ---------------------------------------------------------------------------


async def _e2e(turn_frames: int, grace_s: float, tmp: Path) -> float:
    from t3orch.commands.specs import CreateThread
    from t3orch.config import Config, DaemonConfig, ProvidersConfig, StandinConfig
    from t3orch.daemon import Daemon, run_daemon

    words = [f"w{i % 10} " for i in range(turn_frames)]
    transcript = long_reply(tmp, words, every_ms=0)
    standin = StandinConfig(
        command=[sys.executable, "-m", "adapters.standin", "--speed", "0"], transcript=transcript
    )
    config = Config(
        daemon=DaemonConfig(synchronous="FULL", reattach_grace_s=grace_s),
        providers=ProvidersConfig(standin=standin),
    )
    state = tmp / f"state-{grace_s:g}"
    async with trio.open_nursery() as nursery:
        daemon: Daemon = await nursery.start(run_daemon, config, state)
        created = await daemon.core.service.create_thread(
            CreateThread(provider="standin", cwd="/tmp")
        )
        tid = created.result["threadId"]
        runner = await daemon.manager.ensure_runner(tid)
        t0 = time.perf_counter()
        sent = await daemon.manager.send_message(tid, "go")
        run_id = sent.result["runId"]
        while True:
            with daemon.core.reader.snapshot():
                run = daemon.core.reader.row("run", run_id)
            if run is not None and run.decode().status == "completed":
                break
            await trio.sleep(0.005)
        took = time.perf_counter() - t0
        assert runner is not None
        nursery.cancel_scope.cancel()
    # A daemon's exit leaves its held runtimes to their holders: stop them, as ExecStop= would.
    stop_agents(state)
    return turn_frames / took


async def bench_e2e(turn_frames: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="t3orch-bench-e2e-") as tmp:
        direct = await _e2e(turn_frames, 0.0, Path(tmp))
        held = await _e2e(turn_frames, 600.0, Path(tmp))
    return {
        "turnFrames": turn_frames,
        "directFramesPerS": round(direct),
        "heldFramesPerS": round(held),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtimes", type=int, default=200)
    ap.add_argument("--down-s", type=float, default=2.0)
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--turn-frames", type=int, default=20_000)
    ap.add_argument("--skip-restart", action="store_true")
    ap.add_argument("--only-restart", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--profile", type=Path, help="cProfile the restarted daemon; its figures go here"
    )
    args = ap.parse_args()
    out: dict[str, Any] = {"loadAverage": os.getloadavg()[0], "cpus": os.cpu_count()}
    if not args.only_restart:
        out["hop"] = trio.run(bench_hop, args.frames)
        out["adapterAndLog"] = trio.run(bench_e2e, args.turn_frames)
    if not args.skip_restart:
        out["restart"] = bench_restart(args.runtimes, args.down_s, args.profile)
    if args.json:
        print(json.dumps(out))
        return
    for key, value in out.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
