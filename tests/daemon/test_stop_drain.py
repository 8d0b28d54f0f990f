"""A graceful stop lets running turns end (``daemon.stop_drain_s``), then interrupts the rest.

Real ``t3orch serve`` processes on the stand-in: the turn's length comes from the
stand-in's per-frame delay (15 frames a turn), the drain from the config.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from t3orch.store.sqlite.backend import SQLiteStore
from tests.daemon.support import Served, rows, rpc, serve

APPROVAL = Path(__file__).parents[1] / "supervisor/transcripts/codex_approval_pending.ndjson"


def _config(tmp: Path, *, drain_s: float, slow_ms: int, transcript: Path | None = None) -> Path:
    cmd = [sys.executable, "-m", "adapters.standin", "--slow-ms", str(slow_ms)]
    path = tmp / "t3orch.toml"
    played = "" if transcript is None else f"transcript = {json.dumps(str(transcript))}\n"
    path.write_text(
        # No holders: the drain is for the runtimes a stopping daemon ends itself (held
        # ones are left to their holders, tests/daemon/test_live_restore.py).
        f"[daemon]\nstop_drain_s = {drain_s}\nreattach_grace_s = 0\n\n"
        f"[providers.standin]\ncommand = {json.dumps(cmd)}\n" + played
    )
    return path


def _runs(state: Path) -> dict[str, Any]:
    return {r.id: r for r in rows(state, "run")}


def _running_turn(d: Served, tmp: Path) -> tuple[str, str]:
    d.wait_notify("READY=1")
    tid = rpc(
        d.state_dir, "thread.create", {"commandId": "c1", "provider": "standin", "cwd": str(tmp)}
    )
    tid = tid["result"]["threadId"]
    sent = rpc(d.state_dir, "run.send", {"commandId": "c2", "threadId": tid, "text": "hello"})
    run_id = sent["result"]["runId"]
    deadline = time.monotonic() + 30
    # "waiting" at once when the turn's first output is a request: the turn's start
    # commits with it (a turn's opening waits for its first output).
    while _runs(d.state_dir)[run_id].status not in ("running", "waiting"):
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.02)
    return tid, run_id


#: Why a run the daemon's stop interrupted ended so (``show`` prints it).
STOPPED = "the runtime was stopped during the turn (shutdown)"


def test_a_turn_that_ends_within_the_drain_completes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # 15 frames x 300 ms: the turn ends ~4 s after it starts, well inside the drain.
    with serve(state, _config(tmp_path, drain_s=20, slow_ms=300)) as d:
        tid, run_id = _running_turn(d, tmp_path)
        d.proc.send_signal(signal.SIGTERM)
        status = d.wait_notify("waiting up to", within=10)
        assert "STATUS=stopping: waiting up to" in status and "1 running turn " in status
        # A new run during the drain is refused, clearly, and not queued.
        with pytest.raises(RuntimeError) as refused:
            rpc(state, "run.send", {"commandId": "c3", "threadId": tid, "text": "more"})
        assert "daemon_stopping" in str(refused.value)
        assert d.proc.wait(timeout=30) == 0
    runs = _runs(state)
    assert runs[run_id].status == "completed"
    assert len(runs) == 1


def test_a_turn_longer_than_the_drain_is_interrupted_after_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # 15 frames x 1 s: far longer than the 1.5 s drain (and than the stop after it).
    with serve(state, _config(tmp_path, drain_s=1.5, slow_ms=1000)) as d:
        _, run_id = _running_turn(d, tmp_path)
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
        took = time.monotonic() - t0
    assert _runs(state)[run_id].status == "interrupted"
    assert _runs(state)[run_id].last_error == STOPPED  # not the user's interrupt
    # It waited the drain; the stop after it is bounded (interrupt 3 s + the ladder).
    assert 1.5 <= took < 20, took


def test_a_second_sigterm_skips_the_drain(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve(state, _config(tmp_path, drain_s=60, slow_ms=1000)) as d:
        _, run_id = _running_turn(d, tmp_path)
        d.proc.send_signal(signal.SIGTERM)
        d.wait_notify("waiting up to", within=10)
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
        took = time.monotonic() - t0
    assert _runs(state)[run_id].status == "interrupted"
    assert _runs(state)[run_id].last_error == STOPPED  # not the user's interrupt
    assert took < 20, took  # not the 60 s drain


def test_a_turn_waiting_for_the_users_answer_does_not_hold_the_stop(tmp_path: Path) -> None:
    # Only the user's answer ends such a turn: the drain does not wait the 60 s for it.
    state = tmp_path / "state"
    with serve(state, _config(tmp_path, drain_s=60, slow_ms=0, transcript=APPROVAL)) as d:
        _, run_id = _running_turn(d, tmp_path)
        deadline = time.monotonic() + 30
        while not _pending_requests(state):
            assert time.monotonic() < deadline, "the run never asked for an approval"
            time.sleep(0.02)
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
        took = time.monotonic() - t0
    assert _runs(state)[run_id].status == "interrupted"
    assert _runs(state)[run_id].last_error == STOPPED  # not the user's interrupt
    assert took < 20, took  # the stop ladder's bound, not the 60 s drain


def _pending_requests(state: Path) -> list[Any]:
    store = SQLiteStore(state / "events.sqlite3", readonly=True)
    try:
        with store.snapshot():
            return [r.decode() for r in store.rows_by_status("runtime_request", ("pending",))]
    finally:
        store.close()
