"""What every client command of one CLI invocation shares: its name, the daemon's
socket, a fresh command id and JSON output.

Below ``clientcmds`` and ``threadcmds`` alike, so that neither imports the other
for them.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path
from typing import Any, TextIO

import msgspec

from t3orch.config import load_config, store_url_problem
from t3orch.state import resolve_state_dir
from t3orch.store.errors import StoreError

SOCKET_FILE = "api.sock"


def command_name(args: argparse.Namespace) -> str:
    """The command as the user typed it (``thread new``), for error lines."""
    sub = getattr(args, "thread_command", None)
    return f"{args.command} {sub}" if sub else str(args.command)


def socket_path(args: argparse.Namespace) -> Path:
    """``--state-dir``, ``$T3ORCH_STATE_DIR``, the config's ``daemon.state_dir``, XDG."""
    chosen = args.state_dir or os.environ.get("T3ORCH_STATE_DIR")
    if not chosen and args.config:
        configured = load_config(args.config).daemon.state_dir
        chosen = str(configured) if configured else None
    return resolve_state_dir(chosen) / SOCKET_FILE


def command_id() -> str:
    # Fresh per invocation: a retry of the same invocation would reuse it.
    return f"cli-{uuid.uuid4().hex}"


def print_json(doc: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
    out.flush()


def add_store_option(p: argparse.ArgumentParser) -> None:
    """``--store URL``: for the commands that open the store themselves."""
    p.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="a PostgreSQL log shared by several daemons (postgresql://…) instead of "
        "<state-dir>/events.sqlite3 (default: the config's store.url)",
    )


def store_url(args: argparse.Namespace) -> str | None:
    """``--store``, else the config's ``store.url``; None: the state dir's SQLite file."""
    url: str | None = getattr(args, "store", None)
    if url is not None:
        if problem := store_url_problem(url):
            raise StoreError(f"--store: {problem}")
        return url
    if args.config:
        return load_config(args.config).store.url
    return None
