"""``t3orch drill NAME``: crash-recovery drills on the embedded default, with a verdict.

Each drill runs the real daemon on a fresh state dir, breaks something the way
production breaks, and reports: committed events lost (must be 0), how long
the failure took to be recorded, how long until a live runtime served the
thread again, and processes left behind (must be 0).

* ``provider-crash`` — SIGKILL the provider's process group mid-turn.
* ``daemon-crash`` — serve a copy of the live state dir (the original's processes
  must be left alone), then SIGKILL a ``t3orch serve`` process mid-turn, start it
  again; what the provider started (its group, escaped helpers) must be gone.
* ``reap-resume`` — let the idle reaper release the runtime, then resume it; a
  canary fact told before the reap must reach the model after.
* ``live-restore`` — a streaming turn (and, on Codex and Claude, a pending approval) across a daemon
  restart (SIGTERM; SIGKILL with ``--kill``): the runtime is held, the next daemon
  reattaches, the turn completes with every delta once, the approval is answered after the
  restart and its command runs; nothing is left after ``stop-agents`` (issue 20).
* ``hang`` — SIGSTOP the provider mid-turn: the stall is reported, the run ends
  ``failed`` naming the stall and the runtime is killed, and the thread works
  again. Then a stand-in that closes its stdout mid-turn but keeps running: a
  dead runtime, killed, the run failed, and the next run served.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio

from t3orch import daemonlog
from t3orch.cli.environment import config_toml, provider_environment
from t3orch.cli.polling import until, wait_until
from t3orch.cli.served import rpc, served, state_rows
from t3orch.commands.specs import CreateThread
from t3orch.config import Config, DaemonConfig
from t3orch.daemon import Daemon, run_daemon
from t3orch.state import copy_state_dir, prepare_state_dir
from t3orch.store.open import open_reader

DRILLS = ("provider-crash", "daemon-crash", "reap-resume", "hang", "live-restore")
#: The stand-in's echo transcript, whose reply the live-restore drill streams slowly.
ECHO_TRANSCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "standin" / "codex_echo.ndjson"
SLOW = {"codex": "SLOW", "claude": "SLOW", "standin": "a slow turn"}
#: What makes each real provider's fake model stream a reply slowly, and the reply.
STREAMED = {
    "codex": ("DAWDLE", "dawdled: done"),
    "claude": ("STREAM: 16 4", "".join(f"word{i} " for i in range(16))),
}
#: What makes each real provider's fake model ask to run a command creating ``{made}``.
ASK_TO_RUN = {"codex": "RUN_SHELL: ESCALATE touch {made}", "claude": "RUN_BASH: touch {made}"}
STANDIN_SLOW = [sys.executable, "-m", "adapters.standin", "--slow-ms", "400"]
#: The stand-in's default transcript writes 5 frames before its first turn and 15 per
#: turn: frame 28 is in the middle of the second turn of a process.
STANDIN_CLOSES_STDOUT = [
    sys.executable,
    "-m",
    "adapters.standin",
    "--slow-ms",
    "50",
    "--close-stdout-after-frames",
    "28",
]
#: The hang drill's stall bounds (the defaults are 60 s and 600 s).
HANG_STALL_WARNING_S = 1.0
HANG_STALL_TIMEOUT_S = 2.0


@attrs.define
class Verdict:
    drill: str
    provider: str
    lost_events: int = 0
    detection_s: float | None = None
    live_again_s: float | None = None
    orphans: int = 0
    checks: dict[str, bool] = attrs.field(factory=dict)
    notes: list[str] = attrs.field(factory=list)

    @property
    def passed(self) -> bool:
        return self.lost_events == 0 and self.orphans == 0 and all(self.checks.values())


def _event_ids(state: Path) -> dict[int, str]:
    store = open_reader(state / "events.sqlite3")
    try:
        with store.snapshot():
            return {e.sequence: e.event_id for e in store.iter_events()}
    finally:
        store.close()


def _orphans(pids: list[int]) -> int:
    _, alive = psutil.wait_procs([p for p in (_proc(pid) for pid in pids) if p], timeout=5)
    return len([p for p in alive if p.status() != psutil.STATUS_ZOMBIE])


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


# -- in-process drills -------------------------------------------------------------


async def _thread(daemon: Daemon, kind: str, work: Path) -> str:
    res = await daemon.core.service.create_thread(
        CreateThread(provider=kind, cwd=str(work), title=f"drill {kind}")  # type: ignore[arg-type]
    )
    return str(res.result["threadId"])


def _row(daemon: Daemon, kind: str, id: str | None) -> Any:
    if id is None:
        return None
    with daemon.core.reader.snapshot():
        row = daemon.core.reader.row(kind, id)
    return None if row is None else row.decode()


async def _turn(daemon: Daemon, thread_id: str, text: str, within: float = 40.0) -> Any:
    res = await daemon.manager.send_message(thread_id, text)
    run_id = res.result["runId"]
    return await until(
        lambda: (
            (r := _row(daemon, "run", run_id)) is not None
            and r.status in ("completed", "failed", "interrupted", "cancelled")
            and r
        ),
        within,
    )


async def _start_slow(daemon: Daemon, thread_id: str, kind: str) -> tuple[str, int]:
    res = await daemon.manager.send_message(thread_id, SLOW[kind])
    run_id = res.result["runId"]
    await until(lambda: (r := _row(daemon, "run", run_id)) is not None and r.status == "running")
    runner = daemon.manager.runners[thread_id]
    assert runner.runtime is not None and runner.runtime.pid is not None
    return run_id, runner.runtime.pid


async def _in_process(name: str, kind: str, config: Config, state: Path, work: Path) -> Verdict:
    v = Verdict(name, kind)
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    async with trio.open_nursery() as nursery:
        daemon: Daemon = await nursery.start(run_daemon, config, state)
        if name == "hang":
            daemon.manager.stall_after_s = HANG_STALL_WARNING_S
            daemon.manager.stall_timeout_s = HANG_STALL_TIMEOUT_S
        tid = await _thread(daemon, kind, work)
        canary = "the canary is blue-42"
        first = await _turn(daemon, tid, f"remember: {canary}")
        v.checks["first turn completed"] = first.status == "completed"
        pids: list[int] = []
        if name == "reap-resume":
            runner = daemon.manager.runners[tid]
            session = runner.session_id
            pt_before = _row(
                daemon,
                "provider_thread",
                runner.binding.provider_thread_id if runner.binding else None,
            )
            reaped = await until(
                lambda: (
                    (s := _row(daemon, "provider_session", session)) is not None
                    and s.status == "stopped"
                    and s
                ),
                within=30,
            )
            v.checks["released by the reaper"] = reaped.status == "stopped"
            started = time.monotonic()
            again = await _turn(daemon, tid, "RECALL" if kind != "standin" else "again")
            v.live_again_s = time.monotonic() - started
            pt_after = _row(daemon, "provider_thread", pt_before.id)
            v.checks["same provider thread resumed"] = (
                again.status == "completed"
                and pt_after.native_thread_ref == pt_before.native_thread_ref
                and again.provider_thread_id == pt_before.id
            )
            if kind != "standin":
                with daemon.core.reader.snapshot():
                    texts = [
                        m.decode().text for m in daemon.core.reader.rows("message", thread_id=tid)
                    ]
                v.checks["canary reached the model after resume"] = canary in texts[-1]
            else:
                v.notes.append("the stand-in cannot prove history; run with codex or claude")
        else:
            run_id, pid = await _start_slow(daemon, tid, kind)
            pids.append(pid)
            runner = daemon.manager.runners[tid]
            session = runner.session_id
            before = {e.sequence: e.event_id for e in daemon.core.reader.iter_events()}
            t0 = time.monotonic()
            os.killpg(
                os.getpgid(pid), signal.SIGKILL if name == "provider-crash" else signal.SIGSTOP
            )
            await until(
                lambda: (
                    (s := _row(daemon, "provider_session", session)) is not None
                    and s.status in ("error", "stopped")
                ),
                within=30,
            )
            v.detection_s = time.monotonic() - t0
            failed = _row(daemon, "run", run_id)
            v.checks["interrupted run ended failed"] = failed.status == "failed"
            again = await _turn(daemon, tid, "after recovery")
            v.live_again_s = time.monotonic() - t0
            v.checks["next run completed on a new runtime"] = again.status == "completed"
            after = {e.sequence: e.event_id for e in daemon.core.reader.iter_events()}
            v.lost_events = sum(1 for s, e in before.items() if after.get(s) != e)
            if name == "hang":
                codes = {
                    getattr(e.payload, "code", "")
                    for e in daemon.core.reader.iter_events()
                    if e.type == "provider.diagnostic"
                }
                v.checks["stall reported"] = "turn_stalled" in codes
                v.checks["the run ended naming the stall, within the stall timeout"] = (
                    "stall_timeout_s" in (failed.last_error or "")
                    and v.detection_s < HANG_STALL_TIMEOUT_S + 5
                )
        await daemon.shutdown()
        nursery.cancel_scope.cancel()
    if name == "hang":
        await _closed_stdout(v, config, state, work)
    left = [
        p.pid for p in psutil.Process().children(recursive=True) if p.pid not in children_before
    ]
    v.orphans = _orphans(left + pids)
    return v


async def _closed_stdout(v: Verdict, config: Config, state: Path, work: Path) -> None:
    """A stand-in that closes its stdout mid-turn and lives on: a dead runtime, not a hang."""
    standin = attrs.evolve(config.providers.standin, command=STANDIN_CLOSES_STDOUT)
    config = attrs.evolve(config, providers=attrs.evolve(config.providers, standin=standin))
    async with trio.open_nursery() as nursery:
        daemon: Daemon = await nursery.start(run_daemon, config, state)
        tid = await _thread(daemon, "standin", work)
        first = await _turn(daemon, tid, "first")
        runner = daemon.manager.runners[tid]
        assert runner.runtime is not None and runner.runtime.pid is not None
        pid = runner.runtime.pid
        t0 = time.monotonic()
        closed = await _turn(daemon, tid, "the turn whose stdout closes")  # frames 20-35
        took = time.monotonic() - t0
        again = await _turn(daemon, tid, "after the closed stdout")
        v.checks["closed stdout: the run ended failed, the process killed"] = (
            first.status == "completed" and closed.status == "failed" and _proc(pid) is None
        )
        v.checks["closed stdout: the next run completed on a new runtime"] = (
            again.status == "completed"
        )
        v.notes.append(f"closed stdout (stand-in): the run ended {took:.2f}s after it was sent")
        await daemon.shutdown()
        nursery.cancel_scope.cancel()
    v.orphans += _orphans([pid])


# -- the daemon-crash drill (a real `t3orch serve` process) ---------------------------


def _descendants(pids: list[int]) -> list[int]:
    """What the providers started: their process groups and every descendant, wherever."""
    out: set[int] = set()
    for pid in pids:
        proc = _proc(pid)
        if proc is None:
            continue
        with contextlib.suppress(psutil.Error):
            out.update(c.pid for c in proc.children(recursive=True))
        for other in psutil.process_iter():
            with contextlib.suppress(OSError):
                if other.pid != pid and os.getpgid(other.pid) == pid:
                    out.add(other.pid)
    return sorted(out)


def _copy_leaves_alone(
    state: Path, config_path: Path, tmp: Path, pids: list[int], v: Verdict
) -> None:
    """A daemon on a copy of the live state dir must not touch the original's processes."""
    copy = tmp / "state-copy"
    copy_state_dir(state, copy)
    with served(copy, config_path, tmp / "notify-copy.sock") as daemons:
        proc = daemons.start()
        daemons.ready(proc)
        alive = [pid for pid in pids if (p := _proc(pid)) and p.status() != psutil.STATUS_ZOMBIE]
        v.checks["a daemon on a copy of the state dir left the running processes alone"] = (
            alive == pids
        )
        status = json.loads((copy / "daemon.json").read_text())
        v.checks["the copy's daemon said it runs on a copy"] = (
            status["reconciled"].get("copy_of_live_state_dir") == 1
        )
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _daemon_crash(kind: str, config: Config, state: Path, work: Path, tmp: Path) -> Verdict:
    v = Verdict("daemon-crash", kind)
    config_path = tmp / "t3orch.toml"
    # The stand-in leaves helpers behind as a provider's tool calls do: one in its
    # process group, one in a session of its own.
    standin = [*STANDIN_SLOW, "--helpers-pidfile", str(tmp / "standin-helpers")]
    # A daemon crash that ends its providers (no holders): the live-restore drill is the other.
    config_path.write_text(
        "[daemon]\nreattach_grace_s = 0\n" + config_toml(config, standin_command=standin)
    )
    with served(state, config_path, tmp / "notify.sock") as daemons:
        proc = daemons.start()
        daemons.ready(proc)
        tid = rpc(state, "thread.create", {"commandId": "d1", "provider": kind, "cwd": str(work)})[
            "result"
        ]["threadId"]
        rpc(state, "run.send", {"commandId": "d2", "threadId": tid, "text": "hello"})
        wait_until(lambda: any(r.status == "completed" for r in state_rows(state, "run")), 40)
        rpc(state, "run.send", {"commandId": "d3", "threadId": tid, "text": SLOW[kind]})
        wait_until(lambda: any(r.status == "running" for r in state_rows(state, "run")), 30)
        provider_pids = [s.pid for s in state_rows(state, "provider_session") if s.pid]
        helpers = _descendants(provider_pids)
        v.notes.append(f"{len(helpers)} process(es) started by the provider before the crash")
        _copy_leaves_alone(state, config_path, tmp, provider_pids + helpers, v)
        before = _event_ids(state)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        v.orphans = _orphans(provider_pids)
        v.detection_s = time.monotonic() - t0  # until every provider of the dead daemon is gone
        proc2 = daemons.start()
        ready_s = daemons.ready(proc2)
        v.notes.append(f"restart to READY {ready_s:.2f}s")
        # What the providers started outlives them; the restart's sweep must end it.
        v.orphans += _orphans(helpers)
        after = _event_ids(state)
        v.lost_events = sum(1 for s, e in before.items() if after.get(s) != e)
        runs = state_rows(state, "run")
        v.checks["in-flight run settled as interrupted before READY"] = any(
            r.status == "interrupted" for r in runs
        )
        v.checks["the run says the daemon was lost (daemon_restart)"] = any(
            r.status == "interrupted" and r.last_error == "daemon_restart" for r in runs
        )
        rpc(state, "run.send", {"commandId": "d4", "threadId": tid, "text": "after the crash"})
        wait_until(lambda: sum(r.status == "completed" for r in state_rows(state, "run")) >= 2, 40)
        v.live_again_s = time.monotonic() - t0
        v.checks["next run completed on a new daemon"] = True
        live = [s.pid for s in state_rows(state, "provider_session") if s.pid]
        helpers2 = _descendants(live)
        proc2.send_signal(signal.SIGTERM)
        v.checks["graceful stop"] = proc2.wait(timeout=30) == 0
        v.orphans += _orphans(live + helpers2)
    return v


