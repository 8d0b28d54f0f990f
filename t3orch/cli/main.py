"""Entry point: parses arguments, runs a subcommand, turns known failures into one line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from t3orch.cli.invocation import command_name
from t3orch.config import ConfigError, load_config
from t3orch.provider_versions import t3orch_version
from t3orch.store.errors import CommandRejected, StoreError

Handler = Callable[[argparse.Namespace], int]

DESCRIPTION = """\
t3orch owns the coding-agent processes of this machine (OpenAI Codex, Claude Code):
it runs them for you, keeps every change in a durable event log, recovers them after
a crash, and serves threads, runs and approvals to the commands below.
"""
#: A closed pipe ends us quietly, with the status a shell shows for SIGPIPE.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


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
    from t3orch.cli import daemoncmds, demo, drill, fakescmd, storecmds
    from t3orch.cli.invocation import add_store_option

    parser = argparse.ArgumentParser(
        prog="t3orch",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print t3orch's version and the provider versions it finds, then exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("events", help="print committed events as JSON lines")
    _common(p)
    add_store_option(p)
    p.add_argument("--since", type=int, default=0, help="print events after this sequence")
    p.add_argument("--follow", action="store_true", help="keep printing new events")
    p.set_defaults(handler=storecmds.cmd_events)

    p = sub.add_parser("check", help="prove the stored projections equal a rebuild from the log")
    _common(p)
    add_store_option(p)
    p.set_defaults(handler=storecmds.cmd_check)

    p = sub.add_parser("serve", help="run the daemon in the foreground (SIGTERM stops it)")
    _common(p)
    add_store_option(p)
    p.set_defaults(handler=daemoncmds.cmd_serve)

    p = sub.add_parser(
        "stop-agents",
        help="stop every provider a holder keeps running for this state dir (the daemon's "
        "exit leaves them to their grace: daemon.reattach_grace_s)",
    )
    _common(p)
    p.set_defaults(handler=daemoncmds.cmd_stop_agents)

    p = sub.add_parser(
        "held", help="list the runtimes holders keep for this state dir, and their grace left"
    )
    _common(p)
    p.set_defaults(handler=daemoncmds.cmd_held)

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
    p.add_argument(
        "--kill", action="store_true", help="live-restore: SIGKILL the daemon instead of SIGTERM"
    )
    p.set_defaults(handler=drill.cmd_drill)

    p = sub.add_parser(
        "demo", help="run the daemon end to end on a fresh state dir (approval, crash, recovery)"
    )
    _common(p)
    p.set_defaults(handler=demo.cmd_demo)

    p = sub.add_parser("fakes", help="serve the loopback fake model servers; write a config")
    p.add_argument("--dir", default=None, help="where homes, work dir and config go (default: new)")
    p.add_argument("--config-out", default=None, help="the config TOML (default: DIR/t3orch.toml)")
    p.set_defaults(handler=fakescmd.cmd_fakes)

    # The client commands (status, threads, thread new, send, …) talk to a running daemon.
    from t3orch.cli import clientcmds, lineagecmds, logcmds, webcmd

    clientcmds.register(sub, _common)
    lineagecmds.register(sub, _common)
    logcmds.register(sub, _common)
    webcmd.register(sub, _common)
    return parser


def version_report(config_path: str | None) -> str:
    """``t3orch X``, then one line per provider binary the config finds, with its version."""
    from t3orch.provider_versions import TESTED, probe

    providers = load_config(config_path).providers
    lines = [f"t3orch {t3orch_version()}"]
    for kind, command in (("codex", providers.codex.command), ("claude", providers.claude.command)):
        if not command:
            lines.append(f"{kind}: not found (tested with {TESTED[kind]})")
            continue
        found = probe(kind, command)
        lines.append(
            f"{kind} {found.version or '?'} ({' '.join(found.command)}; tested with {found.tested})"
            + (f": {found.error}" if found.error else "")
        )
        if warning := found.warning():
            lines.append(f"  warning: {warning}")
    return "\n".join(lines) + "\n"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        try:
            report = version_report(os.environ.get("T3ORCH_CONFIG"))
        except ConfigError as exc:
            parser.exit(2, f"t3orch --version: config error: {exc}\n")
        sys.stdout.write(report)
        parser.exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; a reader that closed our stdout (``| head``) ends it quietly."""
    code = 0
    try:
        try:
            code = _main(argv)
        finally:
            # Buffered output goes now, where a closed pipe is caught, not at exit.
            sys.stdout.flush()
    except* BrokenPipeError:
        _silence_stdout()
        code = EXIT_BROKEN_PIPE
    return code


def _silence_stdout() -> None:
    # What is still buffered for the closed pipe would fail again at interpreter exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to silence
        pass


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if problem := _not_utf8(args, sys.argv[1:] if argv is None else list(argv)):
        print(f"t3orch {command_name(args)}: {problem}; nothing was done", file=sys.stderr)
        return 2
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


def _not_utf8(args: argparse.Namespace, argv: Sequence[str]) -> str | None:
    """Which argument is not UTF-8, if one is: the log, the API and the providers take
    text, and Python hands undecodable argv bytes over as lone surrogates, which fail
    only once something encodes them (a traceback, deep in a command)."""
    for dest, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str):
                continue
            raw = os.fsencode(text)
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                option = "--" + dest.replace("_", "-")
                named = option if any(a.split("=")[0] == option for a in argv) else dest.upper()
                return f"{named} is not valid UTF-8 (byte {raw[exc.start]:#04x} at {exc.start})"
    return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


if __name__ == "__main__":
    raise SystemExit(main())
