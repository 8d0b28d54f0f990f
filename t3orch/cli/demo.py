"""``t3orch demo``: the daemon, end to end, on a fresh state dir.

It runs the real daemon in-process (store, reconciliation, session manager,
API) with the real provider binaries when they are installed, each talking to
a small fake model server on 127.0.0.1 (nothing leaves the machine), and the
stand-in provider otherwise. Per provider it holds a conversation with an
approval the demo answers, then SIGKILLs the provider mid-turn and shows the
recovery: the failure is recorded at once, and the next message reopens a
runtime that resumes the same provider thread with its history.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import attrs
import msgspec
import psutil
import trio

from t3orch import daemonlog
from t3orch.cli.environment import provider_environment
from t3orch.cli.polling import until
from t3orch.commands.specs import CreateThread
from t3orch.daemon import Daemon, run_daemon
from t3orch.events import TurnItemUpserted
from t3orch.state import prepare_state_dir

DEADLINE_S = 50.0


@attrs.define
class ProviderPlan:
    kind: str
    hello: str
    approval: str | None
    slow: str
    recall: str
    created_file: str | None


PLANS = {
    "codex": ProviderPlan(
        "codex",
        "hello from the demo",
        "RUN_SHELL: touch demo-codex.txt ESCALATE",
        "SLOW",
        "RECALL",
        "demo-codex.txt",
    ),
    "claude": ProviderPlan(
        "claude",
        "hello from the demo",
        "RUN_BASH: touch demo-claude.txt && echo created",
        "SLOW",
        "RECALL",
        "demo-claude.txt",
    ),
    "standin": ProviderPlan(
        "standin", "hello from the demo", None, "a turn to interrupt", "and after recovery", None
    ),
}


@attrs.define
class Outcome:
    provider: str
    runs: dict[str, int] = attrs.field(factory=dict)
    items: int = 0
    requests: int = 0
    detect_s: float | None = None
    recovery_s: float | None = None
    resumed_history: bool | None = None
    notes: list[str] = attrs.field(factory=list)


def _row(daemon: Daemon, kind: str, id: str) -> Any:
    with daemon.core.reader.snapshot():
        row = daemon.core.reader.row(kind, id)
    return None if row is None else row.decode()


async def _send(daemon: Daemon, thread_id: str, text: str) -> str:
    res = await daemon.manager.send_message(thread_id, text, command_id=None)
    return str(res.result["runId"])


async def _wait_run(daemon: Daemon, run_id: str, within: float = 30.0) -> Any:
    return await until(
        lambda: (
            (r := _row(daemon, "run", run_id)) is not None
            and r.status in ("completed", "failed", "interrupted", "cancelled")
            and r
        ),
        within,
    )


async def _print_items(daemon: Daemon) -> None:
    """Live turn items, as a terminal view would render them (completed ones)."""
    sub = daemon.core.broadcast.subscribe(capacity=65536)
    try:
        async for env in sub:
            p = env.payload
            if isinstance(p, TurnItemUpserted) and p.item.status != "running" and not p.item.hidden:
                item = msgspec.to_builtins(p.item)
                text = item.get("text") or item.get("input") or item.get("summary") or ""
                text = " ".join(str(text).split())[:72]
                print(f"    · {item['type']:<18} {item['status']:<11} {text}", flush=True)
    finally:
        sub.close()


async def _conversation(daemon: Daemon, work: Path, plan: ProviderPlan) -> Outcome:
    out = Outcome(plan.kind)
    created = await daemon.core.service.create_thread(
        CreateThread(provider=plan.kind, cwd=str(work), title=f"{plan.kind} demo"),  # type: ignore[arg-type]
        # Fresh per demo: a --state-dir kept from an earlier demo must get new threads,
        # not the old ones back (an idempotent replay) with their work dir long gone.
        command_id=f"demo-{plan.kind}-{uuid.uuid4().hex}",
    )
    tid = created.result["threadId"]
    print(f"\n== {plan.kind}: thread {tid}")
    run = await _wait_run(daemon, await _send(daemon, tid, plan.hello))
    print(f"  run 1 {run.status}")
    if plan.approval:
        run_id = await _send(daemon, tid, plan.approval)
        req = await until(lambda: _pending(daemon, tid))
        print(f"  approval requested ({req.kind}): answering accept")
        await daemon.manager.respond(req.id, "accept", command_id=None)
        out.requests += 1
        run = await _wait_run(daemon, run_id)
        made = plan.created_file and (work / plan.created_file).exists()
        print(f"  run 2 {run.status}; {plan.created_file} {'exists' if made else 'MISSING'}")
        if not made:
            out.notes.append(f"{plan.created_file} was not created")
    # Kill the provider mid-turn and recover.
    run_id = await _send(daemon, tid, plan.slow)
    runner = await until(lambda: daemon.manager.runners.get(tid))
    await until(lambda: (r := _row(daemon, "run", run_id)) is not None and r.status == "running")
    session_id = runner.session_id
    pid = runner.runtime.pid if runner.runtime else None
    if pid is None:
        out.notes.append("no provider pid to kill")
        return out
    killed_at = time.monotonic()
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    await until(
        lambda: (
            (s := _row(daemon, "provider_session", session_id)) is not None and s.status == "error"
        )
    )
    out.detect_s = time.monotonic() - killed_at
    run = _row(daemon, "run", run_id)
    print(
        f"  provider SIGKILLed mid-turn: run {run.status} ({run.last_error}); "
        f"detected in {out.detect_s * 1000:.0f} ms"
    )
    recall_run = await _send(daemon, tid, plan.recall)
    run = await _wait_run(daemon, recall_run, within=40)
    out.recovery_s = time.monotonic() - killed_at
    reply = _last_assistant_text(daemon, tid)
    out.resumed_history = plan.hello in reply if plan.kind != "standin" else None
    print(
        f"  next message on a new runtime: run {run.status} in {out.recovery_s:.2f}s after the kill"
        + (
            ""
            if out.resumed_history is None
            else f"; the model saw the earlier history: {out.resumed_history}"
        )
    )
    with daemon.core.reader.snapshot():
        runs = [r.decode() for r in daemon.core.reader.rows("run", thread_id=tid)]
        out.items = len(daemon.core.reader.rows("turn_item", thread_id=tid))
    for r in runs:
        out.runs[r.status] = out.runs.get(r.status, 0) + 1
    return out


def _pending(daemon: Daemon, thread_id: str) -> Any:
    with daemon.core.reader.snapshot():
        rows = daemon.core.reader.rows_by_status("runtime_request", ("pending",))
    return next((r.decode() for r in rows if r.thread_id == thread_id), None)


def _last_assistant_text(daemon: Daemon, thread_id: str) -> str:
    with daemon.core.reader.snapshot():
        msgs = [m.decode() for m in daemon.core.reader.rows("message", thread_id=thread_id)]
    texts = [m.text for m in msgs if m.role == "assistant"]
    return texts[-1] if texts else ""


async def _demo(state_dir: Path, work: Path, tmp: Path) -> int:
    started = time.monotonic()
    with provider_environment(work, tmp) as (config, kinds):
        if kinds == ["standin"]:
            print(
                "no provider binary found: running the stand-in provider "
                "(./scripts/test installs the pinned codex and claude)"
            )
        outcomes: list[Outcome] = []
        with trio.fail_after(DEADLINE_S):
            async with trio.open_nursery() as nursery:
                daemon: Daemon = await nursery.start(run_daemon, config, state_dir)
                print(
                    f"daemon up on {state_dir} (api port {daemon.port}); "
                    f"providers: {', '.join(kinds)}"
                )
                nursery.start_soon(_print_items, daemon)
                for kind in kinds:
                    outcomes.append(await _conversation(daemon, work, PLANS[kind]))
                await daemon.shutdown()
                nursery.cancel_scope.cancel()
    leftovers = [p.pid for p in psutil.Process().children(recursive=True)]
    print("\nsummary")
    ok = not leftovers
    for o in outcomes:
        good = (
            o.runs.get("completed", 0) >= 2
            and o.runs.get("failed", 0) == 1
            and not o.notes
            and o.resumed_history is not False
        )
        ok = ok and good
        print(
            f"  {o.provider:<8} runs {o.runs}, items {o.items}, approvals answered {o.requests}, "
            f"detection {o.detect_s * 1000 if o.detect_s else float('nan'):.0f} ms, "
            f"recovery {o.recovery_s or float('nan'):.2f} s"
            + (f", notes: {'; '.join(o.notes)}" if o.notes else "")
        )
    print(
        f"  processes left behind: {len(leftovers)}; total {time.monotonic() - started:.1f} s; "
        f"{'OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """The log goes to ``--state-dir`` when given (kept for ``events`` and ``check``)."""
    with tempfile.TemporaryDirectory(prefix="t3orch-demo-") as tmp:
        root = Path(tmp)
        state_dir = Path(args.state_dir).absolute() if args.state_dir else root / "state"
        work = root / "work"
        work.mkdir()
        # Codex trusts (and checkpoints will need) a git work tree.
        subprocess.run(["git", "init", "-q", str(work)], check=False)
        prepare_state_dir(state_dir, create=True)
        code = 1
        try:
            with daemonlog.logging_to(state_dir, stderr=False):
                code = trio.run(_demo, state_dir, work, root)
        except* trio.TooSlowError:
            print(f"t3orch demo: did not finish within {DEADLINE_S:.0f} s", file=sys.stderr)
        if args.state_dir:
            print(f"the demo's log stays in {state_dir} (t3orch events / check --state-dir …)")
        return code
