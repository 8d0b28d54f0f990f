"""Fleet benchmark: provider frame on daemon B → subscriber on daemon A, one PostgreSQL log.

Prints figures; it is not a timed test (issue 19, Benchmark). Two real ``t3orch
serve`` daemons (their own state dirs, one database, the stand-in provider):

* **B** owns a thread and runs ``--runs`` stand-in turns on it, one after another
  (``--slow-ms`` between the provider's lines, so a turn streams for a while).
* **A** serves ``--subscribers`` WebSocket subscribers of that thread's
  ``threadDetail`` (``bench/ws_harness.py`` readers: real handshake and subscribe,
  raw sockets, every frame stamped with CLOCK_MONOTONIC at the ``recv`` that
  completed it, decoded after the run). What reaches them went: stand-in → B's
  adapter → ingest → B's writer → PostgreSQL commit (``NOTIFY``) → A's log follower
  → A's broadcast → A's API stream → WebSocket.
* ``--local N`` adds N subscribers on B itself, for the same path without the hop.

Stamps: B records the wall-clock time (ms) at which its adapter read each provider
frame (the raw frame log's ``observedAt``), and every event names its frame
(``correlation.rawEventId``); the readers' monotonic stamps are put on the wall
clock by one offset read at start (one machine, one clock). Latencies printed
(p50/p99/max over subscriber × event):

* **item upserts, frame → remote subscriber**: ``turn_item.upserted`` (never
  coalesced). The target: p99 < 50 ms.
* **deltas, first frame of the batch → remote subscriber**: a coalesced delta names
  its batch's first frame, so this holds the coalescing (up to the 250 ms window,
  or the item's end) by design; for reference.
* **every event, commit → remote subscriber**: from the event's ``occurredAt``
  (B's batch time) on.

Without ``--url`` it starts a throwaway server as the tests do (``tests/pg.py``).
``python bench/fleet.py [--subscribers N] [--runs N] [--slow-ms MS] [--local N]
[--json]``. Exit status 0 when the target passes and every subscriber got every
event without a resync.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
REPO = _HERE.parent
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]

from tests.daemon.support import Served, rpc, serve  # noqa: E402

HARNESS = _HERE / "ws_harness.py"
TARGET_MS = 50.0


def _harness() -> Any:
    spec = importlib.util.spec_from_file_location("_bench_ws_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(root: Path, host: str, url: str, slow_ms: float) -> Path:
    cmd = [sys.executable, "-m", "adapters.standin", "--slow-ms", str(slow_ms)]
    path = root / f"{host}.toml"
    path.write_text(
        f'[daemon]\nhost_name = "{host}"\nsynchronous = "NORMAL"\n'
        f'[store]\nurl = "{url}"\n[providers.standin]\ncommand = {json.dumps(cmd)}\n'
    )
    return path


def _wall(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _observed(state: Path) -> dict[str, float]:
    """Raw frame id → when B's adapter read it (wall clock, ms)."""
    out: dict[str, float] = {}
    for path in sorted((state / "raw").glob("*.jsonl*")):
        for line in path.read_text().splitlines():
            frame = json.loads(line)
            out[frame["id"]] = _wall(frame["observedAt"])
    return out


class Readers:
    """``ws_harness.py reader`` processes: ``count`` subscribers of one thread."""

    def __init__(self, state: Path, thread_id: str, count: int, out: Path, procs: int) -> None:
        port = int((state / "api.port").read_text())
        self.procs: list[tuple[subprocess.Popen[str], Path]] = []
        first = 0
        for i in range(procs):
            n = count // procs + (1 if i < count % procs else 0)
            if n == 0:
                continue
            path = out.with_name(f"{out.name}-{i}.bin")
            argv = [sys.executable, str(HARNESS), "reader", "--port", str(port)]
            argv += ["--token-file", str(state / "api-token"), "--thread", thread_id]
            argv += ["--count", str(n), "--first-index", str(first), "--out", str(path)]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.procs.append((proc, path))
            first += n
        for proc, _ in self.procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("bench/fleet.py: a reader did not subscribe")

    def stop(self) -> list[tuple[float, int, bytes]]:
        harness = _harness()
        frames: list[tuple[float, int, bytes]] = []
        for proc, _ in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.flush()
        for proc, path in self.procs:
            assert proc.stdout is not None
            while proc.stdout.readline().strip() not in ("done", ""):
                pass
            proc.wait(timeout=60)
            frames += harness.read_frames(path)[1]
        return frames


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(ms: Sequence[float]) -> dict[str, Any]:
    return {
        "n": len(ms),
        "p50": round(pct(ms, 0.50), 1),
        "p99": round(pct(ms, 0.99), 1),
        "max": round(max(ms), 1) if ms else None,
    }


