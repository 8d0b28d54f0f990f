"""``t3orch logs [THREAD|SESSION] [-f]``: the daemon's log, a session's stderr and raw frames.

Read from the state dir, with or without a running daemon: ``daemon.log`` (see
``t3orch.daemonlog``), and per provider session ``raw/<session>.stderr`` (its
stderr, redacted) and ``raw/<session>.jsonl`` (its raw frames, redacted). With a
thread, the daemon's lines naming the thread or one of its sessions, then each
of its sessions; with a session, that session. ``-f`` keeps printing what is
appended (following rotations, and a thread's new sessions).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import msgspec

from t3orch import daemonlog
from t3orch.cli.invocation import add_store_option, store_url
from t3orch.state import DB_NAME, prepare_state_dir, resolve_state_dir
from t3orch.store.interface import ReadStore
from t3orch.store.open import open_reader

#: How often ``-f`` looks for more.
POLL_S = 0.2
#: Longest payload text shown for one raw frame.
FRAME_CHARS = 300


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = sub.add_parser(
        "logs", help="the daemon's log; with a thread or session, its provider stderr and frames"
    )
    common(p)
    add_store_option(p)
    p.add_argument("target", nargs="?", default=None, help="a thread (thr_…) or session (pss_…)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument(
        "-n", "--lines", type=int, default=100, help="last N lines of each part (0: all)"
    )
    p.set_defaults(handler=cmd_logs)


@attrs.frozen
class Part:
    """One file (with its rotated copies, oldest first) and how to print its lines."""

    #: Printed before its lines (a session's part starts with the session's status).
    heading: str
    #: Prefix of a followed line.
    label: str
    files: list[Path]
    render: Callable[[bytes], str | None]
    #: Only lines for which this holds (a thread's lines in the daemon log).
    keep: Callable[[str], bool] = lambda line: True


def cmd_logs(args: argparse.Namespace) -> int:
    state_dir = resolve_state_dir(args.state_dir)
    prepare_state_dir(state_dir, create=False)
    if args.lines < 0:
        print("t3orch logs: --lines must be 0 or more", file=sys.stderr)
        return 2
    url = store_url(args)
    try:
        parts = _parts(state_dir, args.target, url)
    except LookupError as exc:
        print(f"t3orch logs: {exc}", file=sys.stderr)
        return 3
    out = sys.stdout
    try:
        offsets: dict[Path, tuple[int, int]] = {}
        for part in parts:
            _dump(part, args.lines, offsets, out)
        if not args.follow:
            return 0
        while True:
            time.sleep(POLL_S)
            if args.target is not None and args.target.startswith("thr_"):
                # A thread's later sessions (a restart, a switch) appear as they start.
                parts = _parts(state_dir, args.target, url)
            for part in parts:
                _follow(part, offsets, out)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


def _parts(state_dir: Path, target: str | None, url: str | None = None) -> list[Part]:
    """What to show for ``target`` (its sessions from the store: ``url``, else the state
    dir's)."""
    daemon = Part(
        f"== daemon log ({daemonlog.log_path(state_dir)})",
        "daemon",
        daemonlog.log_files(state_dir) or [daemonlog.log_path(state_dir)],
        _text,
    )
    if target is None:
        return [daemon]
    store = _open_store(state_dir, target, url)
    try:
        with store.snapshot():
            if target.startswith("thr_") and store.row("thread", target) is not None:
                sessions = _sessions_of(store.read_thread_events(target))
            elif store.row("provider_session", target) is not None:
                sessions = [target]
            else:
                raise LookupError(f"no thread or provider session {target!r} in {state_dir}")
            rows = {s: store.row("provider_session", s) for s in sessions}
    finally:
        store.close()
    names = (target, *sessions)
    parts = [attrs.evolve(daemon, keep=lambda line: any(n in line for n in names))]
    raw = daemonlog.raw_dir(state_dir)
    for session in sessions:
        row = rows[session]
        s = None if row is None else row.decode()
        status = "" if s is None else f" ({s.provider}, {s.status})"
        why = f"\n   why: {s.last_error}" if s is not None and s.last_error else ""
        stderr, frames = raw / f"{session}.stderr", raw / f"{session}.jsonl"
        parts.append(
            Part(
                f"\n== session {session}{status}{why}\n-- stderr ({stderr})",
                f"{session} stderr",
                _chain(stderr, 1),
                _text,
            )
        )
        parts.append(
            Part(f"-- raw frames ({frames})", f"{session} frames", _chain(frames, 5), _frame)
        )
    return parts


def _open_store(state_dir: Path, target: str, url: str | None) -> ReadStore:
    if url is not None:
        return open_reader(url)
    db = state_dir / DB_NAME
    if not db.exists():
        raise LookupError(f"no thread or provider session {target!r}: {state_dir} has no store")
    return open_reader(db)


def _sessions_of(events: Iterable[Any]) -> list[str]:
    """The provider sessions a thread's events name, in the order they first appear."""
    seen: dict[str, None] = {}
    for env in events:
        if env.provider_session_id is not None:
            seen.setdefault(str(env.provider_session_id), None)
    return list(seen)


def _chain(path: Path, backups: int) -> list[Path]:
    """``path`` after its rotated copies (``path.N`` … ``path.1``), oldest first."""
    return [*(path.with_name(f"{path.name}.{i}") for i in range(backups, 0, -1)), path]


def _lines(files: list[Path]) -> Iterator[bytes]:
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        yield from data.splitlines()


def _dump(part: Part, last: int, offsets: dict[Path, tuple[int, int]], out: Any) -> None:
    existing = [p for p in part.files if p.exists()]
    print(part.heading, file=out)
    shown = [t for t in map(part.render, _lines(existing)) if t is not None and part.keep(t)]
    if not existing:
        print("   (nothing written)", file=out)
    for text in shown[-last:] if last else shown:
        print(text, file=out)
    out.flush()
    live = part.files[-1]
    try:
        st = live.stat()
    except FileNotFoundError:
        return
    offsets[live] = (st.st_ino, st.st_size)


def _follow(part: Part, offsets: dict[Path, tuple[int, int]], out: Any) -> None:
    """Print the whole lines appended to the part's live file since the last look."""
    live = part.files[-1]
    try:
        st = live.stat()
    except FileNotFoundError:
        return
    inode, at = offsets.get(live, (st.st_ino, 0))
    if inode != st.st_ino or st.st_size < at:
        at = 0  # rotated (or truncated): the live file started again
    offsets[live] = (st.st_ino, at)
    if st.st_size == at:
        return
    with open(live, "rb") as file:
        file.seek(at)
        data = file.read()
    # Only whole lines; the rest is read again once its newline is written.
    end = data.rfind(b"\n") + 1
    offsets[live] = (st.st_ino, at + end)
    for line in data[:end].splitlines():
        text = part.render(line)
        if text is not None and part.keep(text):
            print(f"[{part.label}] {text}", file=out)
    out.flush()


def _text(line: bytes) -> str | None:
    return line.decode("utf-8", "replace")


class _Frame(msgspec.Struct, rename="camel"):
    direction: str = "?"
    message_kind: str = "?"
    method: str | None = None
    json_rpc_id: str | int | None = None
    payload: msgspec.Raw = msgspec.Raw(b"null")
    observed_at: str = ""


_frame_decoder = msgspec.json.Decoder(_Frame)


def _frame(line: bytes) -> str | None:
    """``observedAt → request initialize {payload…}``: one raw frame on one line."""
    if not line.strip():
        return None
    try:
        f = _frame_decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return f"(torn line) {line[:FRAME_CHARS].decode('utf-8', 'replace')}"
    arrow = "→" if f.direction == "outgoing" else "←"
    name = f.method or (f"#{f.json_rpc_id}" if f.json_rpc_id is not None else "")
    payload = bytes(f.payload).decode("utf-8", "replace")
    if len(payload) > FRAME_CHARS:
        payload = payload[: FRAME_CHARS - 1] + "…"
    return f"{f.observed_at} {arrow} {f.message_kind} {name} {payload}"