def long_reply(tmp: Path, words: list[str], every_ms: float = 40.0) -> Path:
    """The stand-in's echo transcript with its reply streamed as ``words``, one delta each."""
    out = []
    text = "".join(words)
    deltas_done = False
    for line in ECHO_TRANSCRIPT.read_text().splitlines():
        step = json.loads(line)
        frame = step.get("frame") or {}
        if frame.get("method") == "item/agentMessage/delta":
            if not deltas_done:
                deltas_done = True
                for word in words:
                    delta = json.loads(line)
                    delta["afterMs"] = every_ms
                    delta["frame"]["params"]["delta"] = word
                    out.append(json.dumps(delta))
            continue
        out.append(line.replace('"text":"ack: hello"', f'"text":{json.dumps(text)}'))
    path = tmp / "long_reply.ndjson"
    path.write_text("\n".join(out) + "\n")
    return path


def _journal_coverage(state: Path) -> tuple[int, int]:
    """(frames the holders journaled, frames of them the log has committed)."""
    from t3orch.daemon import journal_coverage

    # A shared process's holder has an offset per thread on it: the furthest covers it.
    committed: dict[str, int] = {}
    for j in state_rows(state, "journal"):
        committed[j.holder_id] = max(committed.get(j.holder_id, 0), j.offset)
    return journal_coverage(state, committed)


