"""SIGKILL a writer process at random points, many times: nothing acknowledged is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from t3orch.store.interface import Store
from t3orch.store.sqlite.backend import SQLiteStore

ROUNDS = int(os.environ.get("T3ORCH_CRASH_ROUNDS", "25"))
REPO = Path(__file__).resolve().parents[2]


def _run_until_killed(db: Path | str, delay: float) -> list[tuple[int, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_writer", str(db)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()  # wait until it is really writing
        assert first.startswith(b"ack"), proc.stderr.read() if proc.stderr else first
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
    acks = []
    for line in (first + out).splitlines():
        parts = line.split()
        # A line cut by the kill is not an acknowledgement.
        if len(parts) == 3 and parts[0] == b"ack":
            acks.append((int(parts[1]), parts[2].decode()))
    return acks


def kill_rounds(
    location: Path | str, reopen: Callable[[], Store], rounds: int, seed: int
) -> dict[int, str]:
    """``rounds`` writer processes on ``location``, each SIGKILLed at a random point;
    after each, the store as ``reopen`` opens it holds every acknowledged event, with
    sequences 1..N and the projections at N. Returns what was acknowledged."""
    rng = random.Random(seed)
    acknowledged: dict[int, str] = {}
    for _ in range(rounds):
        for seq, event_id in _run_until_killed(location, rng.uniform(0.0, 0.3)):
            assert seq not in acknowledged, f"sequence {seq} acknowledged twice"
            acknowledged[seq] = event_id
        store = reopen()
        try:
            stored = {e.sequence: e.event_id for e in store.iter_events()}
            seqs = sorted(stored)
            assert seqs == list(range(1, len(seqs) + 1)), "gap or duplicate in sequences"
            missing = {s: e for s, e in acknowledged.items() if stored.get(s) != e}
            assert not missing, f"acknowledged events lost: {sorted(missing)[:10]}"
            assert store.projection_sequence() == store.last_sequence()
        finally:
            store.close()
    assert len(acknowledged) > rounds  # the writer really wrote between kills
    return acknowledged


def test_sigkill_loses_no_acknowledged_event(tmp_path: Path) -> None:
    db = tmp_path / "events.sqlite3"
    # Reopening recovers the WAL like a restarted daemon.
    kill_rounds(db, lambda: SQLiteStore(db), ROUNDS, 20261130)
    check = subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", "check", "--state-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("ok:")
