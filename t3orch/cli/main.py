"""Entry point: parses arguments, runs a subcommand, turns known failures into one line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from t3orch.config import ConfigError
from t3orch.store.errors import CommandRejected, StoreError

Handler = Callable[[argparse.Namespace], int]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state-dir",
        default=None,
        help="state directory (default: $T3ORCH_STATE_DIR or $XDG_STATE_HOME/t3orch)",
    )
    p.add_argument(
        "--config",
        default=os.environ.get("T3ORCH_CONFIG"),
        help="TOML config file (default: $T3ORCH_CONFIG)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    from t3orch.cli import daemoncmds, demo, drill, storecmds

    parser = argparse.ArgumentParser(prog="t3orch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("events", help="print committed events as JSON lines")
    _common(p)
    p.add_argument("--since", type=int, default=0, help="print events after this sequence")
    p.add_argument("--follow", action="store_true", help="keep printing new events")
    p.set_defaults(handler=storecmds.cmd_events)

    p = sub.add_parser("check", help="prove the stored projections equal a rebuild from the log")
    _common(p)
    p.set_defaults(handler=storecmds.cmd_check)

    p = sub.add_parser("serve", help="run the daemon in the foreground (SIGTERM stops it)")
    _common(p)
    p.set_defaults(handler=daemoncmds.cmd_serve)

    p = sub.add_parser("replay", help="run an adapter over a transcript; canonical events as JSONL")
    _common(p)
    p.add_argument("--provider", required=True, choices=["codex", "claude"])
    p.add_argument("transcript", help="an NDJSON transcript (fixtures/codex/*.ndjson, …)")
    p.set_defaults(handler=daemoncmds.cmd_replay)

    p = sub.add_parser("drill", help="run a crash-recovery drill and print a verdict")
    _common(p)
    p.add_argument("name", choices=drill.DRILLS)
    p.add_argument(
        "--provider",
        choices=["codex", "claude", "standin"],
        default=None,
        help="default: codex if installed, else claude, else the stand-in",
    )
    p.set_defaults(handler=drill.cmd_drill)

    p = sub.add_parser(
        "demo", help="run the daemon end to end on a fresh state dir (approval, crash, recovery)"
    )
    _common(p)
    p.set_defaults(handler=demo.cmd_demo)

    # The client commands (status, threads, thread new, send, …) talk to a running daemon.
    from t3orch.cli import clientcmds, lineagecmds, logcmds

    clientcmds.register(sub, _common)
    lineagecmds.register(sub, _common)
    logcmds.register(sub, _common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    code = 0
    # Failures raised inside a trio nursery arrive wrapped in exception groups.
    try:
        code = handler(args)
    except* ConfigError as group:
        for exc in _leaves(group):
            print(f"t3orch {args.command}: config error: {exc}", file=sys.stderr)
        code = 2
    except* StoreError as group:
        for exc in _leaves(group):
            print(f"t3orch {args.command}: error: {exc}", file=sys.stderr)
        code = 2
    except* CommandRejected as group:
        for exc in _leaves(group):
            print(f"t3orch {args.command}: rejected: {exc}", file=sys.stderr)
        code = 3
    return code


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


if __name__ == "__main__":
    raise SystemExit(main())
