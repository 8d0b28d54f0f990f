"""Provider wiring for the demo and the drills: real binaries against loopback fakes.

The real ``codex`` and ``claude`` binaries are used when installed (``./scripts/test``
installs the pinned ones), each pointed at a small fake model server on
127.0.0.1 (``fixtures/fakes``), so nothing leaves the machine and no account is
needed. The stand-in provider is always available.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from t3orch.config import (
    ClaudeConfig,
    CodexConfig,
    Config,
    DaemonConfig,
    ProvidersConfig,
    discover_claude,
    discover_codex,
)


@contextmanager
def provider_environment(
    work: Path, tmp: Path, want: Sequence[str] | None = None, *, daemon: DaemonConfig | None = None
) -> Iterator[tuple[Config, list[str]]]:
    """Yields a config and the provider kinds it can run (``want`` filters them)."""
    kinds: list[str] = []
    codex_cfg = CodexConfig(command=None)
    claude_cfg = ClaudeConfig(command=None)
    with ExitStack() as stack:
        codex = discover_codex() if want is None or "codex" in want else None
        claude = discover_claude() if want is None or "claude" in want else None
        if codex:
            from fixtures.fakes.codex_home import make_codex_home
            from fixtures.fakes.responses_api import FakeResponsesServer

            fake = stack.enter_context(FakeResponsesServer())
            env = make_codex_home(tmp, fake.base_url, work)
            codex_cfg = CodexConfig(command=codex, env=env, model="mock-model")
            kinds.append("codex")
        if claude:
            from fixtures.fakes.claude_env import claude_dirs, claude_env
            from fixtures.fakes.messages_api import FakeMessagesServer

            cfake = stack.enter_context(FakeMessagesServer())
            dirs = stack.enter_context(claude_dirs("t3"))
            claude_cfg = ClaudeConfig(
                command=claude, env=claude_env(dirs, cfake.base_url), model="claude-sonnet-4-5"
            )
            kinds.append("claude")
        if (want is None and not kinds) or (want is not None and "standin" in want):
            kinds.append("standin")
        config = Config(
            daemon=daemon or DaemonConfig(synchronous="FULL"),
            providers=ProvidersConfig(codex=codex_cfg, claude=claude_cfg),
        )
        yield config, kinds


def _toml(value: object) -> str:
    # JSON strings and arrays of strings are valid TOML basic strings and arrays.
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def config_toml(config: Config, standin_command: Sequence[str] | None = None) -> str:
    """The providers part of ``config`` as a TOML file, for a daemon in another process."""
    lines: list[str] = []
    p = config.providers
    if p.codex.command:
        lines += [
            "[providers.codex]",
            f"command = {_toml(p.codex.command)}",
            f"env = {_toml(dict(p.codex.env))}",
        ]
        if p.codex.model:
            lines.append(f"model = {_toml(p.codex.model)}")
    if p.claude.command:
        lines += [
            "[providers.claude]",
            f"command = {_toml(p.claude.command)}",
            f"env = {_toml(dict(p.claude.env))}",
        ]
        if p.claude.model:
            lines.append(f"model = {_toml(p.claude.model)}")
    if standin_command:
        lines += ["[providers.standin]", f"command = {_toml(list(standin_command))}"]
    return "\n".join(lines) + "\n"
