"""`send --steer` while the run waits for an approval, through the CLI and a real daemon.

The stand-in plays a Codex turn that asks to run a command and waits for the answer.
Real Codex 0.169 answers ``turn/steer`` at once while an approval is pending (the
steered input reaches the model after the approval is answered), so the CLI returns
at once too.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.cli.test_client_output import (
    APPROVAL,
    _cli,
    _daemon,
    _new_thread,
    _pending,
    _until,
)
from tests.daemon.support import serve


def test_a_steer_while_an_approval_waits_returns_at_once(tmp_path: Path) -> None:
    with _daemon(tmp_path) as state:
        tid = _new_thread(state, tmp_path)
        sent = _cli(state, "send", tid, "run the escalated command")
        assert sent.returncode == 0, sent.stderr
        run_id = sent.stdout.strip()
        (pending,) = _until(lambda: _pending(state))

        began = time.monotonic()
        steered = _cli(state, "send", tid, "and also this", "--steer", "--json")
        took = time.monotonic() - began
        assert steered.returncode == 0, steered.stderr
        assert json.loads(steered.stdout)["result"] == {"runId": run_id, "steered": "native"}
        # Seconds at most, for two CLI starts on a loaded machine; not the 30 s timeout.
        assert took < 10, f"send --steer took {took:.1f} s"

        # The approval still waits, and answering it lets the run finish.
        assert [r["id"] for r in _pending(state)] == [pending["id"]]
        assert _cli(state, "approve", pending["id"]).returncode == 0
        shown = _until(
            lambda: (out := _cli(state, "show", tid).stdout) and "completed" in out and out
        )
        assert "› you: and also this" in shown
        assert "── run 1 · completed" in shown


def test_a_steer_the_provider_does_not_take_is_one_clear_line(tmp_path: Path) -> None:
    # Strict, the stand-in treats the unscripted steer as a mismatch and exits 70.
    standin = [sys.executable, "-m", "adapters.standin", "--strict"]
    config = tmp_path / "t3orch.toml"
    config.write_text(
        f"[providers.standin]\ncommand = {json.dumps(standin)}\n"
        f"transcript = {json.dumps(str(APPROVAL))}\n"
    )
    with serve(tmp_path / "state", config) as served:
        served.wait_notify("READY=1")
        state = served.state_dir
        tid = _new_thread(state, tmp_path)
        sent = _cli(state, "send", tid, "run the escalated command")
        run_id = sent.stdout.strip()
        _until(lambda: _pending(state))
        steered = _cli(state, "send", tid, "and also this", "--steer")
        assert steered.returncode != 0
        lines = steered.stderr.strip().splitlines()
        assert len(lines) == 1, steered.stderr
        assert "steer_failed" in lines[0] and "internal error" not in lines[0]
        assert f"recorded on run {run_id}" in lines[0]
