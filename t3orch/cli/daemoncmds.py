"""``t3orch serve``: the daemon in the foreground (systemd runs it this way too)."""

from __future__ import annotations

import argparse

import attrs
import trio

from t3orch.api.transport import socket_path_problem
from t3orch.cli.invocation import SOCKET_FILE, store_url
from t3orch.config import StoreConfig, load_config
from t3orch.state import prepare_state_dir, resolve_state_dir
from t3orch.store.errors import StateDirInvalid


def cmd_serve(args: argparse.Namespace) -> int:
    from t3orch import daemonlog
    from t3orch.daemon import serve_until_signalled

    config = load_config(args.config)
    url = store_url(args)
    if url is not None:
        config = attrs.evolve(config, store=StoreConfig(url=url))
    state_dir = resolve_state_dir(
        args.state_dir or (str(config.daemon.state_dir) if config.daemon.state_dir else None)
    )
    # Checked before anything is written into it; then the log has a file there too.
    if problem := socket_path_problem(state_dir / SOCKET_FILE):
        raise StateDirInvalid(f"state dir {state_dir} cannot hold the daemon's socket: {problem}")
    prepare_state_dir(state_dir, create=True)
    daemonlog.configure(state_dir)
    trio.run(serve_until_signalled, config, state_dir)
    return 0


def cmd_stop_agents(args: argparse.Namespace) -> int:
    """Stop every provider runtime a holder keeps for the state dir (issue 20)."""
    import sys

    from t3orch.daemon import stop_agents

    config = load_config(args.config)
    state_dir = resolve_state_dir(
        args.state_dir or (str(config.daemon.state_dir) if config.daemon.state_dir else None)
    )
    stopped, left = stop_agents(state_dir)
    print(
        f"stopped {len(stopped) - len(left)} held runtime(s)"
        + (f"; {len(left)} still run: " + ", ".join(map(str, left)) if left else "")
    )
    if left:
        print(f"t3orch stop-agents: holder(s) {left} did not stop within 20 s", file=sys.stderr)
        return 1
    return 0


def cmd_held(args: argparse.Namespace) -> int:
    """The runtimes holders keep for the state dir, with or without a daemon."""
    import json

    from t3orch.cli.clientcmds import held_lines
    from t3orch.daemon import held_runtimes

    config = load_config(args.config)
    state_dir = resolve_state_dir(
        args.state_dir or (str(config.daemon.state_dir) if config.daemon.state_dir else None)
    )
    held = held_runtimes(state_dir)
    if args.json:
        print(json.dumps(held))
    else:
        for line in held_lines(held) or ["no held runtimes"]:
            print(line)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Run an adapter over a recorded transcript; print its canonical events as JSON lines."""
    import sys

    from adapters.replay import ReplayMismatch, event_json, replay_events
    from adapters.transcript import TranscriptError

    try:
        events = trio.run(replay_events, args.provider, args.transcript)
    except (TranscriptError, ReplayMismatch, ValueError, OSError) as exc:
        print(f"t3orch replay: {exc}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    for event in events:
        out.write(event_json(event) + b"\n")
    out.flush()
    return 0
