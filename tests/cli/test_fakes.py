"""`t3orch fakes` serves the loopback fake model servers and writes a config with
which a real `t3orch serve` runs real provider binaries: no hand-written script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

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
                sent = cli(state, "send", tid, "hello there", "--wait", "--timeout", "120")
                assert sent.returncode == 0, (kind, sent.stderr)
                detail = json.loads(ok(cli(state, "show", tid, "--json")))
                (run,) = detail["runs"]
                assert run["status"] == "completed" and run["provider"] == kind
                replies = [i for i in detail["turnItems"] if i["type"] == "assistant_message"]
                assert replies and replies[-1]["text"], kind
                assert run["usage"] is not None and run["usage"]["totalTokens"] > 0, kind
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
