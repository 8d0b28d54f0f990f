"""Live restore with the real ``codex app-server`` against the loopback fake model server:
a daemon SIGKILL or graceful restart mid-reply, and an approval pending across a restart,
answered after it (issue 20)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from t3orch.cli.environment import config_toml, provider_environment
from t3orch.config import discover_codex
from tests.daemon.support import REPO, alive, events, rows, rpc, serve, wait_for

pytestmark = pytest.mark.real_codex


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    if discover_codex() is None:
        pytest.skip("the codex binary is not installed (./scripts/test installs it)")
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


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_codex_mid_reply_across_a_daemon_restart_every_word_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    work, state = _setup(tmp_path)
    with provider_environment(work, tmp_path, ["codex"]) as (config, _):
        cfg = _config(tmp_path, config_toml(config))
        try:
            with serve(state, cfg, keep_holders=True) as d:
                d.wait_notify("READY=1")
                created = rpc(
                    state,
                    "thread.create",
                    {"commandId": "c1", "provider": "codex", "cwd": str(work)},
                )
                tid = created["result"]["threadId"]
                # DAWDLE: "dawdled: done" in 6 deltas 0.5 s apart.
                rpc(state, "run.send", {"commandId": "c2", "threadId": tid, "text": "DAWDLE"})
                wait_for(lambda: len(events(state, "turn_item.delta")) >= 1, 60)
                (session,) = [s for s in rows(state, "provider_session") if s.status != "stopped"]
                d.proc.send_signal(stop)
                d.proc.wait(timeout=30)
                assert alive(session.pid)
            with serve(state, cfg, keep_holders=True) as d2:
                d2.wait_notify("READY=1")
                wait_for(lambda: rows(state, "run")[0].status == "completed", 60)
                deltas = "".join(e.payload.text for e in events(state, "turn_item.delta"))
                assert deltas == "dawdled: done", deltas
                d2.proc.send_signal(signal.SIGTERM)
                assert d2.proc.wait(timeout=30) == 0
        finally:
            _stop_agents(state)
    assert not alive(session.pid)


def test_a_codex_approval_pending_across_a_restart_is_answered_after_it_and_runs(
    tmp_path: Path,
) -> None:
    work, state = _setup(tmp_path)
    made = work / "approved.txt"
    with provider_environment(work, tmp_path, ["codex"]) as (config, _):
        cfg = _config(tmp_path, config_toml(config))
        try:
            with serve(state, cfg, keep_holders=True) as d:
                d.wait_notify("READY=1")
                created = rpc(
                    state,
                    "thread.create",
                    {"commandId": "c1", "provider": "codex", "cwd": str(work)},
                )
                tid = created["result"]["threadId"]
                text = f"RUN_SHELL: ESCALATE touch {made}"
                rpc(state, "run.send", {"commandId": "c2", "threadId": tid, "text": text})
                (request,) = wait_for(
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
                wait_for(lambda: rows(state, "run")[0].status == "completed", 60)
                assert made.exists()
                (answered,) = [r for r in rows(state, "runtime_request") if r.id == request.id]
                assert answered.status == "resolved"
                d2.proc.send_signal(signal.SIGTERM)
                assert d2.proc.wait(timeout=30) == 0
        finally:
            _stop_agents(state)
