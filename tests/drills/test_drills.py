"""`t3orch drill` end to end: each drill's verdict must be PASS with 0 lost and 0 orphans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from t3orch.config import discover_claude, discover_codex

REPO = Path(__file__).resolve().parents[2]
HAVE = {
    "codex": discover_codex() is not None,
    "claude": discover_claude() is not None,
    "standin": True,
}


def _drill(name: str, provider: str) -> dict[str, object]:
    if not HAVE[provider]:
        pytest.skip(f"the {provider} binary is not installed (./scripts/test installs it)")
    out = subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", "drill", name, "--provider", provider, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    verdict: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == (0 if verdict["passed"] else 1), out.stderr
    return verdict


@pytest.mark.parametrize("name", ["provider-crash", "hang", "daemon-crash"])
def test_standin_drills(name: str) -> None:
    v = _drill(name, "standin")
    assert v["passed"], v
    assert v["lostEvents"] == 0 and v["orphans"] == 0
    assert v["detectionS"] is not None and v["liveAgainS"] is not None
    assert set(v) == {
        "drill",
        "provider",
        "lostEvents",
        "detectionS",
        "liveAgainS",
        "orphans",
        "checks",
        "notes",
        "passed",
    }


@pytest.mark.real_codex
@pytest.mark.parametrize("name", ["provider-crash", "daemon-crash", "reap-resume", "hang"])
def test_codex_drills(name: str) -> None:
    v = _drill(name, "codex")
    assert v["passed"], v


@pytest.mark.real_claude
@pytest.mark.parametrize("name", ["provider-crash", "reap-resume"])
def test_claude_drills(name: str) -> None:
    v = _drill(name, "claude")
    assert v["passed"], v


@pytest.mark.parametrize(
    "provider",
    [
        "standin",
        pytest.param("codex", marks=pytest.mark.real_codex),
        pytest.param("claude", marks=pytest.mark.real_claude),
    ],
)
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_live_restore_drill(provider: str, kill: bool) -> None:
    if not HAVE[provider]:
        pytest.skip(f"the {provider} binary is not installed (./scripts/test installs it)")
    args = [
        "drill",
        "live-restore",
        "--provider",
        provider,
        "--json",
        *(["--kill"] if kill else []),
    ]
    out = subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    v = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and v["passed"], v
    assert v["lostEvents"] == 0 and v["orphans"] == 0
    checks = v["checks"]
    assert checks["turn completed"] and checks["provider frames journaled = ingested"]
    if provider != "standin":
        assert checks["approval answered after the restart, its command ran"]
