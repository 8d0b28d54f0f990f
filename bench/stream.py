"""Live streaming and turn overhead: the providers read directly vs through t3orch.

Real Codex (``codex app-server``) and real Claude (the ``claude`` CLI in stream-json
mode) against the loopback fake model servers (``fixtures/fakes/``), whose reply to
``STREAM: 200 50`` is 200 one-word text deltas at 50 Hz. Each provider is driven

* **direct**: its own protocol over its stdio, by a minimal client in this script;
* **t3orch**: a running ``t3orch serve`` (a child process, ``synchronous = FULL``
  as by default, or ``--synchronous NORMAL``) over the Unix socket API: ``subscribe
  threadDetail``, then ``run.send``;
  text is what a client shows from ``liveText`` frames and committed events
  (``ThreadView``, as ``t3orch watch`` does);
* **floor** (``--floor``): through ``bench/relay.py``, the least a durable relay in
  between must do (decode each line, commit and fsync a turn's start and end).

Printed side by side, per provider: first text after the send (median of
``--rounds``), text updates a second at the client, the mean arrival of each word
after the send and its mean latency after the fake model wrote it (the fakes pace a
stream on a schedule, as a model server does, and note each write), the stored
``turn_item.delta`` rows of the reply (and per second), and the median time of
``--turns`` plain short turns (``hello``), each a send until the turn's end
(direct: ``turn/completed`` / ``result``; t3orch: the run's ``completed`` event), with
the CPU a plain turn costs: the daemon's, the provider's and what of it the provider
waited for a CPU (its threads' ``schedstat``), and every thread's on the machine.
Targets (issue 17): first text ≤ direct + 10 ms, ≥ 40 updates/s, word arrival ≤
direct + 10 ms, ≤ 4 stored rows per item per second, plain turn ≤ 1.05 × direct.

Run: ``python bench/stream.py [--providers codex,claude] [--rounds 3] [--turns 20] [--floor]
[--json]``
(``export T3ORCH_CODEX_BIN=$(scripts/install-codex | tail -n1)``; claude from
``claude-agent-sdk`` or ``T3ORCH_CLAUDE_BIN``). Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))

from fixtures.fakes.claude_env import claude_argv  # noqa: E402
from fixtures.fakes.wordstream import TEXT_WRITTEN  # noqa: E402
from t3orch import timeline  # noqa: E402
from t3orch.cli.client import ApiClient, ThreadView, connect  # noqa: E402
from t3orch.cli.environment import config_toml, provider_environment  # noqa: E402
from t3orch.cli.served import serve_daemon  # noqa: E402
from t3orch.config import Config, load_config  # noqa: E402
from t3orch.daemon import stop_agents  # noqa: E402

STREAM_PROMPT = "STREAM: 200 50"
WORDS = 200
TIMEOUT_S = 60.0
Frame = dict[str, Any]


class Trace:
    """What a client saw of one streamed reply: (time after the send, text length)."""

    def __init__(self) -> None:
        self.sent = time.monotonic()
        self.updates: list[tuple[float, int]] = []

    def shown(self, length: int) -> None:
        if not self.updates or length > self.updates[-1][1]:
            self.updates.append((time.monotonic() - self.sent, length))

    def figures(self, text: str) -> dict[str, float]:
        times = [t for t, _ in self.updates]
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        # Each word arrives with the first update that shows all of it.
        ends, end = [], 0
        for word in text.split(" "):
            if word:
                ends.append(end + len(word))
            end += len(word) + 1
        arrivals, i = [], 0
        for end in ends:
            while i < len(self.updates) and self.updates[i][1] < end:
                i += 1
            if i < len(self.updates):
                arrivals.append(self.updates[i][0])
        # The fake model noted when it wrote each word (this process's clock): a word's
        # latency is from there to the client, whatever the model's own pace was.
        written = TEXT_WRITTEN.since(self.sent)[: len(arrivals)]
        latency = [self.sent + a - w for a, w in zip(arrivals, written, strict=False)]
        return {
            "first_ms": times[0] * 1000 if times else float("nan"),
            "updates_per_s": (len(times) - 1) / span if span else 0.0,
            "word_ms": statistics.fmean(arrivals) * 1000 if arrivals else float("nan"),
            "latency_ms": (
                statistics.fmean(latency) * 1000
                if latency and len(written) == len(arrivals)
                else float("nan")
            ),
        }


# --- direct clients -----------------------------------------------------------------


class LineProcess:
    """A provider on stdio: JSON lines in, JSON lines read on a thread; or, with
    ``relay``, the same through ``bench/relay.py`` logging to that file (the floor)."""

    def __init__(
        self, argv: list[str], env: dict[str, str], cwd: Path, relay: Path | None = None
    ) -> None:
        if relay is not None:
            argv = [sys.executable, str(REPO / "bench" / "relay.py"), str(relay), "--", *argv]
        self.relayed = relay is not None
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.inbox: queue.Queue[Frame | None] = queue.Queue()
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        self._ids = 0

    def provider_pids(self) -> list[int]:
        """The provider's process: this child, or the relay's child."""
        if not self.relayed:
            return [self.proc.pid]
        # Listed by the thread that forked it (trio spawns from a worker thread).
        tasks = Path(f"/proc/{self.proc.pid}/task").glob("*/children")
        return [int(pid) for task in tasks for pid in task.read_text().split()]

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            with suppress(json.JSONDecodeError):
                frame = json.loads(line)
                if isinstance(frame, dict):
                    self.inbox.put(frame)
        self.inbox.put(None)

    def send(self, frame: Frame) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()

    def until(self, pred: Callable[[Frame], bool], on: Callable[[Frame], None] = print) -> Frame:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            frame = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            if frame is None:
                raise RuntimeError("the provider closed its stdout")
            if pred(frame):
                return frame
            on(frame)

    def close(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def _ignore(frame: Frame) -> None:
    pass


class DirectCodex:
    def __init__(self, config: Config, work: Path, relay: Path | None = None) -> None:
        c = config.providers.codex
        assert c.command is not None
        self.p = LineProcess([*c.command, "app-server"], {**os.environ, **c.env}, work, relay)
        self.p.send({"id": 0, "method": "initialize", "params": {"clientInfo": _CLIENT}})
        self.p.until(lambda f: f.get("id") == 0, _ignore)
        self.p.send({"method": "initialized"})
        # As t3orch's adapter opens it (runtime mode approval-required).
        start = {"cwd": str(work), "approvalPolicy": "on-request", "sandbox": "workspace-write"}
        if c.model:
            start["model"] = c.model
        self.p.send({"id": 1, "method": "thread/start", "params": start})
        self.thread = self.p.until(lambda f: f.get("id") == 1, _ignore)["result"]["thread"]["id"]
        self.next_id = 2

    def turn(self, text: str, trace: Trace | None = None) -> float:
        self.next_id += 1
        params = {"threadId": self.thread, "input": [{"type": "text", "text": text}]}
        start = time.monotonic()
        if trace is not None:
            trace.sent = start
        self.p.send({"id": self.next_id, "method": "turn/start", "params": params})
        shown = 0

        def on(frame: Frame) -> None:
            nonlocal shown
            if frame.get("method") == "item/agentMessage/delta" and trace is not None:
                shown += len(frame["params"]["delta"])
                trace.shown(shown)

        self.p.until(lambda f: f.get("method") == "turn/completed", on)
        return time.monotonic() - start

    def close(self) -> None:
        self.p.close()


_CLIENT = {"name": "t3orch-bench", "title": "t3orch bench", "version": "0"}


class DirectClaude:
    def __init__(self, config: Config, work: Path, relay: Path | None = None) -> None:
        c = config.providers.claude
        assert c.command is not None
        argv = claude_argv(c.command[0], model=c.model or "claude-sonnet-4-5")
        self.p = LineProcess(argv, dict(c.env), work, relay)
        self.p.send(
            {
                "type": "control_request",
                "request_id": "init",
                "request": {"subtype": "initialize", "hooks": None},
            }
        )
        self.p.until(
            lambda f: (
                f.get("type") == "control_response"
                and f.get("response", {}).get("request_id") == "init"
            ),
            _ignore,
        )

    def turn(self, text: str, trace: Trace | None = None) -> float:
        start = time.monotonic()
        if trace is not None:
            trace.sent = start
        message = {"role": "user", "content": text}
        self.p.send(
            {"type": "user", "session_id": "", "parent_tool_use_id": None, "message": message}
        )
        shown = 0

        def on(frame: Frame) -> None:
            nonlocal shown
            event = frame.get("event") if frame.get("type") == "stream_event" else None
            delta = event.get("delta") if isinstance(event, dict) else None
            if isinstance(delta, dict) and delta.get("type") == "text_delta" and trace:
                shown += len(delta.get("text", ""))
                trace.shown(shown)

        self.p.until(lambda f: f.get("type") == "result", on)
        return time.monotonic() - start

    def close(self) -> None:
        self.p.close()


# --- through t3orch ----------------------------------------------------------------


class ThroughT3orch:
    def __init__(self, client: ApiClient, thread: str, view: ThreadView) -> None:
        self.client = client
        self.thread = thread
        self.view = view
        self.n = 0
        #: Each plain turn's client stamps: (send, reply, completed), monotonic.
        self.spans: list[tuple[float, float, float]] = []

    @classmethod
    async def open(cls, client: ApiClient, provider: str, work: Path) -> ThroughT3orch:
        made = await client.call(
            "thread.create",
            {
                "commandId": f"bench-{provider}-{time.time_ns()}",
                "provider": provider,
                "cwd": str(work),
            },
        )
        thread = made["result"]["threadId"]
        _, snap = await client.subscribe("threadDetail", thread)
        return cls(client, thread, ThreadView(snap))

    async def turn(self, text: str, trace: Trace | None = None) -> tuple[float, str]:
        """(seconds until the run completed, the reply's item id)."""
        self.n += 1
        start = time.monotonic()
        if trace is not None:
            trace.sent = start
        sent = await self.client.call(
            "run.send",
            {"commandId": f"bench-{self.thread}-{self.n}", "threadId": self.thread, "text": text},
        )
        replied = time.monotonic()
        run = sent["result"]["runId"]
        # The reply is an item new to this turn: a late live piece of an earlier turn's
        # item (best effort, on a lane of its own) is not it.
        earlier = set(self.view.items)
        item: str | None = None
        while True:
            note = await self.client.notification()
            params = note["params"]
            if note["method"] == "liveText":
                self.view.apply_live(params)
                if item is None and params["itemId"] not in earlier:
                    item = params["itemId"]
            elif note["method"] == "event":
                event = params["event"]
                touched = self.view.apply(event, params.get("unchanged", ()))
                if (
                    item is None
                    and touched is not None
                    and touched["type"] == "assistant_message"
                    and touched.get("runId") == run
                ):
                    item = touched["id"]
                if event["type"] == "run.upserted" and event["payload"]["run"]["id"] == run:
                    status = event["payload"]["run"]["status"]
                    if status in ("completed", "failed", "interrupted"):
                        if status != "completed":
                            raise RuntimeError(f"run {run} ended {status}")
                        end = time.monotonic()
                        self.spans.append((start, replied, end))
                        return end - start, item or ""
            elif note["method"] == "resync":
                raise RuntimeError("the bench client fell behind (resync)")
            if trace is not None and item is not None:
                trace.shown(len(self.view.shown_text(item)))

    async def stored_deltas(self, item: str) -> int:
        after, count = 0, 0
        while True:
            page = await self.client.call("events.read", {"afterSequence": after, "limit": 5000})
            events = page["events"]
            if not events:
                return count
            count += sum(
                1
                for e in events
                if e["type"] == "turn_item.delta" and e["payload"]["itemId"] == item
            )
            after = events[-1]["sequence"]


# --- the run -----------------------------------------------------------------------


async def _compare(
    kind: str,
    config: Config,
    socket: Path,
    work: Path,
    rounds: int,
    turns: int,
    timeline_file: Path | None,
    daemon_pid: int,
    floor: Path | None,
) -> dict[str, dict[str, Any]]:
    """Both ways (three with ``floor``: through ``bench/relay.py`` logging there), turn
    by turn in turn: the machine's load falls on all alike."""
    driver = DirectCodex if kind == "codex" else DirectClaude
    direct = driver(config, work)
    relayed = driver(config, work, floor) if floor is not None else None
    try:
        async with connect(socket) as client:
            t = await ThroughT3orch.open(client, kind, work)
            # Warm: a first turn pays for the process's start.
            direct.turn("hello")
            await t.turn("hello")
            if relayed is not None:
                relayed.turn("hello")
            d_streamed, t_streamed, f_streamed, rows, seconds = [], [], [], [], []
            for _ in range(rounds):
                trace = Trace()
                direct.turn(STREAM_PROMPT, trace)
                d_streamed.append(trace.figures(_reply_text()))
                if relayed is not None:
                    trace = Trace()
                    relayed.turn(STREAM_PROMPT, trace)
                    f_streamed.append(trace.figures(_reply_text()))
                trace = Trace()
                _, item = await t.turn(STREAM_PROMPT, trace)
                t_streamed.append(trace.figures(_reply_text()))
                rows.append(await t.stored_deltas(item))
                seconds.append(trace.updates[-1][0] - trace.updates[0][0])
            d_plain, t_plain, f_plain = [], [], []
            t.spans.clear()
            cpu_before = _cpu_by_thread(daemon_pid)
            mine = direct.p.proc.pid
            provider = config.providers.codex if kind == "codex" else config.providers.claude
            relay = [] if relayed is None else relayed.p.provider_pids()
            theirs = [pid for pid in _same_provider(mine, provider.env) if pid not in relay]
            d_sched, t_sched, f_sched = [0, 0, 0], [0, 0, 0], [0, 0, 0]
            f_cpu = 0
            for _ in range(turns):
                before = _sched([mine])
                d_plain.append(direct.turn("hello"))
                _add(d_sched, before, _sched([mine]))
                if relayed is not None:
                    before = _sched(relay)
                    relay_before = _sched([relayed.p.proc.pid])[0]
                    f_plain.append(relayed.turn("hello"))
                    _add(f_sched, before, _sched(relay))
                    f_cpu += _sched([relayed.p.proc.pid])[0] - relay_before
                before = _sched(theirs)
                t_plain.append((await t.turn("hello"))[0])
                _add(t_sched, before, _sched(theirs))
            spans = list(t.spans)
            cpu_after = _cpu_by_thread(daemon_pid)
    finally:
        direct.close()
        if relayed is not None:
            relayed.close()
    per_s = statistics.median(r / s for r, s in zip(rows, seconds, strict=True) if s)
    out = {
        "direct": _summary(d_streamed, d_plain, None),
        "t3orch": _summary(t_streamed, t_plain, (statistics.median(rows), per_s)),
    }
    out["direct"]["provider_cpu_ms_per_turn"] = d_sched[0] / turns / 1e6
    out["direct"]["provider_wait_ms_per_turn"] = d_sched[1] / turns / 1e6
    out["t3orch"]["provider_cpu_ms_per_turn"] = t_sched[0] / turns / 1e6
    out["t3orch"]["provider_wait_ms_per_turn"] = t_sched[1] / turns / 1e6
    out["direct"]["machine_cpu_ms_per_turn"] = d_sched[2] / turns / 1e6
    out["t3orch"]["machine_cpu_ms_per_turn"] = t_sched[2] / turns / 1e6
    if relayed is not None:
        out["floor"] = _summary(f_streamed, f_plain, None)
        out["floor"]["daemon_cpu_ms_per_turn"] = f_cpu / turns / 1e6
        out["floor"]["provider_cpu_ms_per_turn"] = f_sched[0] / turns / 1e6
        out["floor"]["provider_wait_ms_per_turn"] = f_sched[1] / turns / 1e6
        out["floor"]["machine_cpu_ms_per_turn"] = f_sched[2] / turns / 1e6
    by_thread = {
        name: (ns - cpu_before.get(name, 0)) / turns / 1e6 for name, ns in cpu_after.items()
    }
    out["t3orch"]["daemon_cpu_ms_per_turn"] = sum(by_thread.values())
    out["daemon_cpu_ms_per_turn_by_thread"] = {
        name: ms for name, ms in sorted(by_thread.items(), key=lambda kv: -kv[1]) if ms >= 0.05
    }
    if timeline_file is not None:
        out["timeline"] = _timeline(timeline_file, spans)
        out["end"] = _the_end(timeline_file, spans)
    return out


#: The provider env that names this run (the daemon sets others, e.g. a Claude TMPDIR).
_THIS_RUN = ("CODEX_HOME", "ANTHROPIC_BASE_URL")


def _same_provider(pid: int, env: Mapping[str, str]) -> list[int]:
    """The other processes running ``pid``'s executable with this run's provider home or
    fake (``env``): the daemon's providers, not another run's."""
    exe = os.readlink(f"/proc/{pid}/exe")
    wanted = {f"{k}={v}".encode() for k, v in env.items() if k in _THIS_RUN}
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != pid:
            with suppress(OSError):
                if os.readlink(proc / "exe") == exe and wanted <= set(
                    (proc / "environ").read_bytes().split(b"\0")
                ):
                    out.append(int(proc.name))
    return out


def _sched(pids: list[int]) -> tuple[int, int, int]:
    """(ns on a CPU, ns runnable but waiting for one) so far, over the threads of ``pids``
    (``/proc/<pid>/task/*/schedstat``): the wait is the CPU the provider wanted and did
    not get; and the ns on a CPU of every thread on the machine."""
    run = wait = 0
    for pid in pids:
        with suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with suppress(OSError, ValueError, IndexError):
                    fields = (task / "schedstat").read_text().split()
                    run += int(fields[0])
                    wait += int(fields[1])
    machine = 0
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*/schedstat"):
        with suppress(OSError, ValueError, IndexError):
            machine += int(task.read_text().split()[0])
    return run, wait, machine


def _add(total: list[int], before: tuple[int, int, int], after: tuple[int, int, int]) -> None:
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        total[i] += a - b


def _cpu_by_thread(pid: int) -> dict[str, int]:
    """CPU ns so far of the threads of ``pid``, summed by thread name
    (``/proc/<pid>/task/*/{comm,schedstat}``; the daemon's children, the providers, are
    not in it; a thread that ended took its share with it)."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(OSError):
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
            out[name] = out.get(name, 0) + ns
    return out


def _timeline(path: Path, spans: list[tuple[float, float, float]]) -> dict[str, float]:
    """Median ms after the client's send of each hop's first stamp in a plain turn
    (``T3ORCH_TIMELINE``; ``<hop>.last``: its last), plus the client's own."""
    stamps = timeline.read(str(path))
    per: dict[str, list[float]] = {}
    for start, replied, end in spans:
        first: dict[str, float] = {"client.reply": replied - start}
        last: dict[str, float] = {}
        for t, name in stamps:
            if start <= t <= end:
                first.setdefault(name, t - start)
                last[name] = t - start
        for name, t in last.items():
            if t != first[name]:
                first[name + ".last"] = t
        first["client.completed"] = end - start
        for name, t in first.items():
            per.setdefault(name, []).append(t * 1000)
    return {
        name: statistics.median(ts)
        for name, ts in sorted(per.items(), key=lambda kv: statistics.median(kv[1]))
        if len(ts) * 2 >= len(spans)
    }


def _the_end(path: Path, spans: list[tuple[float, float, float]]) -> dict[str, float]:
    """A plain turn's end, median ms after its last frame was read (the TurnCompleted's,
    through the holder: the last ``holder.read`` before the barrier), and the number of
    transactions committed during the turn."""
    stamps = timeline.read(str(path))
    per: dict[str, list[float]] = {}
    for start, _, end in spans:
        turn = [(t, name) for t, name in stamps if start <= t <= end]

        def first(name: str, after: float, turn: list[tuple[float, str]] = turn) -> float | None:
            return next((t for t, n in turn if n == name and t >= after), None)

        barrier = first("barrier.start", start)
        if barrier is None:
            continue
        reads = [t for t, n in turn if n == "holder.read" and t <= barrier]
        # Not held (no holder): the stream's take is the first we know of it.
        read = (
            reads[-1] if reads else max(t for t, n in turn if n == "stream.take" and t <= barrier)
        )
        queued = first("end.queue", barrier)
        taken = first("writer.take", queued) if queued is not None else None
        committed = first("writer.committed", taken) if taken is not None else None
        if committed is None:
            continue
        for name, t in (
            ("stream takes it", first("stream.take", read) or barrier),
            ("barrier starts", barrier),
            ("end queued on the writer", queued),
            ("the writer takes the end", taken),
            ("end committed (its fsync)", committed),
            ("client has the completed run", end),
        ):
            assert t is not None
            per.setdefault(name, []).append((t - read) * 1000)
        count = sum(1 for _, n in turn if n == "writer.committed")
        per.setdefault("transactions in the turn (count)", []).append(count)
    return {name: statistics.median(ts) for name, ts in per.items()}


def _reply_text() -> str:
    return "".join(f"word{i} " for i in range(WORDS))


def _summary(
    streamed: list[dict[str, float]], plain: list[float], rows: tuple[float, float] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        key: statistics.median(s[key] for s in streamed)
        for key in ("first_ms", "updates_per_s", "word_ms", "latency_ms")
    }
    out["plain_turn_ms"] = statistics.median(plain) * 1000
    if rows is not None:
        out["stored_delta_rows"], out["stored_rows_per_s"] = rows
    return out


def _codex_sharing(toml: str, threads: int | None) -> str:
    if threads is None:
        return toml
    return toml.replace(
        "[providers.codex]\n", f"[providers.codex]\nmax_threads_per_process = {threads}\n", 1
    )


def _wait_for_socket(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("t3orch serve did not start")
        time.sleep(0.05)

    async def probe() -> None:
        async with connect(path) as client:
            await client.call("daemon.status")

    trio.run(probe)


@contextmanager
def _fakes(root: Path, want: list[str], apart: bool) -> Iterator[tuple[Config, list[str], Path]]:
    """The fake model servers: in this process (threads), or apart in a process of their
    own (``t3orch fakes``), as a model server is on a machine of its own."""
    if not apart:
        from fixtures.fakes.codex_home import make_work_dir

        work = make_work_dir(root / "work")
        with provider_environment(work, root / "homes", want) as (config, kinds):
            yield config, kinds, work
        return
    where = root / "fakes"
    t3orch = Path(sys.executable).parent / "t3orch"
    proc = subprocess.Popen(
        [str(t3orch), "fakes", "--dir", str(where)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        kinds: list[str] = []
        for raw in proc.stdout:
            line = raw.decode()
            if line.startswith("providers"):
                kinds = line.split(None, 1)[1].split(" (")[0].split(", ")
            if line.startswith("ready"):
                break
        else:
            raise RuntimeError("t3orch fakes did not start")
        yield load_config(where / "t3orch.toml"), kinds, where / "work"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--providers", default="codex,claude")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument(
        "--synchronous",
        choices=["FULL", "NORMAL"],
        default="FULL",
        help="the daemon's daemon.synchronous (FULL, its default: an fsync per commit)",
    )
    ap.add_argument(
        "--reattach-grace-s",
        type=float,
        default=None,
        help="the daemon's daemon.reattach_grace_s (default 600: Codex under a holder; 0: none)",
    )
    ap.add_argument(
        "--timeline",
        action="store_true",
        help="stamp each hop of a turn (T3ORCH_TIMELINE) and print where a plain turn's ms go",
    )
    ap.add_argument(
        "--codex-threads-per-process",
        type=int,
        default=None,
        help="the daemon's providers.codex.max_threads_per_process (default 16: shared; 1: own)",
    )
    ap.add_argument(
        "--fakes-apart",
        action="store_true",
        help="run the fake model servers in a process of their own (no word latency then)",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="drive the providers a third way, through bench/relay.py: a relay that decodes "
        "each line and commits a turn's start and end (fsynced), and nothing else",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    want = [p for p in args.providers.split(",") if p]
    root = Path(tempfile.mkdtemp(prefix="t3bs", dir="/tmp"))
    results: dict[str, dict[str, Any]] = {}
    try:
        with _fakes(root, want, args.fakes_apart) as (config, kinds, work):
            kinds = [k for k in kinds if k in want]
            cfg = root / "t3orch.toml"
            cfg.write_text(
                f'[daemon]\nsynchronous = "{args.synchronous}"\n'
                + (
                    f"reattach_grace_s = {args.reattach_grace_s}\n"
                    if args.reattach_grace_s is not None
                    else ""
                )
                + "\n"
                + _codex_sharing(config_toml(config), args.codex_threads_per_process)
            )
            state = root / "state"
            timeline_file = root / "timeline.txt" if args.timeline else None
            env = {"PYTHONPATH": str(REPO)}
            if timeline_file is not None:
                env["T3ORCH_TIMELINE"] = str(timeline_file)
            daemon = serve_daemon(state, cfg, None, env=env)
            try:
                _wait_for_socket(state / "api.sock", daemon)
                for kind in kinds:
                    results[kind] = trio.run(
                        _compare,
                        kind,
                        config,
                        state / "api.sock",
                        work,
                        args.rounds,
                        args.turns,
                        timeline_file,
                        daemon.pid,
                        root / "floor.db" if args.floor else None,
                    )
                    if timeline_file is not None:
                        timeline_file.write_text("")
            finally:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(30)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
                # The daemon's exit leaves its held providers to their grace (live
                # restore); a bench leaves nothing running.
                stop_agents(state)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load = {"before": load_before, "after": os.getloadavg()}
    if args.json:
        print(json.dumps({**results, "load_average": load}, indent=2))
    else:
        _print(results, args)
        before, after = (" ".join(f"{x:.2f}" for x in load[k]) for k in ("before", "after"))
        print(f"load average (1/5/15 min) before: {before}, after: {after}")
    return 0


_ROWS = [
    ("first text after send (ms)", "first_ms", "{:.0f}"),
    ("text updates / s", "updates_per_s", "{:.1f}"),
    ("mean word arrival (ms)", "word_ms", "{:.0f}"),
    ("word latency from the model (ms)", "latency_ms", "{:.1f}"),
    ("stored delta rows (per s)", "stored_delta_rows", "{:.0f}"),
    ("plain turn, median (ms)", "plain_turn_ms", "{:.1f}"),
    ("daemon CPU per plain turn (ms)", "daemon_cpu_ms_per_turn", "{:.1f}"),
    ("provider CPU per plain turn (ms)", "provider_cpu_ms_per_turn", "{:.1f}"),
    ("provider waiting for a CPU (ms)", "provider_wait_ms_per_turn", "{:.1f}"),
    ("every thread's CPU per plain turn (ms)", "machine_cpu_ms_per_turn", "{:.1f}"),
]


def _print(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"{WORDS} words at 50 Hz, median of {args.rounds} rounds; plain: median of "
        f"{args.turns} turns; daemon.synchronous = {args.synchronous}"
    )
    width = max(len(label) for label, _, _ in _ROWS) + 2
    ways = ["direct", "floor", "t3orch"] if args.floor else ["direct", "t3orch"]
    head = f"{'':{width}}" + "".join(f"{k + ' ' + way:>16}" for k in results for way in ways)
    print(head)
    for label, key, fmt in _ROWS:
        line = f"{label:{width}}"
        for r in results.values():
            for way in ways:
                v = r[way].get(key)
                cell = fmt.format(v) if v is not None else "-"
                if key == "stored_delta_rows" and v is not None:
                    cell += f" ({r[way]['stored_rows_per_s']:.1f})"
                line += f"{cell:>16}"
        print(line)
    for kind, r in results.items():
        ratio = r["t3orch"]["plain_turn_ms"] / r["direct"]["plain_turn_ms"]
        print(f"{kind}: plain turn through t3orch = {ratio:.3f} × direct (target ≤ 1.05)")
        if "floor" in r:
            floor = r["floor"]["plain_turn_ms"] / r["direct"]["plain_turn_ms"]
            print(f"{kind}: plain turn through the floor relay = {floor:.3f} × direct")
    for kind, r in results.items():
        if "timeline" in r:
            print(f"{kind}: a plain turn's timeline, median ms after the client's send")
            for name, ms in r["timeline"].items():
                print(f"  {ms:8.2f}  {name}")
    for kind, r in results.items():
        if "end" in r:
            print(f"{kind}: a plain turn's end, median ms after its last frame was read")
            for name, ms in r["end"].items():
                print(f"  {ms:8.2f}  {name}")
    for kind, r in results.items():
        threads = ", ".join(
            f"{name} {ms:.1f}" for name, ms in r["daemon_cpu_ms_per_turn_by_thread"].items()
        )
        print(f"{kind}: daemon CPU ms per plain turn by thread: {threads}")


if __name__ == "__main__":
    raise SystemExit(main())