def _live_restore(
    kind: str, config: Config, state: Path, work: Path, tmp: Path, *, kill: bool
) -> Verdict:
    from t3orch.daemon import stop_agents

    how = "SIGKILL" if kill else "SIGTERM"
    v = Verdict("live-restore", kind)
    v.notes.append(f"the daemon is restarted by {how} mid-stream")
    config_path = tmp / "t3orch.toml"
    if kind == "standin":
        words = [f"word{i} " for i in range(80)]
        transcript = long_reply(tmp, words)
        prompt, expected = "hello", "".join(words)
        standin = [sys.executable, "-m", "adapters.standin"]
        toml = config_toml(config, standin_command=standin)
        toml += f"transcript = {json.dumps(str(transcript))}\n"
    else:
        prompt, expected = STREAMED[kind]
        toml = config_toml(config)
    config_path.write_text("[daemon]\nreattach_grace_s = 120\n" + toml)
    made = work / "approved-after-restart.txt"
    held_pids: list[int] = []
    try:
        with served(state, config_path, tmp / "notify.sock") as daemons:
            proc = daemons.start()
            daemons.ready(proc)

            def thread(command_id: str) -> str:
                params = {"commandId": command_id, "provider": kind, "cwd": str(work)}
                return str(rpc(state, "thread.create", params)["result"]["threadId"])

            streaming = thread("l1")
            asking = thread("l2") if kind in ASK_TO_RUN else None
            if asking is not None:
                text = ASK_TO_RUN[kind].format(made=made)
                rpc(state, "run.send", {"commandId": "l3", "threadId": asking, "text": text})
                wait_until(
                    lambda: [
                        r for r in state_rows(state, "runtime_request") if r.status == "pending"
                    ],
                    60,
                )
            rpc(state, "run.send", {"commandId": "l4", "threadId": streaming, "text": prompt})
            # The streaming thread's own delta (the asking thread streams a few words too).
            wait_until(
                lambda: any(
                    e.type == "turn_item.delta" and e.thread_id == streaming for e in _events(state)
                ),
                60,
            )
            sessions = [s for s in state_rows(state, "provider_session") if s.holder is not None]
            # Threads on one shared process name the same pids (issue 21).
            held_pids = sorted({p for s in sessions for p in (s.pid, s.holder.pid) if p})
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            proc.wait(timeout=60)
            v.checks["the providers outlived the daemon under their holders"] = bool(sessions) and (
                _orphans(held_pids) == len(held_pids)
            )
            t0 = time.monotonic()
            proc2 = daemons.start()
            ready_s = daemons.ready(proc2)
            v.detection_s = ready_s
            v.notes.append(f"daemon start to reattached (READY): {ready_s:.3f}s")
            if asking is not None:
                (pending,) = [
                    r for r in state_rows(state, "runtime_request") if r.status == "pending"
                ]
                rpc(
                    state,
                    "request.respond",
                    {"commandId": "l5", "requestId": pending.id, "decision": "accept"},
                )
            wait_until(lambda: all(r.status == "completed" for r in state_rows(state, "run")), 90)
            v.live_again_s = time.monotonic() - t0
            v.checks["turn completed"] = True
            deltas = "".join(
                e.payload.text
                for e in _events(state)
                if e.type == "turn_item.delta" and e.thread_id == streaming
            )
            missing = max(0, len(expected) - len(deltas))
            v.checks[
                "duplicate or missing deltas: 0 (the text equals the model's, each word once)"
            ] = deltas == expected
            v.notes.append(
                f"streamed text: {len(deltas)} of {len(expected)} characters ({missing} missing)"
            )
            if asking is not None:
                v.checks["approval answered after the restart, its command ran"] = made.exists()
            time.sleep(0.5)  # the coalescer's window: the last offsets commit
            journaled, covered = _journal_coverage(state)
            v.notes.append(f"provider frames journaled {journaled}, ingested {covered}")
            v.checks["provider frames journaled = ingested"] = (
                journaled == covered and journaled > 0
            )
            before = _event_ids(state)
            proc2.send_signal(signal.SIGTERM)
            v.checks["graceful stop"] = proc2.wait(timeout=60) == 0
            after = _event_ids(state)
            v.lost_events = sum(1 for s, e in before.items() if after.get(s) != e)
            descendants = _descendants(held_pids)
            stopped, left = stop_agents(state)
            v.notes.append(f"stop-agents stopped {len(stopped)} holder(s)")
            v.orphans = _orphans(held_pids + descendants) + len(left)
    finally:
        stop_agents(state)
    return v


