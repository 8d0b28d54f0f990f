"""Store-open benchmark: what SQLite's page check costs at the open of a large store.

Prints figures; it is not a timed test. It builds (once, kept for reruns) a store
of ``--size-mb`` (default 1024) the way the daemon lays one out: the real schema
(``SQLiteStore`` creates it), then events of the log's shape (86% ~280 B
``turn_item.delta`` rows, the rest ~4 KB item upserts) with their projection rows,
inserted in large transactions on the store's own file (going through the core
would take an hour for 1 GB and changes nothing in the file's page structure,
which is all the check reads). Then, each ``--rounds`` times:

* ``open``: ``SQLiteStore(path)`` (writable, as ``serve`` opens it) with the page
  check switched off, then closed;
* ``quick_check``: ``PRAGMA quick_check`` on a read-only connection (what the open
  runs first), with the file in the page cache (warm) and after evicting its pages
  with ``posix_fadvise(DONTNEED)`` (cold: the first open after boot);
* ``open+check``: ``SQLiteStore(path)`` as it opens now (the check included).

Run: ``python bench/store_open.py [--size-mb N] [--path FILE] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from t3orch.store.sqlite import backend
from t3orch.store.sqlite.backend import SQLiteStore

_DELTA_BYTES = 280
_ITEM_BYTES = 4096


def build(path: Path, size_mb: int) -> None:
    """A store of about ``size_mb`` MB at ``path`` (kept: building takes minutes)."""
    if path.exists() and path.stat().st_size >= size_mb * 1024 * 1024 * 0.95:
        return
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    SQLiteStore(path).close()  # the real schema, migrated to the current version
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    rnd = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyz      \n"
    text = "".join(rnd.choice(alphabet) for _ in range(_ITEM_BYTES * 4))
    seq = 0
    target = size_mb * 1024 * 1024
    started = time.perf_counter()
    while path.stat().st_size + Path(f"{path}-wal").stat().st_size < target:
        conn.execute("BEGIN")
        events = []
        rows = []
        for _ in range(20_000):
            seq += 1
            thread = f"thr_{seq // 50_000:06d}"
            run = f"run_{seq // 500:08d}"
            item = f"tit_{seq // 40:010d}"
            if seq % 7 == 0:
                kind, size = "turn_item.upserted", _ITEM_BYTES
                rows.append(("turn_item", item, thread, seq, "completed", text[: size // 2]))
            else:
                kind, size = "turn_item.delta", _DELTA_BYTES
            off = rnd.randrange(len(text) - size)
            events.append(
                (
                    f"evt_{seq:012d}",
                    kind,
                    "2026-01-01T00:00:00.000Z",
                    thread,
                    run,
                    f"nod_{seq // 500:08d}",
                    "pss_1",
                    None,
                    b'{"runId":"' + run.encode() + b'"}',
                    text[off : off + size].encode(),
                )
            )
        conn.executemany(
            "INSERT INTO events (event_id, type, occurred_at, thread_id, run_id, node_id, "
            "provider_session_id, command_id, correlation, payload) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            events,
        )
        conn.executemany(
            "INSERT OR REPLACE INTO rows (kind, id, thread_id, position, status, body) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute("COMMIT")
    conn.execute("UPDATE projection_state SET last_sequence = ?", (seq,))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    print(
        f"built {path}: {path.stat().st_size / 2**20:.0f} MB, {seq} events "
        f"in {time.perf_counter() - started:.0f} s"
    )


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache (this file only, no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def quick_check(path: Path) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (result,) = conn.execute("PRAGMA quick_check(1)").fetchone()
        assert result == "ok", result
    finally:
        conn.close()


def open_store(path: Path, *, check: bool) -> None:
    saved = backend.VERIFY_PAGES_AT_OPEN
    backend.VERIFY_PAGES_AT_OPEN = check
    try:
        SQLiteStore(path).close()
    finally:
        backend.VERIFY_PAGES_AT_OPEN = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--path", type=Path, default=Path("/tmp/t3orch-bench-open/events.db"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    build(args.path, args.size_mb)
    size = args.path.stat().st_size / 2**20
    figures: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        figures.setdefault(name, []).append(seconds)

    for _ in range(args.rounds):
        quick_check(args.path)  # warm the cache
        note("open, no check (warm)", timed(lambda: open_store(args.path, check=False)))
        note("quick_check (warm)", timed(lambda: quick_check(args.path)))
        note("open + check (warm)", timed(lambda: open_store(args.path, check=True)))
        evict(args.path)
        note("open, no check (cold)", timed(lambda: open_store(args.path, check=False)))
        evict(args.path)
        note("quick_check (cold)", timed(lambda: quick_check(args.path)))
    print(f"store {args.path}: {size:.0f} MB; medians of {args.rounds} rounds")
    for name, values in figures.items():
        print(f"  {name:<24} {statistics.median(values) * 1000:8.0f} ms")


if __name__ == "__main__":
    main()
