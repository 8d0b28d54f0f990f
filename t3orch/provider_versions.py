"""The provider versions t3orch was tested with, and the versions it finds installed.

:data:`TESTED` is the one source of truth for the pins. ``t3orch.config`` (the path
of the pinned Codex install) imports it; the copies that cannot import it
(``scripts/install-codex``, ``scripts/demo``, ``pyproject.toml``) are held to it by
``tests/cli/test_versions.py``.

A version is found by running ``<command> --version`` once per command with a short
timeout; the answer is cached for the life of the process (a daemon asks once, a
CLI invocation once).
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import attrs

#: The Codex CLI (``@openai/codex``) the adapter and the transcripts were made with.
CODEX_TESTED = "0.169.0"
#: The Python package whose wheel bundles the tested ``claude`` binary.
CLAUDE_AGENT_SDK_TESTED = "0.2.184"
#: The ``claude`` CLI bundled in ``claude-agent-sdk==0.2.184``.
CLAUDE_TESTED = "2.1.327"
TESTED: Mapping[str, str] = {"codex": CODEX_TESTED, "claude": CLAUDE_TESTED}


def t3orch_version() -> str:
    """t3orch's own version (``--version``, and each daemon's row in the fleet registry)."""
    try:
        return version("t3orch")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


#: Bound on one ``--version`` call: a binary that hangs there is reported, not waited for.
PROBE_TIMEOUT_S = 3.0
_VERSION = re.compile(r"\d+(?:\.\d+)+")


@attrs.frozen
class Found:
    """What ``<command> --version`` said about one provider binary."""

    provider: str
    command: tuple[str, ...]
    version: str | None
    #: Why there is no version (the binary is missing, hung, or printed none).
    error: str | None = None

    @property
    def tested(self) -> str | None:
        return TESTED.get(self.provider)

    @property
    def newer_than_tested(self) -> bool:
        if self.version is None or self.tested is None:
            return False
        return _key(self.version) > _key(self.tested)

    def warning(self) -> str | None:
        if not self.newer_than_tested:
            return None
        return (
            f"{self.provider} {self.version} is newer than the version t3orch was tested "
            f"with ({self.tested}); its protocol may have changed"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "command": list(self.command),
            "version": self.version,
            "tested": self.tested,
            "newerThanTested": self.newer_than_tested,
            "error": self.error,
        }


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def parse_version(text: str) -> str | None:
    """The first dotted number (``codex-cli 0.169.0``, ``2.1.327 (Claude Code)``)."""
    match = _VERSION.search(text)
    return match.group(0) if match else None


_cache: dict[tuple[str, ...], tuple[str | None, str | None]] = {}
_lock = threading.Lock()


def probe(provider: str, command: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> Found:
    """``command --version``, run at most once per command in this process (blocking)."""
    key = tuple(command)
    with _lock:  # held while probing: a second caller waits for the first answer
        if key not in _cache:
            _cache[key] = _run(key, timeout)
        version, error = _cache[key]
    return Found(provider, key, version, error)


def _run(command: tuple[str, ...], timeout: float) -> tuple[str | None, str | None]:
    try:
        proc = subprocess.run(
            [*command, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"`{command[0]} --version` did not answer within {timeout:g} s"
    except OSError as exc:
        return None, f"cannot run {command[0]}: {exc.strerror or exc}"
    version = parse_version(proc.stdout) or parse_version(proc.stderr)
    if version is None:
        return None, f"`{command[0]} --version` exited {proc.returncode} without a version"
    return version, None


def cached(provider: str, command: Sequence[str]) -> Found | None:
    """What a probe of ``command`` found, if one has run (never blocks on a probe)."""
    hit = _cache.get(tuple(command))  # no lock: a probe holds it for seconds at worst
    return None if hit is None else Found(provider, tuple(command), *hit)


def describe(provider: str, command: Sequence[str]) -> dict[str, Any]:
    """A provider's entry in ``daemon.status``: ``checked`` is false until a probe answered."""
    if provider not in TESTED:
        found: Found | None = Found(provider, tuple(command), None)
    else:
        found = cached(provider, command)
    if found is None:
        return {**Found(provider, tuple(command), None).to_json(), "checked": False}
    return {**found.to_json(), "checked": True}


def probe_all(commands: Mapping[str, Sequence[str] | None]) -> list[Found]:
    """The tested providers among ``commands`` that have a command, probed (blocking)."""
    return [probe(kind, cmd) for kind, cmd in commands.items() if cmd and kind in TESTED]
