"""`t3orch fakes` serves the loopback fake model servers and writes a config with
which a real `t3orch serve` runs real provider binaries: no hand-written script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from fixtures.fakes.claude_env import find_claude_binary
from fixtures.fakes.codex_home import resolve_codex_binary
from tests.cli.test_thread_lifecycle import cli, ok
from tests.daemon.support import REPO, serve

CODEX = resolve_codex_binary()


@pytest.mark.skipif(CODEX is None, reason="codex 0.169.0 not installed: run scripts/install-codex")
def test_serve_runs_real_providers_from_the_fakes_config(tmp_path: Path) -> None:
    root = tmp_path / "fk"
    fakes = subprocess.Popen(
        [sys.executable, "-m", "t3orch.cli.main", "fakes", "--dir", str(root)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert fakes.stdout is not None
        printed: dict[str, str] = {}
        for line in fakes.stdout:
            if line.startswith("ready:"):
                break
            key, _, value = line.partition(" ")
            printed[key] = value.strip()
        else:
            raise AssertionError(f"t3orch fakes ended early: {fakes.stderr.read()}")  # type: ignore[union-attr]
        config, work = Path(printed["config"]), Path(printed["work"].removeprefix("dir").strip())
        assert config == root / "t3orch.toml" and work == root / "work"
        assert f"--config {config}" in printed["run"]
        kinds = ["codex"] + (["claude"] if find_claude_binary() else [])
        assert printed["providers"].startswith(", ".join(kinds))
        state = tmp_path / "state"
        with serve(state, config) as d:
            d.wait_notify("READY=1", within=60)
            for kind in kinds:
                tid = ok(cli(state, "thread", "new", "--provider", kind, "--cwd", str(work)))
                tid = tid.strip()
                for text in ("hello there", "and a second message"):
                    sent = cli(state, "send", tid, text, "--wait", "--timeout", "120")
                    assert sent.returncode == 0, (kind, sent.stderr)
                detail = json.loads(ok(cli(state, "show", tid, "--json")))
                runs = sorted(detail["runs"], key=lambda r: r["ordinal"])
                assert [r["status"] for r in runs] == ["completed", "completed"], kind
                assert {r["provider"] for r in runs} == {kind}
                replies = [i for i in detail["turnItems"] if i["type"] == "assistant_message"]
                assert len(replies) == 2 and all(r["text"] for r in replies), kind
                _usage_is_per_turn(state, kind, runs, detail["usage"])
            children = psutil.Process(d.proc.pid).children(recursive=True)
            d.proc.send_signal(signal.SIGTERM)
            assert d.proc.wait(timeout=60) == 0
        assert not [p for p in children if p.is_running() and p.status() != "zombie"]
    finally:
        fakes.send_signal(signal.SIGTERM)
        assert fakes.wait(timeout=30) == 0
        for stream in (fakes.stdout, fakes.stderr):
            if stream is not None:
                stream.close()


def _usage_is_per_turn(
    state: Path, kind: str, runs: list[dict[str, Any]], total: dict[str, Any]
) -> None:
    """Each run has its own turn's usage; together they make the provider's running total.

    Codex reports the thread's running token total, Claude the process's running
    cost (``total_cost_usd``): the last report is what the runs add up to.
    """
    for run in runs:
        assert run["usage"] is not None and run["usage"]["totalTokens"] > 0, (kind, run)
    assert total["totalTokens"] == sum(r["usage"]["totalTokens"] for r in runs)
    events = [json.loads(x) for x in ok(cli(state, "events")).splitlines()]
    reports = [e["payload"]["usage"] for e in events if e["type"] == "provider.usage"]
    if kind == "codex":
        last = [u["tokenUsage"]["total"] for u in reports if "tokenUsage" in u][-1]
        assert total["totalTokens"] == last["totalTokens"]
        assert total["costUsd"] is None
    else:
        running = [u["total_cost_usd"] for u in reports if "total_cost_usd" in u][-1]
        first, second = (r["usage"]["costUsd"] for r in runs)
        assert 0 < first < running and 0 < second < running
        assert total["costUsd"] == pytest.approx(running)