def analyse(
    frames: list[tuple[float, int, bytes]], offset: float, observed: dict[str, float], subs: int
) -> dict[str, Any]:
    items: list[float] = []
    deltas: list[float] = []
    commits: list[float] = []
    per_sub: dict[int, list[int]] = {}
    resyncs = 0
    for t, index, payload in frames:
        doc = json.loads(payload)
        method = doc.get("method")
        if method == "resync":
            resyncs += 1
        if method != "event":
            continue
        event = doc["params"]["event"]
        per_sub.setdefault(index, []).append(int(event["sequence"]))
        got = (t + offset) * 1000.0
        commits.append(got - _wall(event["occurredAt"]) * 1000.0)
        raw = (event.get("correlation") or {}).get("rawEventId")
        if raw in observed:
            lat = got - observed[raw] * 1000.0
            if event["type"] == "turn_item.upserted":
                items.append(lat)
            elif event["type"] == "turn_item.delta":
                deltas.append(lat)
    seqs = list(per_sub.values())
    complete = len(per_sub) == subs and all(s == seqs[0] for s in seqs) and resyncs == 0
    return {
        "itemUpserts": summary(items),
        "deltas": summary(deltas),
        "commitToSubscriber": summary(commits),
        "eventsPerSubscriber": len(seqs[0]) if seqs else 0,
        "everySubscriberGotEveryEvent": complete,
        "resyncs": resyncs,
    }


def _wait_run(state: Path, thread_id: str, run_id: str, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        detail = rpc(state, "view.read", {"topic": "threadDetail", "threadId": thread_id})
        runs = {r["id"]: r["status"] for r in detail["data"]["runs"]}
        if runs.get(run_id) in ("completed", "failed", "interrupted"):
            return
        time.sleep(0.1)
    raise SystemExit(f"bench/fleet.py: run {run_id} did not end within {within}s")


def _stop(d: Served) -> None:
    d.proc.send_signal(signal.SIGTERM)
    d.proc.wait(timeout=60)


def measure(url: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    sa, sb = root / "a", root / "b"
    ca = _config(root, "box-a", url, args.slow_ms)
    cb = _config(root, "box-b", url, args.slow_ms)
    with serve(sa, ca) as a, serve(sb, cb) as b:
        a.wait_notify("READY=1", within=60)
        b.wait_notify("READY=1", within=60)
        created = rpc(
            sb, "thread.create", {"commandId": "t", "provider": "standin", "cwd": str(root)}
        )
        tid = created["result"]["threadId"]
        remote = Readers(sa, tid, args.subscribers, root / "remote", args.reader_procs)
        local = Readers(sb, tid, args.local, root / "local", 1) if args.local else None
        offset = time.time() - time.monotonic()
        started = time.monotonic()
        for i in range(args.runs):
            # Through A: the command is routed to B, which owns the thread.
            sent = rpc(sa, "run.send", {"commandId": f"r{i}", "threadId": tid, "text": "hi"})
            _wait_run(sb, tid, sent["result"]["runId"])
        streamed_s = time.monotonic() - started
        frames = remote.stop()
        local_frames = local.stop() if local is not None else []
        _stop(a)
        _stop(b)  # flushes its raw frame log
    observed = _observed(sb)
    out: dict[str, Any] = {
        "subscribers": args.subscribers,
        "runs": args.runs,
        "slowMs": args.slow_ms,
        "streamedS": round(streamed_s, 2),
        "remote": analyse(frames, offset, observed, args.subscribers),
    }
    if args.local:
        out["local"] = analyse(local_frames, offset, observed, args.local)
    out["targetMs"] = TARGET_MS
    out["passed"] = (
        out["remote"]["itemUpserts"]["p99"] < TARGET_MS
        and out["remote"]["everySubscriberGotEveryEvent"]
    )
    return out


def _print(res: dict[str, Any]) -> None:
    print(
        f"fleet fan-out: {res['subscribers']} subscribers on daemon A, a thread of daemon B, "
        f"{res['runs']} stand-in runs ({res['slowMs']:g} ms a line), {res['streamedS']} s"
    )
    for where in ("remote", "local"):
        if where not in res:
            continue
        r = res[where]
        print(
            f"  {where}: {r['eventsPerSubscriber']} events per subscriber, every subscriber "
            f"got every event: {r['everySubscriberGotEveryEvent']} (resyncs {r['resyncs']})"
        )
        for key, label in (
            ("itemUpserts", "item upserts, frame → subscriber"),
            ("deltas", "deltas, first frame of the batch → subscriber"),
            ("commitToSubscriber", "every event, commit → subscriber"),
        ):
            s = r[key]
            print(
                f"    {label:<55} p50 {s['p50']:>7} ms  p99 {s['p99']:>7} ms  "
                f"max {s['max']} ms  (n={s['n']})"
            )
    verdict = "PASS" if res["passed"] else "FAIL"
    print(f"  target: remote item upserts p99 < {res['targetMs']:g} ms: {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--local", type=int, default=0, help="subscribers on B as well")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--slow-ms", type=float, default=20.0)
    parser.add_argument("--reader-procs", type=int, default=2)
    parser.add_argument("--url", default=None, help="an empty database's URL (default: start one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from tests.pg import PgServer, start_server

    server: PgServer | None = None
    url = args.url
    if url is None:
        started = start_server()
        if isinstance(started, str):
            print(f"bench/fleet.py: {started}", file=sys.stderr)
            return 2
        server = started
        url = server.create_database()
    root = Path(tempfile.mkdtemp(prefix="t3orch-fleet-bench-"))
    try:
        res = measure(url, root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if server is not None:
            server.stop()
            shutil.rmtree(server.root, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        _print(res)
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