def _events(state: Path) -> list[Any]:
    store = open_reader(state / "events.sqlite3")
    try:
        with store.snapshot():
            return list(store.iter_events())
    finally:
        store.close()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _print(v: Verdict, as_json: bool) -> None:
    if as_json:
        # camelCase like every other --json (``lostEvents``, ``detectionS``); the
        # checks keep their sentences as keys: they are data, not field names.
        doc = {_camel(k): value for k, value in attrs.asdict(v).items()}
        print(json.dumps({**doc, "passed": v.passed}))
        return

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}s"

    print(f"drill {v.drill} ({v.provider}): {'PASS' if v.passed else 'FAIL'}")
    print(f"  committed events lost: {v.lost_events}")
    if v.drill == "live-restore":
        print(
            f"  daemon start to reattached: {fmt(v.detection_s)}; "
            f"turn completed after: {fmt(v.live_again_s)}"
        )
    else:
        print(f"  detection: {fmt(v.detection_s)}; live runtime again after: {fmt(v.live_again_s)}")
    print(f"  processes left behind: {v.orphans}")
    for check, ok in v.checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {check}")
    for note in v.notes:
        print(f"  note: {note}")


def cmd_drill(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="t3orch-drill-") as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=False)
        state = Path(args.state_dir) if args.state_dir else root / "state"
        want = [args.provider] if args.provider else None
        daemon_cfg = DaemonConfig(
            synchronous="FULL",
            idle_timeout_s=1.0 if args.name == "reap-resume" else 1800.0,
            # These drills are about providers that die with their daemon: no holders.
            reattach_grace_s=0.0,
        )
        with provider_environment(work, root, want, daemon=daemon_cfg) as (config, kinds):
            kind = kinds[0]
            if kind == "standin":
                config = attrs.evolve(
                    config,
                    providers=attrs.evolve(
                        config.providers,
                        standin=attrs.evolve(config.providers.standin, command=STANDIN_SLOW),
                    ),
                )
            if args.name == "live-restore":
                verdict = _live_restore(kind, config, state, work, root, kill=args.kill)
            elif args.name == "daemon-crash":
                verdict = _daemon_crash(kind, config, state, work, root)
            else:
                prepare_state_dir(state, create=True)
                with daemonlog.logging_to(state, stderr=False):
                    verdict = trio.run(_in_process, args.name, kind, config, state, work)
    _print(verdict, args.json)
    return 0 if verdict.passed else 1
