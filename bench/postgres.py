"""PostgreSQL store benchmark: events/s committed through the core against a bare COPY.

Prints figures; it is not a timed test. For one and for three writing processes
(each a daemon's core on the one shared log):

1. **Core**: each process opens the real core on the database (``open_core`` →
   ``CoreService.ingest_queued`` → ``EventWriter`` → ``PostgresStore``: the head
   row lock, deciding, projections, one transaction per batch) and plays
   ``--sessions`` coding-agent sessions into it, exactly as ``bench/store.py``'s
   append phase does (its generator: coalesced deltas, item, node, run and session
   upserts; generated before the clock). The processes start together; the figure
   is the log's events over the wall time from the start to the last one done.
2. **Bare**: the same rows, read back from that log, split between the same number
   of processes, each ``COPY``-ing its share into a table of the same shape
   (``LIKE t3orch.events INCLUDING ALL``), one transaction per batch of the size the
   core's writers achieved (events per commit). No lock, no deciding, no
   projection: what the server takes for those rows in those transactions.

Without ``--url`` it starts a throwaway server as the tests do (``tests/pg.py``:
Debian's binaries in a temp dir on 127.0.0.1; fsync off, synchronous_commit off:
the figures are CPU and protocol, not the disk). ``python bench/postgres.py
[--events N] [--sessions N] [--url URL] [--json]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Run as ``python bench/postgres.py``, this directory comes first on sys.path, where
# ``bench/supervisor.py`` would shadow the ``supervisor`` package.
_HERE = Path(__file__).resolve().parent
REPO = _HERE.parent
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]

import psycopg  # noqa: E402
import trio  # noqa: E402

from t3orch.core import open_core  # noqa: E402

_COLUMNS = (
    "sequence, event_id, type, occurred_at, thread_id, run_id, node_id, "
    "provider_session_id, command_id, item_id, correlation, payload"
)


def _store_bench() -> Any:
    """bench/store.py, for its session generator and player (the same workload)."""
    spec = importlib.util.spec_from_file_location("_bench_store", _HERE / "store.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the worker processes ------------------------------------------------------------


async def core_worker(url: str, events: int, sessions: int, seed: int) -> dict[str, Any]:
    store = _store_bench()
    templates = [
        [store.turn_template((seed + i) * 7919 + k) for k in range(store.TEMPLATES_PER_SESSION)]
        for i in range(sessions)
    ]
    async with open_core(url) as core:
        budget = store.Budget(core, events)
        _ready()
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(sessions):
                nursery.start_soon(store.play_session, core, seed + i, budget, templates[i])
        elapsed = time.perf_counter() - started
        stats = core.writer.stats
    return {"events": stats.events, "commits": stats.batches, "seconds": elapsed}


def bare_worker(url: str, first: int, last: int, batch: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM t3orch.events WHERE sequence BETWEEN %s AND %s "
            "ORDER BY sequence",
            (first, last),
        ).fetchall()
        _ready()
        started = time.perf_counter()
        for i in range(0, len(rows), batch):
            with (
                conn.transaction(),
                conn.cursor() as cur,
                cur.copy(f"COPY bare_events ({_COLUMNS}) FROM STDIN") as copy,
            ):
                for row in rows[i : i + batch]:
                    copy.write_row(row)
        elapsed = time.perf_counter() - started
    return {"events": len(rows), "seconds": elapsed}


def _ready() -> None:
    """Tell the parent we are set up, and wait for its go (all writers start together)."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()


# -- the parent ---------------------------------------------------------------------


def _together(argvs: list[list[str]]) -> tuple[float, list[dict[str, Any]]]:
    """Run the workers, start them at once; the wall time from go to the last done."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if line != "ready\n":
                raise RuntimeError(f"a worker failed to start: {line!r}")
        started = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=900)[0] for p in procs]
        wall = time.perf_counter() - started
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError("a worker failed")
    return wall, [json.loads(out.strip().splitlines()[-1]) for out in outs]


def measure(url: str, writers: int, events: int, sessions: int) -> dict[str, Any]:
    wall, results = _together(
        [["core", url, str(events // writers), str(sessions), str(100 * w)] for w in range(writers)]
    )
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*), max(sequence) FROM t3orch.events").fetchone()
        assert row is not None
        total, head = int(row[0]), int(row[1])
        conn.execute("CREATE TABLE bare_events (LIKE t3orch.events INCLUDING ALL)")
    assert total == head, "the log has a gap"
    commits = sum(r["commits"] for r in results)
    batch = max(1, round(total / max(commits, 1)))
    share = -(-total // writers)
    spans = [(1 + w * share, min(total, (w + 1) * share)) for w in range(writers)]
    bare_wall, _ = _together([["bare", url, str(a), str(b), str(batch)] for a, b in spans])
    return {
        "writers": writers,
        "sessions_per_writer": sessions,
        "events": total,
        "commits": commits,
        "events_per_commit": total / max(commits, 1),
        "core_seconds": wall,
        "core_events_per_s": total / wall,
        "bare_seconds": bare_wall,
        "bare_events_per_s": total / bare_wall,
        "ratio": (total / wall) / (total / bare_wall),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "core":
        url, events, sessions, seed = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
        print(json.dumps(trio.run(core_worker, url, events, sessions, seed)))
        return 0
    if argv and argv[0] == "bare":
        print(json.dumps(bare_worker(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--sessions", type=int, default=8, help="sessions per writer")
    parser.add_argument("--url", default=None, help="a server's URL (default: start one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from tests.pg import PgServer, start_server

    server: PgServer | None = None
    if args.url is None:
        started = start_server()
        if isinstance(started, str):
            print(f"bench/postgres.py: {started}", file=sys.stderr)
            return 2
        server = started
    try:
        rows = []
        for writers in (1, 3):
            if server is not None:
                url = server.create_database()
            else:
                url = args.url
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("DROP SCHEMA IF EXISTS t3orch CASCADE")
                    conn.execute("DROP TABLE IF EXISTS bare_events")
            rows.append(measure(url, writers, args.events, args.sessions))
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.root, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"PostgreSQL store: {args.events:,} events per run, {args.sessions} sessions per writer")
    for r in rows:
        print(
            f"  {r['writers']} writer(s): core {r['core_events_per_s']:>8,.0f} ev/s "
            f"({r['core_seconds']:.2f} s, {r['commits']:,} commits, "
            f"{r['events_per_commit']:.1f} ev/commit) | bare COPY "
            f"{r['bare_events_per_s']:>9,.0f} ev/s ({r['bare_seconds']:.2f} s) | "
            f"core/bare {r['ratio']:.0%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
