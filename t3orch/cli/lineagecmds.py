"""Client commands for lineage and context: fork, merge-back, switch-provider, handoffs,
checkpoints."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

import trio

from t3orch.cli.client import ApiClient
from t3orch.cli.clientcmds import _short, _table, add_command, run_client
from t3orch.cli.invocation import command_id, print_json

PROVIDERS = ["codex", "claude", "standin"]


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    add = functools.partial(add_command, sub, common)

    p = add("fork", "fork a thread at a run (default: its latest); prints the new id", cmd_fork)
    p.add_argument("thread")
    p.add_argument("--run", default=None, help="the source run (finished); default the latest")
    p.add_argument("--title", default=None)
    p.add_argument("--provider", choices=PROVIDERS, default=None, help="default: the parent's")
    p.add_argument(
        "--worktree",
        action="store_true",
        help="give the fork a git worktree of its own (<repo>-fork-<id>, beside the repository) "
        "instead of the parent's cwd",
    )
    p = add("switch-provider", "run the thread's next runs on another provider", cmd_switch)
    p.add_argument("thread")
    p.add_argument("provider", choices=PROVIDERS)
    p = add("handoffs", "a thread's context handoffs (what each run was told)", cmd_handoffs)
    p.add_argument("thread")
    p.add_argument("--text", action="store_true", help="print each handoff's full text")
    # ``handoff regenerate``: a group (the leaf alone takes the common options).
    p = sub.add_parser("handoff", help="handoff commands (handoff regenerate …)")
    hsub = p.add_subparsers(dest="handoff_command", required=True)
    regen = hsub.add_parser(
        "regenerate", help="rebuild a handoff from today's history; the old one is superseded"
    )
    common(regen)
    regen.add_argument("handoff", help="the handoff id (see `t3orch handoffs THREAD`)")
    regen.add_argument(
        "--full",
        action="store_true",
        help="as a full_thread_summary (default: the handoff's own strategy)",
    )
    regen.set_defaults(handler=lambda args: run_client(args, cmd_regenerate))
    p = add("merge-back", "carry a fork's runs back into its parent as context", cmd_merge_back)
    p.add_argument("thread", help="the fork")
    p.add_argument("--run", default=None, help="up to this finished run; default the latest")
    p.add_argument("--into", default=None, help="the target thread; default the fork's parent")
    p = add("checkpoints", "a thread's filesystem checkpoints (one per run)", cmd_checkpoints)
    p.add_argument("thread")
    p = add("diff", "the changes between two checkpoints", cmd_diff)
    p.add_argument("base", help="the older checkpoint id")
    p.add_argument("target", help="the newer checkpoint id")
    p.add_argument("--stat", action="store_true", help="per-file counts only")
    p = add("rollback", "restore a checkpoint's files and roll the conversation back", cmd_rollback)
    p.add_argument("thread")
    p.add_argument("--to", required=True, dest="checkpoint", help="the checkpoint id")
    p.add_argument(
        "--yes",
        action="store_true",
        help="do it without asking (needed when stdin is not a terminal); the changes are "
        "still printed first",
    )


async def cmd_fork(client: ApiClient, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"commandId": command_id(), "threadId": args.thread}
    for key, value in (("runId", args.run), ("title", args.title), ("provider", args.provider)):
        if value:
            params[key] = value
    if args.worktree:
        params["worktree"] = True
    res = await client.call("thread.fork", params)
    if args.json:
        print_json(res)
    else:
        print(res["result"]["threadId"])
    return 0


async def cmd_switch(client: ApiClient, args: argparse.Namespace) -> int:
    res = await client.call(
        "thread.switchProvider",
        {"commandId": command_id(), "threadId": args.thread, "provider": args.provider},
    )
    if args.json:
        print_json(res)
        return 0
    r = res["result"]
    back = r.get("providerThreadId")
    how = f"resumes provider thread {back}" if back else "starts a new provider thread"
    print(f"{args.thread}: {r['previousProvider']} → {r['provider']}; the next run {how}")
    return 0


async def cmd_handoffs(client: ApiClient, args: argparse.Namespace) -> int:
    view = await client.call("view.read", {"topic": "threadDetail", "threadId": args.thread})
    data = view["data"]
    handoffs = data["handoffs"]
    if args.json:
        print_json(handoffs)
        return 0
    runs = {r["id"]: r for r in data["runs"]}
    rows = []
    for h in handoffs:
        covered = h["coveredRunOrdinals"]
        target = runs.get(h["targetRunId"])
        rows.append(
            [
                h["id"],
                h["strategy"],
                f"{covered['from']}-{covered['to']}",
                str(target["ordinal"]) if target else h["targetRunId"],
                h["status"],
                str(len(h["summaryText"])),
            ]
        )
    _table(["HANDOFF", "STRATEGY", "COVERS", "RUN", "STATUS", "CHARS"], rows)
    if args.text:
        for h in handoffs:
            print(f"\n── {h['id']} ({_short(h['strategy'])})\n{h['summaryText']}")
    return 0


async def _mutate(
    client: ApiClient, args: argparse.Namespace, method: str, params: dict[str, Any]
) -> dict[str, Any] | None:
    """Call ``method``; with ``--json`` print the answer and return None, else its result."""
    res = await client.call(method, params)
    if args.json:
        print_json(res)
        return None
    result: dict[str, Any] = res["result"]
    return result


async def cmd_regenerate(client: ApiClient, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"commandId": command_id(), "handoffId": args.handoff}
    if args.full:
        params["strategy"] = "full_thread_summary"
    r = await _mutate(client, args, "handoff.regenerate", params)
    if r is None:
        return 0
    covered = r["coveredRunOrdinals"]
    print(
        f"{r['handoffId']} ({r['strategy']}, runs {covered['from']}-{covered['to']}) supersedes "
        f"{r['supersedes']}; it goes to provider thread {r['providerThreadId']} with its next run"
    )
    return 0


async def cmd_merge_back(client: ApiClient, args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"commandId": command_id(), "threadId": args.thread}
    if args.run:
        params["runId"] = args.run
    if args.into:
        params["targetThreadId"] = args.into
    r = await _mutate(client, args, "thread.mergeBack", params)
    if r is None:
        return 0
    covered = r["coveredRunOrdinals"]
    print(
        f"{r['transferId']}: runs {covered['from']}-{covered['to']} of {r['sourceThreadId']} "
        f"go to {r['targetThreadId']} with its next run"
    )
    return 0


async def cmd_checkpoints(client: ApiClient, args: argparse.Namespace) -> int:
    res = await client.call("checkpoint.list", {"threadId": args.thread})
    if args.json:
        print_json(res)
        return 0
    if not res["enabled"]:
        print(f"checkpoints disabled: {res['reason']}")
    rows = []
    for cp in res["checkpoints"]:
        adds = sum(f["additions"] for f in cp["files"])
        dels = sum(f["deletions"] for f in cp["files"])
        rows.append(
            [
                cp["id"],
                # A subagent's checkpoint, or a rollback's undo point, does not
                # advance the run count.
                _kind(cp) if cp["appRunOrdinal"] is None else str(cp["appRunOrdinal"]),
                cp["status"],
                f"{len(cp['files'])} files +{adds} -{dels}",
                cp["capturedAt"],
            ]
        )
    if rows or res["enabled"]:
        _table(["CHECKPOINT", "RUN", "STATUS", "CHANGES", "CAPTURED"], rows)
    return 0


def _kind(cp: dict[str, Any]) -> str:
    # An undo checkpoint's ref is under the thread's undo/ (gitstore.undo_checkpoint_ref).
    return "undo" if f"/{cp['threadId']}/undo/" in cp["ref"] else "subagent"


async def cmd_diff(client: ApiClient, args: argparse.Namespace) -> int:
    res = await client.call(
        "checkpoint.diff", {"fromCheckpointId": args.base, "toCheckpointId": args.target}
    )
    if args.json:
        print_json(res)
        return 0
    for f in res["files"]:
        print(f"{f['additions']:>5} {f['deletions']:>5}  {f['path']}")
    if not args.stat and res["patch"]:
        print()
        print(res["patch"], end="")
    return 0


#: Paths listed per kind before "… and N more".
_LISTED = 20


def _listing(verb: str, paths: list[str]) -> list[str]:
    lines = [f"  {verb} {p}" for p in paths[:_LISTED]]
    if len(paths) > _LISTED:
        lines.append(f"  … and {len(paths) - _LISTED} more to {verb}")
    return lines


def _confirmed(question: str) -> bool:
    """The user's yes on the terminal (the prompt goes to stderr, like an error would)."""
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


