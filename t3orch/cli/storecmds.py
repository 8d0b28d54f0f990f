"""``t3orch events`` and ``t3orch check``: read-only tools that work without the daemon."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import msgspec

from t3orch.cli.invocation import store_url
from t3orch.domain.thread import AppThread
from t3orch.events import EventEnvelope
from t3orch.projections.check import compare, compare_chunks, rebuild
from t3orch.state import prepare_state_dir, resolve_state_dir
from t3orch.store.interface import ReadStore
from t3orch.store.open import open_reader, open_registry

_encode = msgspec.json.encode


def open_readonly(args: argparse.Namespace) -> ReadStore:
    """``--store`` (or the config's ``store.url``), else the state dir's store."""
    url = store_url(args)
    if url is not None:
        return open_reader(url)
    db = prepare_state_dir(resolve_state_dir(args.state_dir), create=False)
    return open_reader(db)


def _how_to_read(db: Path) -> tuple[object, ...]:
    """What decides how a read-only open reads the store (``readonly_uri``): whether a
    ``-wal`` exists, and with none, the file itself (read as immutable, as it was)."""
    if Path(f"{db}-wal").exists():
        return (True,)
    try:
        st = db.stat()
    except OSError:
        return (False,)
    return (False, st.st_ino, st.st_size, st.st_mtime_ns)


class _Hosts:
    """The host of each event's thread (its owner daemon's, from the fleet registry),
    added to every ``events`` line as ``host`` (null: no thread, or no owner recorded)."""

    def __init__(self, location: str | Path) -> None:
        self.location = location
        self.owners: dict[str, str | None] = {}
        self.names: dict[str, str] = {}

    def refresh(self) -> None:
        registry = open_registry(self.location, readonly=True)
        try:
            self.names = {d.daemon_id: d.host for d in registry.daemons()}
        finally:
            registry.close()

    def line(self, store: ReadStore, env: EventEnvelope) -> bytes:
        host: str | None = None
        if env.thread_id is not None:
            if env.thread_id not in self.owners:
                thread = store.get(AppThread, env.thread_id)
                self.owners[env.thread_id] = thread.owner_daemon_id if thread else None
            owner = self.owners[env.thread_id]
            if owner is not None:
                if owner not in self.names:
                    self.refresh()  # a daemon that joined since
                host = self.names.get(owner, owner)
        # The envelope's own encoding with one more key: no decode and re-encode.
        return _encode(env)[:-1] + b',"host":' + _encode(host) + b"}\n"


def cmd_events(args: argparse.Namespace) -> int:
    url = store_url(args)
    # A server's reads always see the latest commits: only a SQLite file is reopened.
    db: Path | None = None
    read_as: tuple[object, ...] = ()
    if url is not None:
        store = open_reader(url)
        hosts = _Hosts(url)
    else:
        db = prepare_state_dir(resolve_state_dir(args.state_dir), create=False)
        read_as = _how_to_read(db)
        store = open_reader(db)
        hosts = _Hosts(db)
    out = sys.stdout.buffer
    after = args.since
    hosts.refresh()
    try:
        while True:
            page = store.read_events(after, 1000)
            for env in page:
                out.write(hosts.line(store, env))
                after = env.sequence
            out.flush()
            if page:
                continue
            if not args.follow:
                return 0
            time.sleep(0.2)
            if db is not None and _how_to_read(db) != read_as:
                # A daemon started (a -wal appeared), stopped (it went), or wrote the
                # file read as immutable: an open that sees the store as it is now.
                store.close()
                read_as = _how_to_read(db)
                store = open_reader(db)
    except KeyboardInterrupt:  # a closed pipe is handled for every command in main
        return 0
    finally:
        store.close()


def cmd_check(args: argparse.Namespace) -> int:
    store = open_readonly(args)
    count, rows, projected = 0, 0, 0
    try:
        with store.snapshot():
            problems = store.integrity_problems()
            diffs: list[str] = []
            if not problems:
                rebuilt, count, gaps = rebuild(store.iter_events())
                rows = len(rebuilt.rows)
                diffs = gaps + compare(store.all_rows(), rebuilt)
                diffs += compare_chunks(store.all_chunks(), rebuilt)
                projected = store.projection_sequence()
                last = store.last_sequence()
                if projected != last:
                    diffs.append(f"projection cursor at {projected} but the log ends at {last}")
    finally:
        store.close()
    ok = not problems and not diffs
    if args.json:
        doc = {
            "ok": ok,
            "database": str(store.location),
            "integrityProblems": problems,
            "events": count,
            "projectionRows": rows,
            "projectionSequence": projected,
            "differences": diffs,
        }
        sys.stdout.write(msgspec.json.format(_encode(doc), indent=2).decode() + "\n")
        return 0 if ok else 1
    if problems:
        print(
            f"t3orch check: {store.location}: integrity check failed: {'; '.join(problems[:5])}",
            file=sys.stderr,
        )
        return 1
    if diffs:
        for d in diffs:
            print(f"t3orch check: {d}", file=sys.stderr)
        return 1
    print(
        f"ok: {count} events, {rows} projection rows equal a rebuild "
        f"(projections at sequence {projected})"
    )
    return 0
