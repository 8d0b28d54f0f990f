"""The CLI's client commands: they talk to a running daemon over its Unix socket.

``status``, ``threads``, ``thread new``, ``send``, ``requests``, ``approve`` /
``deny``, ``interrupt``, ``show``, ``watch``, ``sessions``. Every one takes
``--state-dir`` and ``--config`` (to find the daemon) and ``--json``. Exit codes:
0 ok, 1 a run that did not complete (``send --wait``) or an API error, 2 no
daemon (or a bad config), 3 the daemon refused the command.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import msgspec
import trio

from t3orch.cli import threadcmds
from t3orch.cli.client import ApiClient, ApiError, DaemonNotRunning, ThreadView, connect
from t3orch.cli.invocation import (
    add_store_option,
    command_id,
    command_name,
    print_json,
    socket_path,
)
from t3orch.domain.vocab import RUN_TERMINAL, TURN_ITEM_TERMINAL

Command = Callable[[ApiClient, argparse.Namespace], Awaitable[int]]


def add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
    name: str,
    help: str,
    fn: Command,
) -> argparse.ArgumentParser:
    """The subcommand ``name``, with the common options, running ``fn`` on the daemon's API."""
    p = sub.add_parser(name, help=help)
    common(p)
    p.set_defaults(handler=lambda args: run_client(args, fn))
    return p


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Adds the client subcommands to the ``t3orch`` parser."""
    add = functools.partial(add_command, sub, common)

    add("status", "the daemon's status: pid, uptime, sessions, writer, API", cmd_status)
    p = sub.add_parser("threads", help="list threads (reads the store when no daemon runs)")
    common(p)
    add_store_option(p)
    p.add_argument("--all", action="store_true", help="archived and deleted threads too")
    p.set_defaults(handler=lambda args: threadcmds.run_reader(args, cmd_threads, run_client))
    # Only the leaf takes the common options: argparse lets a subparser's defaults
    # overwrite what its parent parsed, so ``--state-dir`` lives in one place.
    p = sub.add_parser("thread", help="thread commands (thread new …)")
    tsub = p.add_subparsers(dest="thread_command", required=True)
    new = tsub.add_parser("new", help="create a thread; prints its id")
    common(new)
    new.add_argument("--provider", required=True, choices=["codex", "claude", "standin"])
    new.add_argument(
        "--cwd",
        default=".",
        type=os.path.abspath,
        help="the agent's working directory (default: the current one; it must exist)",
    )
    new.add_argument("--model", default=None)
    new.add_argument("--title", default=None)
    new.set_defaults(handler=lambda args: run_client(args, cmd_thread_new))
    conf = tsub.add_parser(
        "set", help="change the settings of a thread's next runs (cwd, model, runtime mode)"
    )
    common(conf)
    conf.add_argument("thread")
    conf.add_argument("--cwd", default=None, type=os.path.abspath)
    conf.add_argument("--model", default=None)
    conf.add_argument("--runtime-mode", default=None, choices=["approval-required", "full-access"])
    conf.set_defaults(handler=lambda args: run_client(args, cmd_thread_set))
    threadcmds.register(tsub, common, run_client)
    p = add("send", "send a message (starts a run); prints the run id", cmd_send)
    p.add_argument("thread")
    p.add_argument("text")
    p.add_argument("--wait", action="store_true", help="return when the run ends (1 if failed)")
    p.add_argument("--steer", action="store_true", help="steer the active run, not queue")
    p.add_argument("--timeout", type=float, default=None, help="give up --wait after S seconds")
    add("requests", "list pending runtime requests (approvals, questions)", cmd_requests)
    # Each flag is one word of the request decision vocabulary; a request refuses
    # a decision it did not offer (`t3orch requests` lists what each offers).
    for name, verb, flag, flag_verb, flag_help in (
        ("approve", "accept", "--remember", "acceptForSession", "accept and remember (session)"),
        ("deny", "decline", "--cancel", "cancel", "decline and stop the turn"),
    ):
        p = add(name, f"answer a pending request: {verb}", _respond(verb))
        p.add_argument("request")
        p.add_argument("--message", default=None, help="a note sent with the answer")
        p.add_argument(
            flag,
            dest="decision",
            action="store_const",
            const=flag_verb,
            default=verb,
            help=f"{flag_verb}: {flag_help}",
        )
    p = add("interrupt", "interrupt a run", cmd_interrupt)
    p.add_argument("run")
    p = sub.add_parser("show", help="a thread's runs and turn items (daemon optional)")
    common(p)
    add_store_option(p)
    p.set_defaults(handler=lambda args: threadcmds.run_reader(args, cmd_show, run_client))
    p.add_argument("thread")
    p = add("watch", "live turn items of a thread (Ctrl-C to stop)", cmd_watch)
    p.add_argument("thread")
    p.add_argument("--until-idle", action="store_true", help="exit once no run is working")
    add("sessions", "list provider sessions", cmd_sessions)


# -- running -----------------------------------------------------------------------


def run_client(args: argparse.Namespace, fn: Command) -> int:
    name = command_name(args)
    path = socket_path(args)

    async def main() -> int:
        async with connect(path) as client:
            return await fn(client, args)

    try:
        return trio.run(main)
    except BaseException as exc:  # unwrapped below; re-raised when not ours
        leaf = _known(exc)
        if isinstance(leaf, DaemonNotRunning):
            print(f"t3orch {name}: {leaf}", file=sys.stderr)
            return 2
        if isinstance(leaf, ApiError):
            kind = "rejected" if leaf.rejected else "error"
            print(f"t3orch {name}: {kind}: {leaf.message}", file=sys.stderr)
            return 3 if leaf.rejected else 1
        if isinstance(leaf, KeyboardInterrupt):
            return 130
        raise


def _known(exc: BaseException) -> BaseException | None:
    """The failure worth one line, out of trio's exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _known(sub)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, DaemonNotRunning | ApiError | KeyboardInterrupt) else None


