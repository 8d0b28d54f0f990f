"""``t3orch fakes``: the loopback fake model servers, and a config that uses them.

Starts the fake Responses API (for ``codex``) and the fake Messages API (for
``claude``) on 127.0.0.1 — each only when its binary is installed — writes a
config TOML pointing the providers at them (hermetic homes, a git-initialized
work dir), prints how to run ``serve`` with it, and serves until SIGINT or
SIGTERM. Nothing leaves the machine and no account is needed: the same wiring
the demo and the drills use (``t3orch.cli.environment``).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from t3orch.cli.environment import config_toml, provider_environment


def cmd_fakes(args: argparse.Namespace) -> int:
    created = args.dir is None
    # Short and under /tmp: the claude CLI puts a Unix socket under its TMPDIR.
    root = Path(tempfile.mkdtemp(prefix="t3fakes", dir="/tmp") if created else args.dir)
    root = root.expanduser().absolute()
    work, homes = root / "work", root / "homes"
    homes.mkdir(parents=True, exist_ok=True)
    from fixtures.fakes.codex_home import make_work_dir

    make_work_dir(work)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        with provider_environment(work, homes) as (config, kinds):
            path = Path(args.config_out).absolute() if args.config_out else root / "t3orch.toml"
            path.write_text(config_toml(config))
            state = root / "state"
            print(f"config     {path}")
            print(f"providers  {', '.join(kinds)} (against fakes on 127.0.0.1)")
            print(f"work dir   {work}")
            print(f"run        t3orch serve --state-dir {state} --config {path}")
            print(
                f"then       t3orch thread new --state-dir {state} --provider "
                f"{kinds[0]} --cwd {work}"
            )
            print("ready: serving until SIGINT or SIGTERM", flush=True)
            while not stop.wait(0.5):
                pass
    finally:
        if created:
            shutil.rmtree(root, ignore_errors=True)
    print("fakes stopped", file=sys.stderr)
    return 0
