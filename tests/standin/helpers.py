"""Shared helpers for the real-process tests: specs, group membership, frames."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import trio

from adapters.transport import LaunchSpec, OversizedLine, ProviderProcess

REPO = Path(__file__).resolve().parents[2]
STANDIN_FIXTURES = REPO / "fixtures" / "standin"


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def command_spec(*argv: str, max_line_bytes: int = 1 << 20) -> LaunchSpec:
    return LaunchSpec(
        argv=list(argv), env=child_env(), cwd=str(REPO), max_line_bytes=max_line_bytes
    )


def python_spec(code: str, *, max_line_bytes: int = 1 << 20) -> LaunchSpec:
    return command_spec(sys.executable, "-c", code, max_line_bytes=max_line_bytes)


def standin_spec(transcript: str | Path, *flags: str, max_line_bytes: int = 8 << 20) -> LaunchSpec:
    return command_spec(
        sys.executable,
        "-m",
        "adapters.standin",
        str(transcript),
        *flags,
        max_line_bytes=max_line_bytes,
    )


def living_group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are still alive (zombies await init and are dead)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


async def wait_until(predicate: Callable[[], bool], within: float = 5.0) -> bool:
    """Poll OS state (no event exists for "a process left its group") until true or timeout."""
    with trio.move_on_after(within):
        while True:
            if predicate():
                return True
            await trio.sleep(0.05)
    return predicate()


async def assert_group_empty(pgid: int, within: float = 5.0) -> None:
    await wait_until(lambda: not living_group_members(pgid), within)
    assert living_group_members(pgid) == [], f"process group {pgid} still has members"


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def send(process: ProviderProcess, frame: dict[str, Any]) -> None:
    await process.send_line(json.dumps(frame).encode())


async def receive(process: ProviderProcess) -> Any:
    line = await process.receive_line()
    assert isinstance(line, bytes), f"expected a frame, got {line!r}"
    return json.loads(line)


async def receive_until(process: ProviderProcess, method: str) -> list[Any]:
    """Frames up to and including the first with ``method`` (Codex) or ``type`` (Claude)."""
    frames = []
    while True:
        line = await process.receive_line()
        assert line is not None, f"stdout ended before {method!r}; got {frames}"
        assert not isinstance(line, OversizedLine)
        frame = json.loads(line)
        frames.append(frame)
        if method in (frame.get("method"), frame.get("type")):
            return frames
