"""Which adapter and command run each provider kind, and the environment they get."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from adapters.claude.adapter import ClaudeAdapter
from adapters.codex.adapter import CodexAdapter
from adapters.protocol import ProviderAdapter, RuntimeConfig
from adapters.transport import LaunchSpec
from t3orch.domain.vocab import ProviderKind, RuntimeMode

#: Variables systemd hands the daemon that must never reach a provider: a child
#: that inherited NOTIFY_SOCKET could tell systemd it is the service.
SCRUBBED_ENV = frozenset(
    {
        "NOTIFY_SOCKET",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "T3ORCH_CONFIG",
        "T3ORCH_STATE_DIR",
    }
)

#: Segment 0 starts a thread, segment 1 resumes it; both loop the echo turn.
STANDIN_TRANSCRIPT = (
    Path(__file__).resolve().parents[1] / "fixtures" / "standin" / "codex_echo_resume.ndjson"
)


@attrs.frozen
class ProviderSettings:
    command: Sequence[str]
    env: Mapping[str, str] = attrs.field(factory=dict)
    #: The provider's own home (CODEX_HOME); None keeps the inherited one.
    home: str | None = None
    model: str | None = None
    extra_args: Sequence[str] = ()
    #: Bound on each request to the provider (initialize, thread/start, ...).
    request_timeout_s: float = 30.0


def standin_settings(transcript: str | Path = STANDIN_TRANSCRIPT, *extra: str) -> ProviderSettings:
    """The stand-in plays a Codex-shaped transcript, so the Codex adapter drives it."""
    return ProviderSettings(
        command=[sys.executable, "-m", "adapters.standin", str(transcript), "--loop-turns", *extra],
        model="standin",
    )


def child_env(settings: ProviderSettings, kind: ProviderKind) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    # The stand-in imports the project's packages from the checkout.
    if kind == "standin":
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if settings.home and kind == "codex":
        env["CODEX_HOME"] = settings.home
    env.update(settings.env)
    return env


class StandinAdapter(CodexAdapter):
    """The Codex adapter speaking to the stand-in, which takes no ``app-server`` argument."""

    kind: ProviderKind = "standin"

    def launch_spec(self, config: RuntimeConfig) -> LaunchSpec:
        return LaunchSpec(
            # The stand-in's transcript holds a resuming process as segment 1.
            argv=[
                *config.command,
                *config.extra_args,
                *(["--segment", "1"] if config.resuming else []),
            ],
            env=dict(config.env),
            cwd=config.cwd,
            max_line_bytes=self.options.max_line_bytes,
        )


def adapter_for(kind: ProviderKind) -> ProviderAdapter:
    if kind == "claude":
        return ClaudeAdapter()
    if kind == "standin":
        return StandinAdapter()
    return CodexAdapter()


def runtime_config(
    kind: ProviderKind,
    settings: ProviderSettings,
    *,
    cwd: str,
    model: str | None,
    runtime_mode: RuntimeMode,
) -> RuntimeConfig:
    return RuntimeConfig(
        command=list(settings.command),
        env=child_env(settings, kind),
        cwd=cwd,
        model=model or settings.model,
        runtime_mode=runtime_mode,
        extra_args=list(settings.extra_args),
        request_timeout_s=settings.request_timeout_s,
    )
