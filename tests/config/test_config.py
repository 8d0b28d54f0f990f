"""The TOML config: defaults, discovery, and errors that name the key."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from t3orch.config import (
    Config,
    ConfigError,
    codex_cache_binary,
    discover_claude,
    discover_codex,
    load_config,
    parse_config,
)

FULL = """
[daemon]
state_dir = "state"
synchronous = "NORMAL"
api_host = "127.0.0.1"
api_port = 8765
max_frame_bytes = 65536
subscription_buffer = 512
idle_timeout_s = 600
restart_intensity = 5
restart_period_s = 30.0
backoff_initial_s = 0.25
backoff_max_s = 10
max_delta_handoff_chars = 50000

[providers.codex]
command = ["/opt/codex/bin/codex"]
env = { RUST_LOG = "info" }
home = "~/codex-home"
model = "gpt-5-codex"

[providers.claude]
command = ["/opt/claude", "--verbose"]
env = { ANTHROPIC_BASE_URL = "http://127.0.0.1:9" }
model = "claude-sonnet"

[providers.standin]
command = ["python3", "-m", "adapters.standin"]
transcript = "fixtures/standin/codex_echo.ndjson"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t3orch.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file() -> None:
    cfg = load_config(None)
    assert cfg == Config()
    d = cfg.daemon
    assert (d.state_dir, d.synchronous, d.api_host, d.api_port) == (None, "FULL", "127.0.0.1", 0)
    assert (d.max_frame_bytes, d.idle_timeout_s) == (1024 * 1024, 1800.0)
    assert (d.restart_intensity, d.restart_period_s) == (3, 60.0)
    assert (d.backoff_initial_s, d.backoff_max_s) == (0.5, 30.0)
    assert not d.api_allow_remote
    assert d.max_delta_handoff_chars == 24_000
    assert cfg.providers.standin.command == [sys.executable, "-m", "adapters.standin"]
    assert load_config(None) == parse_config({})


def test_every_key(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL))
    assert cfg.daemon.state_dir == tmp_path / "state"  # relative to the config file
    assert cfg.daemon.synchronous == "NORMAL" and cfg.daemon.api_port == 8765
    assert cfg.daemon.idle_timeout_s == 600.0 and isinstance(cfg.daemon.idle_timeout_s, float)
    assert cfg.daemon.max_delta_handoff_chars == 50_000
    assert cfg.providers.codex.command == ["/opt/codex/bin/codex"]
    assert cfg.providers.codex.env == {"RUST_LOG": "info"}
    assert cfg.providers.codex.home == Path.home() / "codex-home"
    assert cfg.providers.claude.command == ["/opt/claude", "--verbose"]
    assert cfg.providers.claude.model == "claude-sonnet"
    assert cfg.providers.standin.transcript == tmp_path / "fixtures/standin/codex_echo.ndjson"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[providers.codex]\ncomand = ["x"]', "providers.codex.comand: unknown key"),
        ("[daemon]\nport = 1", "daemon.port: unknown key"),
        ("[deamon]\n", "deamon: unknown key"),
        ("[providers.gemini]\n", "providers.gemini: unknown key"),
        ('[daemon]\nsynchronous = "OFF"', "daemon.synchronous: must be one of 'FULL', 'NORMAL'"),
        ('[daemon]\napi_port = "80"', "daemon.api_port: expected an integer, got the string"),
        ("[daemon]\napi_port = 70000", "daemon.api_port: must be 0..65535"),
        ("[daemon]\nmax_frame_bytes = true", "daemon.max_frame_bytes: expected an integer"),
        ("[daemon]\nidle_timeout_s = -1", "daemon.idle_timeout_s: must be positive"),
        (
            "[daemon]\nmax_delta_handoff_chars = 10",
            "daemon.max_delta_handoff_chars: must be at least 1000, got 10",
        ),
        (
            '[daemon]\nmax_delta_handoff_chars = "big"',
            "daemon.max_delta_handoff_chars: expected an integer, got the string 'big'",
        ),
        ("[daemon]\nbackoff_initial_s = 60", "daemon.backoff_initial_s: 60.0 is above"),
        ('[daemon]\napi_host = "0.0.0.0"', "daemon.api_host: '0.0.0.0' is not a loopback"),
        ('[providers.codex]\ncommand = "codex"', "providers.codex.command: expected an array"),
        ('[providers.codex]\ncommand = ["codex", 1]', "providers.codex.command[1]: expected a"),
        ("[providers.claude]\ncommand = []", "providers.claude.command: must name a program"),
        ("[providers.claude]\nenv = { A = 1 }", "providers.claude.env: values must be strings"),
        ("daemon = 3", "daemon: expected a table, got the number 3"),
        ("[providers.codex]\nhome = 5", "providers.codex.home: expected a path string"),
    ],
)
def test_bad_keys_and_values_name_the_key(tmp_path: Path, toml: str, message: str) -> None:
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert text.startswith(f"config {path}: ")
    assert message in text


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, '[daemon]\nsynchronous = "X"\nfoo = 1\n[providers.codex]\nx=1'))
    text = str(info.value)
    for key in ("daemon.synchronous", "daemon.foo", "providers.codex.x"):
        assert key in text


def test_remote_bind_when_explicitly_allowed() -> None:
    cfg = parse_config({"daemon": {"api_host": "0.0.0.0", "api_allow_remote": True}})
    assert cfg.daemon.api_host == "0.0.0.0"


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[daemon\n"))


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_discovery_prefers_path_then_the_pinned_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("T3ORCH_CACHE", raising=False)
    empty = str(tmp_path / "empty-path")
    assert discover_codex(path=empty, home=tmp_path) is None
    cached = _exe(codex_cache_binary(tmp_path))
    assert "codex-0.169.0" in str(cached)
    assert discover_codex(path=empty, home=tmp_path) == [str(cached)]
    on_path = _exe(tmp_path / "bin" / "codex")
    assert discover_codex(path=str(on_path.parent), home=tmp_path) == [str(on_path)]
    monkeypatch.setenv("T3ORCH_CACHE", str(tmp_path / "elsewhere"))
    assert discover_codex(path=empty, home=tmp_path) is None


def test_claude_discovery(tmp_path: Path) -> None:
    on_path = _exe(tmp_path / "bin" / "claude")
    assert discover_claude(path=str(on_path.parent)) == [str(on_path)]
    found = discover_claude(path=str(tmp_path / "empty"))
    # The pip-bundled binary of claude-agent-sdk, when that wheel is installed.
    if found is not None:
        assert found[0].endswith(os.path.join("claude_agent_sdk", "_bundled", "claude"))