def _table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    for line in [headers, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def _short(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


# -- commands ----------------------------------------------------------------------


async def cmd_status(client: ApiClient, args: argparse.Namespace) -> int:
    st = await client.call("daemon.status")
    if args.json:
        print_json(st)
        _version_warnings(st)
        return 0
    api = st.get("api", {})
    ws = api.get("websocket", {})
    sessions = ", ".join(f"{k} {v}" for k, v in sorted(st.get("sessions", {}).items())) or "none"
    writer = st.get("writer", {})
    print(f"pid        {st.get('pid')}")
    print(f"uptime     {st.get('uptimeS', 0):.0f} s")
    print(f"sessions   {sessions}")
    print(f"sequence   {st.get('headSequence', '?')}")
    print(f"writer     {writer.get('events', 0)} events in {writer.get('batches', 0)} commits")
    print(f"api        ws://{ws.get('host')}:{ws.get('port')}  {api.get('socket')}")
    conns, subs = api.get("connections", 0), api.get("subscriptions", 0)
    print(f"clients    {conns} connected, {subs} subscriptions")
    if st.get("daemonId"):
        print(f"daemon     {st['daemonId']} on {st.get('host')}")
        others = [d for d in st.get("fleet") or [] if d["daemonId"] != st["daemonId"]]
        fleet = ", ".join(f"{d['host']} ({'online' if d['online'] else 'offline'})" for d in others)
        print(f"fleet      {fleet or 'no other daemon on this log'}")
    found = st.get("providers")
    if found is not None:
        print(f"providers  {', '.join(_provider_version(p) for p in found) or 'none'}")
    for line in held_lines(st.get("held") or []):
        print(f"held       {line}")
    for line in shared_lines(st.get("sharedProcesses") or [], st.get("runners") or []):
        print(f"shared     {line}")
    threadcmds.print_usage_summary(st.get("usage"))
    _version_warnings(st)
    return 0


def shared_lines(shared: list[dict[str, Any]], runners: list[dict[str, Any]]) -> list[str]:
    """One line per shared codex process: its pid and the threads on it (issue 21)."""
    out = []
    for p in shared:
        threads = [r["threadId"] for r in runners if r.get("process") == p["process"]]
        on = ", ".join(threads) or "no thread (closing)"
        out.append(f"{p['process']} pid {p['pid']}: {p['threads']} thread(s): {on}")
    return out


def held_lines(held: list[dict[str, Any]]) -> list[str]:
    """One line per runtime a holder keeps (issue 20): attached, or its grace left."""
    return [
        f"holder {h['holderId']} (pid {h['holderPid']}), provider pid {h['providerPid']}: "
        + ("attached" if h["attached"] else f"no daemon, {h['graceLeftS']:.0f} s of grace left")
        + (f"; threads: {', '.join(h['threads'])}" if h.get("threads") else "")
        for h in held
    ]


def _provider_version(p: dict[str, Any]) -> str:
    if p.get("tested") is None:
        return str(p["provider"])
    if not p.get("checked"):
        return f"{p['provider']} (version not checked yet)"
    version = p.get("version") or f"? ({p.get('error')})"
    return f"{p['provider']} {version} (tested {p['tested']})"


def _version_warnings(st: dict[str, Any]) -> None:
    for p in st.get("providers") or []:
        if p.get("newerThanTested"):
            print(
                f"t3orch status: warning: {p['provider']} {p['version']} is newer than the "
                f"version t3orch was tested with ({p['tested']}); its protocol may have changed",
                file=sys.stderr,
            )


async def cmd_threads(client: ApiClient, args: argparse.Namespace) -> int:
    view = await client.call("view.read", {"topic": "threadShell"})
    data = view["data"]
    if not args.all:
        # Archived threads and tombstones are hidden unless asked for.
        data["threads"] = [
            e
            for e in data["threads"]
            if not (e["thread"].get("archivedAt") or e["thread"].get("deletedAt"))
        ]
    if args.json:
        print_json(data)
        return 0
    rows = []
    for e in data["threads"]:
        t = e["thread"]
        mark = " (deleted)" if t.get("deletedAt") else " (archived)" if t.get("archivedAt") else ""
        rows.append(
            [
                t["id"],
                _short(t["title"] + mark, 40),
                t["defaultProvider"],
                str(e["runCount"]),
                e["latestRunStatus"] or "-",
                str(e["pendingRequests"]),
                threadcmds.usage_text(e.get("usage")),
                host_text(e.get("host")),
            ]
        )
    _table(["THREAD", "TITLE", "PROVIDER", "RUNS", "LAST RUN", "PENDING", "USAGE", "HOST"], rows)
    return 0


def host_text(host: dict[str, Any] | None) -> str:
    """The host a thread runs on, marked when its daemon is offline; ``-``: no owner
    recorded (a thread from before the fleet: the local daemon's)."""
    if not host:
        return "-"
    return str(host["host"]) + ("" if host["online"] else " (offline)")


async def cmd_thread_new(client: ApiClient, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {
        "commandId": command_id(),
        "provider": args.provider,
        "cwd": args.cwd,
    }
    if args.model:
        params["model"] = args.model
    if args.title:
        params["title"] = args.title
    res = await client.call("thread.create", params)
    if args.json:
        print_json(res)
    else:
        print(res["result"]["threadId"])
    return 0


async def cmd_thread_set(client: ApiClient, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"commandId": command_id(), "threadId": args.thread}
    for key, value in (
        ("cwd", args.cwd),
        ("model", args.model),
        ("runtimeMode", args.runtime_mode),
    ):
        if value:
            params[key] = value
    res = await client.call("thread.configure", params)
    if args.json:
        print_json(res)
        return 0
    changed = res["result"]["changed"]
    if not changed:
        print(f"{args.thread}: nothing changed")
    for key, c in changed.items():
        print(f"{args.thread}: {key} {c['from']} → {c['to']}")
    return 0


async def cmd_send(client: ApiClient, args: argparse.Namespace) -> int:
    view: ThreadView | None = None
    if args.wait:
        # Subscribe before sending, so the run's end cannot slip past unseen.
        _, snap = await client.subscribe("threadDetail", args.thread)
        view = ThreadView(snap)
    res = await client.call(
        "run.send",
        {
            "commandId": command_id(),
            "threadId": args.thread,
            "text": args.text,
            "mode": "steer" if args.steer else "queue",
        },
    )
    run_id = res["result"]["runId"]
    if args.json:
        print_json(res)
    else:
        print(run_id, flush=True)
    if view is None:
        return 0
    with trio.move_on_after(args.timeout if args.timeout is not None else float("inf")) as scope:
        status = await _run_end(client, args, view, run_id)
    if scope.cancelled_caught:
        print(f"t3orch send: run {run_id} still working after {args.timeout} s", file=sys.stderr)
        return 1
    run = view.runs.get(run_id, {})
    if args.json:
        print_json({"runId": run_id, "status": status, "lastError": run.get("lastError")})
    else:
        error = f": {run['lastError']}" if run.get("lastError") else ""
        print(f"run {run_id} {status}{error}", file=sys.stderr)
    return 0 if status == "completed" else 1


async def _run_end(
    client: ApiClient, args: argparse.Namespace, view: ThreadView, run_id: str
) -> str:
    announced: set[str] = set()
    while True:
        # A run waiting for an answer waits for the user: say what it asks, and how to answer.
        for req in view.requests.values():
            if req["id"] not in announced:
                announced.add(req["id"])
                if args.json:
                    print_json({"pendingRequest": req})
                else:
                    print(pending_request_text(req, args), file=sys.stderr, flush=True)
        run = view.runs.get(run_id)
        if run is not None and run["status"] in RUN_TERMINAL:
            return str(run["status"])
        note = await client.notification()
        if note["method"] == "event":
            view.apply(note["params"]["event"], note["params"].get("unchanged", ()))
        elif note["method"] == "resync":
            # Too slow to keep up: a fresh snapshot has the run's current state.
            _, snap = await client.subscribe("threadDetail", args.thread)
            view.reset(snap)


def pending_request_text(req: dict[str, Any], args: argparse.Namespace) -> str:
    """Two lines: the request (id, kind, what it asks) and the commands that answer it."""
    state = f" --state-dir {args.state_dir}" if args.state_dir else ""
    what = request_what(req) or "(no detail)"
    return (
        f"? {req['id']} waits for an answer: {req['kind']}: {what}\n"
        f"  answer with: t3orch approve {req['id']}{state}   or: t3orch deny {req['id']}{state}"
    )


async def cmd_requests(client: ApiClient, args: argparse.Namespace) -> int:
    view = await client.call("view.read", {"topic": "pendingRequests"})
    if args.json:
        print_json(view["data"])
        return 0
    rows = [
        [
            q["id"],
            q["threadId"],
            q["kind"],
            _short(request_what(q), 50) or "-",
            "/".join(q.get("availableDecisions") or []) or "-",
        ]
        for q in view["data"]["requests"]
    ]
    _table(["REQUEST", "THREAD", "KIND", "WHAT", "DECISIONS"], rows)
    return 0


#: Where a request says what it asks, best first: the adapter's summary, else the
#: command or path in the provider's own shape (Codex ``params``, Claude ``input``).
_WHAT_KEYS = ("summary", "command", "path", "file_path", "blockedPath", "reason", "message")


def request_what(req: dict[str, Any]) -> str:
    detail = req.get("detail") or {}
    nested = (detail, detail.get("params"), detail.get("input"))
    sources = [d for d in nested if isinstance(d, dict)]
    for key in _WHAT_KEYS:
        for source in sources:
            value = source.get(key)
            if isinstance(value, list):
                value = " ".join(str(part) for part in value)
            if value:
                return str(value)
    return ""


def _respond(default: str) -> Command:
    async def cmd(client: ApiClient, args: argparse.Namespace) -> int:
        decision: str = args.decision or default
        params: dict[str, Any] = {
            "commandId": command_id(),
            "requestId": args.request,
            "decision": decision,
        }
        if args.message:
            params["message"] = args.message
        res = await client.call("request.respond", params)
        if args.json:
            print_json(res)
        else:
            print(f"{args.request}: {decision}")
        return 0

    return cmd


async def cmd_interrupt(client: ApiClient, args: argparse.Namespace) -> int:
    res = await client.call("run.interrupt", {"commandId": command_id(), "runId": args.run})
    if args.json:
        print_json(res)
    elif res["result"].get("runtimeStopped"):
        print(f"{args.run}: interrupted; the provider did not take the interrupt: runtime stopped")
    else:
        print(f"{args.run}: interrupt requested")
    return 0


async def cmd_show(client: ApiClient, args: argparse.Namespace) -> int:
    view = await client.call("view.read", {"topic": "threadDetail", "threadId": args.thread})
    data = view["data"]
    if args.json:
        print_json(data)
        return 0
    t = data["thread"]
    where = f", on {host_text(data['host'])}" if data.get("host") else ""
    print(f"{t['title']}  ({t['id']}, {t['defaultProvider']}, {t['cwd']}{where})")
    threadcmds.print_thread_usage(data)
    runs = {r["id"]: r for r in data["runs"]}
    for run_id, items in _by_run(data["visibleTurnItems"], runs):
        if run_id is not None:
            r = runs[run_id]
            print(f"\n── run {r['ordinal']} · {r['status']} · {r['provider']} ({r['id']})")
            threadcmds.print_run_usage(r)
            why = run_failure(r)
            if why:
                print(f"   {r['status']}: {why}")
        for item in items:
            print(render_item(item))
    return 0


def _by_run(
    items: list[dict[str, Any]], runs: dict[str, dict[str, Any]]
) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """Items grouped under their run, runs in ordinal order, one header each.

    Items interleave in the log: a queued run's message is written while the run
    ahead of it still streams, and a steer adds to a run out of order. An item of
    no known run (a handoff, say) stays with the item before it.
    """
    groups: dict[str | None, list[dict[str, Any]]] = {}
    current: str | None = None
    for item in items:
        run_id = item.get("runId")
        if run_id in runs:
            current = run_id
        groups.setdefault(current, []).append(item)
    order = sorted(groups, key=lambda r: -1 if r is None else runs[r]["ordinal"])
    return [(r, groups[r]) for r in order]


def run_failure(run: dict[str, Any]) -> str | None:
    """Why a run ended without completing, on one line (a failed run with no reason is a
    question, not an answer); None for a run that completed or is still going."""
    if run["status"] not in ("failed", "interrupted", "cancelled") or not run.get("lastError"):
        return None
    return " ".join(str(run["lastError"]).split())


async def cmd_sessions(client: ApiClient, args: argparse.Namespace) -> int:
    view = await client.call("view.read", {"topic": "providerSessions"})
    if args.json:
        print_json(view["data"])
        return 0
    # Which live session is on which shared codex process (issue 21): the daemon knows.
    runners = (await client.call("daemon.status")).get("runners") or []
    process = {r["providerSessionId"]: r.get("process") for r in runners}
    rows = [
        [
            s["id"],
            s["provider"],
            s["status"],
            str(s.get("pid") or "-"),
            process.get(s["id"]) or "-",
            _short(s.get("cwd"), 30),
            s.get("lastActivityAt") or s["updatedAt"],
            # Why it is in error: its exit and stderr tail (bounded when stored), whole.
            " ".join((s.get("lastError") or "").split()) if s["status"] == "error" else "",
        ]
        for s in view["data"]["sessions"]
    ]
    _table(
        ["SESSION", "PROVIDER", "STATUS", "PID", "PROCESS", "CWD", "LAST ACTIVITY", "ERROR"], rows
    )
    return 0


# -- rendering turn items ----------------------------------------------------------

_MARK = {
    "user_message": "›",
    "assistant_message": "●",
    "reasoning": "∴",
    "plan": "☰",
    "command_execution": "$",
    "file_change": "✎",
    "file_search": "⌕",
    "web_search": "⌕",
    "approval_request": "?",
    "checkpoint": "◆",
    "compaction": "⋯",
    "handoff": "⇄",
    "fork": "⑂",
    "dynamic_tool": "⚙",
    "subagent": "⤷",
}


def render_item(item: dict[str, Any]) -> str:
    kind = item["type"]
    mark = _MARK.get(kind, "·")
    status = item.get("status", "")
    suffix = "" if status == "completed" else f"  [{status}]"
    match kind:
        case "user_message":
            body = f"you: {item['text']}"
        case "assistant_message":
            body = item.get("text") or ""
        case "reasoning":
            body = f"thinking: {_short(item.get('summary') or item.get('text'), 100)}"
        case "plan":
            body = f"plan:\n{_indent(item.get('markdown') or '')}"
        case "command_execution":
            out = _tail(item.get("output") or "", 8)
            code = item.get("exitCode")
            body = item["input"] + (f"\n{_indent(out)}" if out else "")
            if code is not None:
                body += f"\n  exit {code}"
        case "file_change":
            delta = ""
            if item.get("additions") is not None or item.get("deletions") is not None:
                delta = f" (+{item.get('additions') or 0} -{item.get('deletions') or 0})"
            body = f"{item['fileName']}{delta}"
        case "approval_request":
            decision = item.get("decision") or "waiting for an answer"
            body = f"approval ({item['requestKind']}): {item['summary']} → {decision}"
            body += f"  [{item['requestId']}]"
        case "file_search" | "web_search":
            body = f"search: {item['query']}"
        case "dynamic_tool":
            body = f"tool {item.get('toolName') or '?'}"
        case "subagent":
            body = f"subagent {item.get('toolName') or '?'}: {item.get('description') or ''}"
        case "handoff":
            body = (
                f"handoff ({item['strategy']}): "
                f"{', '.join(item['fromProviders'])} → {item['toProvider']}"
            )
        case "checkpoint":
            body = f"checkpoint {item['checkpointId']}"
        case _:
            body = item.get("title") or kind
    return f"{mark} {body}{suffix}"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip("\n").splitlines())


def _tail(text: str, lines: int) -> str:
    kept = text.rstrip("\n").splitlines()
    return "\n".join((["…"] if len(kept) > lines else []) + kept[-lines:])


# -- watch -------------------------------------------------------------------------

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class _Screen:
    """Prints finished items once; on a terminal, one rewritten progress line meanwhile."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.printed: set[str] = set()
        self.frames = itertools.cycle(_SPINNER)
        self.frame = ""
        self.progress = ""

    def item(self, item: dict[str, Any]) -> None:
        if item["id"] in self.printed or item.get("status") not in TURN_ITEM_TERMINAL:
            return
        self.printed.add(item["id"])
        self.clear()
        print(render_item(item), file=self.out, flush=True)

    def line(self, text: str) -> None:
        self.clear()
        print(text, file=self.out, flush=True)

    def spin(self, view: ThreadView, *, advance: bool = True) -> None:
        """Redraws the progress line (``advance``: the spinner's next frame)."""
        if not self.tty:
            return
        live = view.live_runs()
        if not live:
            self.clear()
            return
        run = live[-1]
        if advance or not self.frame:
            self.frame = next(self.frames)
        head = f"{self.frame} run {run['ordinal']} {run['status']}"
        self.progress = _fit(f"{head} · {progress_detail(view)}".rstrip(" ·"), self.width())
        self.out.write("\r\033[K" + self.progress)
        self.out.flush()

    def width(self) -> int:
        return shutil.get_terminal_size().columns - 1

    def clear(self) -> None:
        if self.tty and self.progress:
            self.out.write("\r\033[K")
            self.out.flush()
            self.progress = ""


def progress_detail(view: ThreadView) -> str:
    """What a live run is doing now: the request it waits on, else the text coming in."""
    if view.requests:
        req = list(view.requests.values())[-1]
        return f"waiting for {req['id']} ({req['kind']}): {_short(request_what(req), 200)}"
    working = [i for i in view.items.values() if i.get("status") not in TURN_ITEM_TERMINAL]
    if not working:
        return ""
    w = working[-1]
    kind = w["type"].replace("_", " ")
    text = view.shown_text(w["id"]) or w.get("text") or w.get("output") or w.get("input") or ""
    return f"{kind}: {' '.join(text.split())}" if text else kind


def _fit(line: str, width: int) -> str:
    """The line cut to the terminal, keeping its end (the newest text) after the head."""
    if len(line) <= width:
        return line
    head, sep, rest = line.partition(": ")
    room = width - len(head) - len(sep) - 1
    if not sep or room < 10:
        return line[: max(width - 1, 0)] + "…"
    return f"{head}{sep}…{rest[-room:]}"


async def cmd_watch(client: ApiClient, args: argparse.Namespace) -> int:
    screen = _Screen(sys.stdout)
    _, snap = await client.subscribe("threadDetail", args.thread)
    view = ThreadView(snap)
    if args.json:
        print_json(
            {"snapshotSequence": view.sequence, "thread": view.thread, "host": snap.get("host")}
        )
    elif snap.get("host"):
        screen.line(f"{view.thread['title']} ({view.thread['id']}) on {host_text(snap['host'])}")
    statuses = {r["id"]: r["status"] for r in view.runs.values()}
    for item in view.items.values():
        if args.json:
            print(msgspec.json.encode(item).decode(), flush=True)
        else:
            screen.item(item)
    announced: set[str] = set()

    def announce() -> None:
        for req in view.requests.values():
            if req["id"] not in announced:
                announced.add(req["id"])
                if args.json:
                    print(msgspec.json.encode({"pendingRequest": req}).decode(), flush=True)
                else:
                    screen.line(pending_request_text(req, args))

    announce()
    if args.until_idle and not view.live_runs():
        return 0
    async with trio.open_nursery() as nursery:

        async def tick() -> None:
            while True:
                screen.spin(view)
                await trio.sleep(0.1)

        if not args.json:
            nursery.start_soon(tick)
        while True:
            note = await client.notification()
            changed: list[dict[str, Any]]
            if note["method"] == "resync":
                _, snap = await client.subscribe("threadDetail", args.thread)
                view.reset(snap)
                changed = list(view.items.values())
            elif note["method"] == "event":
                params = note["params"]
                touched = view.apply(params["event"], params.get("unchanged", ()))
                changed = [touched] if touched else []
            elif note["method"] == "liveText":
                # Text as the provider sends it, before it commits: shown at once.
                view.apply_live(note["params"])
                if not args.json:
                    screen.spin(view, advance=False)
                continue
            else:
                continue
            for item in changed:
                if args.json:
                    print(msgspec.json.encode(item).decode(), flush=True)
                else:
                    screen.item(item)
            announce()
            for run in view.runs.values():
                if statuses.get(run["id"]) != run["status"]:
                    statuses[run["id"]] = run["status"]
                    if not args.json and run["status"] in RUN_TERMINAL | {"running"}:
                        why = run_failure(run)
                        why = f": {why}" if why else ""
                        screen.line(f"── run {run['ordinal']} {run['status']}{why}")
            if args.until_idle and not view.live_runs():
                screen.clear()
                nursery.cancel_scope.cancel()
                return 0
    return 0
