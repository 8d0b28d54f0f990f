"""``python standin_plan.py PLAN.json``: the stand-in with different switches per launch.

A provider configuration is fixed for a whole manager, but fault tests need the
*first* process to crash and the *next* one to behave (and to play the resume
segment of a transcript). The plan file holds ``{"launches": [[arg, ...], ...]}``;
launch ``k`` (counted in ``PLAN.json.count``) runs ``python -m adapters.standin``
with ``launches[min(k, len - 1)]``. The wrapper ``exec``s the stand-in, so the
supervisor sees the stand-in itself: same pid, same process group, real pipes.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the wrapper itself stays light: it runs once per launch
    from supervisor.providers import ProviderSettings

HERE = Path(__file__).resolve().parent
TRANSCRIPTS = HERE / "transcripts"
#: Segment 0: thread/start + the echo turn; segment 1: thread/resume + the echo turn.
ECHO_RESUME = TRANSCRIPTS / "codex_echo_resume.ndjson"
#: One turn that raises a command approval and waits for its answer.
APPROVAL_PENDING = TRANSCRIPTS / "codex_approval_pending.ndjson"


def next_launch(plan_path: Path) -> list[str]:
    plan = json.loads(plan_path.read_text())
    launches: list[list[str]] = plan["launches"]
    counter = plan_path.with_name(plan_path.name + ".count")
    with open(counter, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        done = int(f.read() or 0)
        f.seek(0)
        f.truncate()
        f.write(str(done + 1))
    return launches[min(done, len(launches) - 1)]


def write_plan(path: Path, *launches: list[str]) -> Path:
    path.write_text(json.dumps({"launches": [list(a) for a in launches]}))
    return path


def launch_count(plan_path: Path) -> int:
    counter = plan_path.with_name(plan_path.name + ".count")
    return int(counter.read_text() or 0) if counter.exists() else 0


def plan_settings(
    plan_path: Path, *launches: list[str], request_timeout_s: float = 30.0
) -> ProviderSettings:
    """Provider settings running the stand-in through this wrapper, one plan per test."""
    from supervisor.providers import ProviderSettings

    write_plan(plan_path, *launches)
    return ProviderSettings(
        command=[sys.executable, str(Path(__file__).resolve()), str(plan_path)],
        model="standin",
        request_timeout_s=request_timeout_s,
    )


def main() -> None:
    args = next_launch(Path(sys.argv[1]))
    argv = [sys.executable, "-m", "adapters.standin", *args]
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()