async def cmd_rollback(client: ApiClient, args: argparse.Namespace) -> int:
    """Say what the rollback changes, ask (or need --yes), then do it; name the undo."""
    target = {"threadId": args.thread, "checkpointId": args.checkpoint}
    plan_res = await client.call(
        "thread.rollback", {"commandId": command_id(), **target, "dryRun": True}
    )
    plan = plan_res["result"]
    shared = plan["sharedWith"]
    lines = [
        f"rollback of {args.thread} to {args.checkpoint} in {plan['root']}:",
        *_listing("restore", plan["restore"]),
        *_listing("delete", plan["delete"]),
    ]
    if not plan["restore"] and not plan["delete"]:
        lines.append("  no file changes")
    runs = ", ".join(str(n) for n in plan["rollsBackRuns"])
    lines.append(f"  runs rolled back: {runs or 'none'}")
    if shared:
        lines.append(
            f"  warning: {', '.join(shared)} use this work tree too: their files change as well "
            "(a fork made with `fork --worktree` has its own)"
        )
    if args.json:
        print("\n".join(lines), file=sys.stderr)
    else:
        print("\n".join(lines))
    if not args.yes:
        interactive = sys.stdin is not None and sys.stdin.isatty()
        if not interactive:
            print(
                f"t3orch rollback: refused: stdin is not a terminal to confirm on; nothing was "
                f"changed (run again with --yes to {args.checkpoint})",
                file=sys.stderr,
            )
            return 3
        question = "roll back?" if not shared else f"roll back ({', '.join(shared)} too)?"
        if not await trio.to_thread.run_sync(_confirmed, question):
            print("t3orch rollback: not confirmed; nothing was changed", file=sys.stderr)
            return 3
    res = await client.call(
        "thread.rollback",
        {
            "commandId": command_id(),
            **target,
            "allowSharedWorkTree": bool(shared),
            "expectWorkTree": plan["workTree"],
        },
    )
    if args.json:
        print_json(res)
        return 0
    r = res["result"]
    runs = ", ".join(str(n) for n in r["rolledBackRuns"]) or "none"
    print(
        f"{args.thread}: files restored to {r['checkpointId']} ({len(r['restored'])} written "
        f"back, {len(r['deleted'])} deleted); runs rolled back: {runs}"
    )
    print(
        f"undo: t3orch rollback {args.thread} --to {r['undoCheckpointId']} "
        "(the files as they were before this rollback)"
    )
    return 0
