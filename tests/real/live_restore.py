"""The live-restore scenarios (issue 20) with a real provider binary against its loopback
fake model server, shared by the Codex and Claude test files: a daemon stopped mid-reply
(SIGKILL or SIGTERM) and restarted, and an approval pending across a restart."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from t3orch.cli.environment import config_toml, provider_environment
from t3orch.config import discover_claude, discover_codex
from t3orch.daemon import journal_coverage
from t3orch.domain.vocab import ProviderKind
from tests.daemon.support import REPO, rpc, serve
from tests.daemon.test_live_restore import alive, events, rows, wait

_DISCOVER = {"codex": discover_codex, "claude": discover_claude}


def _setup(tmp_path: Path, provider: ProviderKind) -> tuple[Path, Path]:
    if _DISCOVER[provider]() is None:
        pytest.skip(f"the {provider} binary is not installed (./scripts/test installs it)")
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    return work, tmp_path / "state"


def _config(tmp_path: Path, toml: str) -> Path:
    path = tmp_path / "t3orch.toml"
    path.write_text("[daemon]\nreattach_grace_s = 60\n" + toml)
    return path


def _stop_agents(state: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", "stop-agents", "--state-dir", str(state)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=60,
    )


def _create(state: Path, provider: ProviderKind, work: Path) -> str:
    created = rpc(
        state, "thread.create", {"commandId": "c1", "provider": provider, "cwd": str(work)}
    )
    thread_id: str = created["result"]["threadId"]
    return thread_id


def mid_reply_restart(
    tmp_path: Path,
    provider: ProviderKind,
    stop: signal.Signals,
    text: str,
    reply: str,
    *,
    down_s: float = 0.0,
) -> None:
    """``text`` makes the fake stream ``reply`` slowly; the daemon is stopped with ``stop``
    after the first delta (and stays down ``down_s``), the next one completes the run with
    every word once, and every frame the provider wrote is in the log (a turn sent twice
    would add frames the run never takes)."""
    work, state = _setup(tmp_path, provider)
    with provider_environment(work, tmp_path, [provider]) as (config, _):
        cfg = _config(tmp_path, config_toml(config))
        try:
            with serve(state, cfg, keep_holders=True) as d:
                d.wait_notify("READY=1")
                tid = _create(state, provider, work)
                rpc(state, "run.send", {"commandId": "c2", "threadId": tid, "text": text})
                wait(lambda: len(events(state, "turn_item.delta")) >= 1, 60)
                (session,) = [s for s in rows(state, "provider_session") if s.status != "stopped"]
                d.proc.send_signal(stop)
                d.proc.wait(timeout=30)
                assert alive(session.pid)
            time.sleep(down_s)
            with serve(state, cfg, keep_holders=True) as d2:
                d2.wait_notify("READY=1")
                wait(lambda: rows(state, "run")[0].status == "completed", 60)
                deltas = "".join(e.payload.text for e in events(state, "turn_item.delta"))
                assert deltas == reply, deltas
                time.sleep(1)  # the coalescer's window: the last offsets commit
                committed = {j.holder_id: j.offset for j in rows(state, "journal")}
                journaled, covered = journal_coverage(state, committed)
                assert journaled == covered > 0, (journaled, covered)
                d2.proc.send_signal(signal.SIGTERM)
                assert d2.proc.wait(timeout=30) == 0
        finally:
            _stop_agents(state)
    assert not alive(session.pid)


def approval_across_restart(tmp_path: Path, provider: ProviderKind, command: str) -> None:
    """``command`` (with ``{made}`` for a file's path) makes the fake ask to run a shell
    command that creates the file; the daemon is SIGKILLed while the approval is pending,
    the next one answers it, and the command runs."""
    work, state = _setup(tmp_path, provider)
    made = work / "approved.txt"
    with provider_environment(work, tmp_path, [provider]) as (config, _):
        cfg = _config(tmp_path, config_toml(config))
        try:
            with serve(state, cfg, keep_holders=True) as d:
                d.wait_notify("READY=1")
                tid = _create(state, provider, work)
                text = command.format(made=made)
                rpc(state, "run.send", {"commandId": "c2", "threadId": tid, "text": text})
                (request,) = wait(
                    lambda: [r for r in rows(state, "runtime_request") if r.status == "pending"],
                    60,
                )
                d.proc.send_signal(signal.SIGKILL)
                d.proc.wait(timeout=30)
            assert not made.exists()
            with serve(state, cfg, keep_holders=True) as d2:
                d2.wait_notify("READY=1")
                # Still pending: the provider waits on the same request id.
                (still,) = [r for r in rows(state, "runtime_request") if r.id == request.id]
                assert still.status == "pending"
                rpc(
                    state,
                    "request.respond",
                    {"commandId": "c3", "requestId": request.id, "decision": "accept"},
                )
                wait(lambda: rows(state, "run")[0].status == "completed", 60)
                assert made.exists()
                (answered,) = [r for r in rows(state, "runtime_request") if r.id == request.id]
                assert answered.status == "resolved", answered
                d2.proc.send_signal(signal.SIGTERM)
                assert d2.proc.wait(timeout=30) == 0
        finally:
            _stop_agents(state)
