"""Thread lifecycle commands and the daemon-less reads of ``threads`` and ``show``.

``thread archive`` / ``unarchive`` / ``delete`` talk to the daemon like every
client command. ``threads`` and ``show`` ask the daemon when one runs and
otherwise read the store themselves, read-only, as ``events`` does: a
:class:`StoreClient` answers their ``view.read`` from the same read models.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

from t3orch.api.topics import check_topic, read_view
from t3orch.cli.client import ApiClient, DaemonNotRunning, connect
from t3orch.cli.invocation import command_id, command_name, print_json, socket_path, store_url
from t3orch.projections.views import FleetHosts, fleet_hosts
from t3orch.state import prepare_state_dir
from t3orch.store.errors import StateDirInvalid
from t3orch.store.interface import ReadStore
from t3orch.store.open import open_reader, open_registry

Command = Callable[[ApiClient, argparse.Namespace], Awaitable[int]]
Runner = Callable[[argparse.Namespace, Command], int]


class StoreClient(ApiClient):
    """An :class:`ApiClient` answered by the store instead of a daemon: reads only.

    ``view.read`` and ``events.read`` give what the daemon would (the same read
    models inside one read transaction); anything else needs the daemon.
    """

    def __init__(self, store: ReadStore, hosts: FleetHosts | None = None) -> None:
        # No channel: nothing is sent anywhere.
        self.store = store
        self.hosts = hosts

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        p = params or {}
        with self.store.snapshot():
            match method:
                case "view.read":
                    check_topic(p["topic"], p.get("threadId"))
                    view = read_view(
                        self.store,
                        p["topic"],
                        p.get("threadId"),
                        limit=p.get("limit", 200),
                        before_position=p.get("beforePosition"),
                        hosts=self.hosts,
                    )
                    doc: Any = {"snapshotSequence": view.snapshot_sequence, "data": view}
                case "events.read":
                    doc = {
                        "events": self.store.read_events(
                            p.get("afterSequence", 0), p.get("limit", 500)
                        ),
                        "headSequence": self.store.last_sequence(),
                    }
                case _:
                    raise DaemonNotRunning(f"{method} needs a running daemon")
        # The wire form, exactly as a daemon's reply decodes.
        return msgspec.json.decode(msgspec.json.encode(doc))

    async def notification(self) -> dict[str, Any]:
        raise DaemonNotRunning("streams need a running daemon")

    async def subscribe(
        self, topic: str, thread_id: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        raise DaemonNotRunning("subscriptions need a running daemon")


def run_reader(args: argparse.Namespace, fn: Command, run_client: Runner) -> int:
    """``run_client`` when a daemon answers on the state dir, else ``fn`` over the store.

    The store is opened read-only (the daemon may start meanwhile: readers never
    block it); a missing state dir or store is the usual one-line error, exit 2.
    """
    path = socket_path(args)
    if _daemon_answers(path):
        return run_client(args, fn)
    url = store_url(args)
    if url is None:
        db = prepare_state_dir(path.parent, create=False)
        if not db.exists():
            raise StateDirInvalid(
                f"no t3orch daemon is running for {path.parent}, and it holds no store"
            )
    store = open_reader(url or db)
    try:
        return trio.run(fn, StoreClient(store, _hosts(url or db)), args)
    except DaemonNotRunning as exc:
        # A read the store cannot answer (a stream, a daemon method): one line, as
        # ``run_client`` prints it.
        print(f"t3orch {command_name(args)}: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()


def _hosts(location: str | Path) -> FleetHosts:
    """The fleet's daemons as the store's registry has them (offline once they lapsed)."""
    registry = open_registry(location, readonly=True)
    try:
        return fleet_hosts(registry.daemons(), time.time())
    finally:
        registry.close()


def _daemon_answers(path: Path) -> bool:
    async def probe() -> bool:
        try:
            async with connect(path):
                return True
        except DaemonNotRunning:
            return False

    return trio.run(probe)


# -- lifecycle commands --------------------------------------------------------------


def register(
    tsub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
    run_client: Runner,
) -> None:
    """Adds ``thread archive``, ``thread unarchive`` and ``thread delete``."""
    helps = {
        "archive": "hide a thread from `threads` (it refuses new runs until unarchived)",
        "unarchive": "show an archived thread again and let it take runs",
        "delete": "make a thread a tombstone: its runtime is stopped, later commands refused",
    }
    for verb, help in helps.items():
        p = tsub.add_parser(verb, help=help)
        common(p)
        p.add_argument("thread")
        p.set_defaults(handler=lambda args, v=verb: run_client(args, _lifecycle(v)))


def _lifecycle(verb: str) -> Command:
    async def cmd(client: ApiClient, args: argparse.Namespace) -> int:
        res = await client.call(
            f"thread.{verb}", {"commandId": command_id(), "threadId": args.thread}
        )
        if args.json:
            print_json(res)
        else:
            print(f"{args.thread}: {verb}d")
        return 0

    return cmd


# -- usage ---------------------------------------------------------------------------


def usage_text(usage: dict[str, Any] | None) -> str:
    """``1,983 tokens (1,981 in, 2 out), $0.000075``; ``-`` when nothing was reported."""
    if not usage:
        return "-"
    text = (
        f"{usage.get('totalTokens', 0):,} tokens "
        f"({usage.get('inputTokens', 0):,} in, {usage.get('outputTokens', 0):,} out)"
    )
    cost = usage.get("costUsd")
    return text + (f", ${cost:.6f}" if cost is not None else "")


#: ``status`` lists this many threads by usage (the largest first); ``--json`` has all.
STATUS_THREADS = 10


def print_usage_summary(usage: dict[str, Any] | None) -> None:
    """``status``: usage over every thread, then the threads that reported any."""
    threads: dict[str, Any] = (usage or {}).get("threads") or {}
    print(f"usage      {usage_text((usage or {}).get('total'))} over {len(threads)} threads")
    ranked = sorted(threads.items(), key=lambda kv: -int(kv[1].get("totalTokens", 0)))
    for thread_id, u in ranked[:STATUS_THREADS]:
        print(f"  {thread_id}  {usage_text(u)}")
    if len(ranked) > STATUS_THREADS:
        print(f"  … {len(ranked) - STATUS_THREADS} more (status --json)")


def print_thread_usage(detail: dict[str, Any]) -> None:
    """``show``: the thread's total; marks of archive and deletion."""
    t = detail["thread"]
    if t.get("deletedAt"):
        print(f"deleted    {t['deletedAt']} (a tombstone: it takes no more commands)")
    elif t.get("archivedAt"):
        print(f"archived   {t['archivedAt']}")
    print(f"usage      {usage_text(detail.get('usage'))}")


def print_run_usage(run: dict[str, Any]) -> None:
    if run.get("usage"):
        print(f"   usage {usage_text(run['usage'])}")
