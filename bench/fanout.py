"""API fan-out benchmark: many WebSocket subscribers on one thread while a run streams deltas.

Prints figures; it is not a timed test (issue 6, section Benchmark). Two processes:

* **The daemon** (this script with ``--daemon-child``): the real ``run_daemon`` (store
  with ``synchronous=FULL``, ``SessionManager``, ``serve_api``, the raw frame log). The
  only stand-in is the provider process: ``SessionRunner``'s launcher is swapped for
  one handing out an in-memory Codex ``app-server`` (:class:`PacedCodexProcess`, the
  approach of ``bench/codex_adapter.py``, its frame shapes reused) that answers
  ``initialize``/``thread/start``/``turn/start`` and then releases the turn's frames
  on a clock: ``--rate`` deltas a second for ``--seconds``, in items of
  ``--item-deltas`` deltas (agent messages and command output, alternating). Every
  frame goes through the real Codex adapter → session pump → ``DeltaCoalescer`` →
  ``CoreService.ingest_queued`` → writer (group commit) → broadcast → API stream →
  WebSocket.
* **The subscribers**: ``--subscribers`` WebSocket clients on 127.0.0.1 with the
  bearer token, each subscribed to the thread's ``threadDetail``, spread over
  ``--reader-procs`` processes of ``bench/ws_harness.py``: the real handshake and
  subscribe, then raw non-blocking sockets in one ``selectors`` loop and a tiny frame
  parser (server frames are unmasked). A frame is stamped with the time of the
  ``recv`` that completed it and decoded only after the run. The daemon's CPU is
  measured on its own process (psutil), so the subscribers' work is not in it.
* **The physical floor**, in the same run once the daemon has stopped: one process
  (``ws_harness.py floor``) writes the frames subscriber 0 got, grouped and timed as
  the daemon published them, to as many loopback sockets, read by the same readers;
  and 200 4 KiB writes + ``fdatasync`` in the state dir. The daemon's figures are
  printed as ratios to the fan-out floor.

Stamps: delta ``k`` of the turn carries ``[#k]`` at the start of its text; the
provider records the CLOCK_MONOTONIC time at which the adapter *read* each frame
(``receive_line`` returned it), by index. A subscriber stamps each frame on arrival
(above); a coalesced ``turn_item.delta`` names every delta in it.
Both processes use ``time.monotonic`` (one clock for the machine). The daemon also
records (in-process wrappers; no t3orch code changed) when each coalesced delta left
the coalescer (``ingest_queued``), each batch from its deciding to its commit, each
publish, each frame sent on each connection, and each cyclic GC pass; those give the
breakdown. A frame goes out either by a direct write on the publishing task
(``write_now``: "send done" is when ``writev`` returned) or through a write loop ("send
done" is when it resumes after ``send_all``, which can be after the subscriber already
read the bytes: trio reschedules it behind other tasks).
``--steps`` also times the daemon's trio task steps and loop ticks.

Latencies printed (p50/p99/max over every subscriber × event):

* **item upserts**, provider frame read → subscriber: ``turn_item.upserted`` for the
  ``item/started`` and ``item/completed`` frames (never coalesced).
* **deltas, flush → subscriber**: from the moment the coalescer released the batch.
* **deltas, first frame of the batch → subscriber**: includes the coalescing window
  (250 ms) by design; and, for reference, every delta frame → subscriber.
* **every event, publish → subscriber**: the API fan-out alone.

The ``p99 < 20 ms`` target is applied to the item upserts and to deltas from their
flush; the first-frame figure is held to ``window + 20 ms`` (see docs/performance.md).

Run: ``python bench/fanout.py [--subscribers N] [--rate R] [--seconds S] [--json]``
(what-ifs and diagnostics: ``--sync NORMAL``, ``--ascii``, ``--switch-interval MS``,
``--steps``, ``--profile``, ``--reader-procs N``). Exit status 0 only when the
item-upsert and delta-flush targets pass and every subscriber got every event without
a resync.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import cProfile
import gc
import importlib.util
import io
import itertools
import json
import math
import os
import pstats
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import msgspec
import psutil
import trio
import trio_websocket

# Run as ``python bench/fanout.py``, this directory comes first on sys.path, where
# ``bench/supervisor.py`` would shadow the ``supervisor`` package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]

from adapters.transport import ExitStatus, LaunchSpec, OversizedLine  # noqa: E402
from t3orch.api.auth import read_token  # noqa: E402
from t3orch.ingest.coalesce import DEFAULT_WINDOW_S  # noqa: E402
from t3orch.process_tuning import raise_descriptor_limit  # noqa: E402

#: Issue 6: p99 end-to-end latency to a subscriber.
TARGET_P99_MS = 20.0
#: A pipe read hands over at most this much; the process yields to trio once per chunk.
CHUNK_BYTES = 64 * 1024
#: What a subscriber asks of its socket per read (trio-websocket reads 4 KiB by default).
RECEIVE_BYTES = 1024 * 1024
STAMP = re.compile(r"\[#(\d+)\]")
SEND_SEQ = re.compile(rb'"sequence":(\d+)')
TERMINAL_RUN = frozenset({"completed", "failed", "interrupted", "cancelled"})


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _load_codex_bench() -> Any:
    """``bench/codex_adapter.py`` as a module: its Codex 0.169.0 frame shapes are reused."""
    spec = importlib.util.spec_from_file_location(
        "_bench_codex_adapter", _HERE / "codex_adapter.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# == the daemon side ===================================================================


@attrs.define
class Records:
    """What the daemon process notes down (monotonic seconds); dumped as JSON at exit."""

    #: Per provider frame (by index): when the adapter read it, and its kind.
    read: list[float] = attrs.field(factory=list)
    kinds: list[str] = attrs.field(factory=list)
    #: Per delta (by its stamp ``k``): when it was read and when it was due.
    delta_read: list[float] = attrs.field(factory=list)
    delta_due: list[float] = attrs.field(factory=list)
    #: ``started:<ref>`` / ``completed:<ref>`` / ``turn_end`` → frame index.
    markers: dict[str, int] = attrs.field(factory=dict)
    #: Stamp of the first delta of a coalesced batch → when it was queued for ingest.
    flush: dict[int, float] = attrs.field(factory=dict)
    #: ``started:<ref>`` / ``completed:<ref>`` → when the pump queued it for ingest.
    item_queued: dict[str, float] = attrs.field(factory=dict)
    #: Per commit: (start, end, submissions) of a batch, from its deciding to its COMMIT.
    #: ... and the writer thread's CPU time in it: wall minus CPU is waiting (disk, GIL).
    #: ... and how long its COMMIT statement took.
    commits: list[tuple[float, float, int, float, float]] = attrs.field(factory=list)
    #: Per publish: (time, first sequence, last sequence).
    publish: list[tuple[float, int, int]] = attrs.field(factory=list)
    #: Per WebSocket event frame sent: (before send, after send, client port, sequence).
    sends: list[tuple[float, float, int, int, int]] = attrs.field(factory=list)
    #: Event frames written on the publishing task (write_now), and through write loops;
    #: direct writes the socket took only part of.
    frames_direct: int = 0
    frames_queued: int = 0
    direct_partial: int = 0
    stream_start: float | None = None
    stream_end: float | None = None
    items: int = 0
    #: Cyclic GC passes: (end time, generation, seconds).
    gc: list[tuple[float, int, float]] = attrs.field(factory=list)
    profile: str = ""
    steps: str = ""


class StepTimes(trio.abc.Instrument):
    """Where the daemon's trio loop spends its time: per task function, and per loop tick."""

    #: A step running longer than this gets its stack sampled (by a watcher thread).
    LONG_STEP_S = 0.008

    def __init__(self) -> None:
        self.by_task: dict[str, list[float]] = {}  # name -> [total s, steps, longest s]
        self.ticks: list[tuple[float, float, int]] = []  # (tick end, busy s, steps)
        self.long_stacks: dict[str, int] = {}
        self.long_steps: list[tuple[float, str, float, float, float]] = []
        self._tick_steps = 0
        self._step = 0.0
        self._step_cpu = 0.0
        self._step_sys = 0.0
        self._in_step = False
        self._tick = time.perf_counter()
        self._main = threading.get_ident()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(0.002)
            if self._in_step and time.perf_counter() - self._step > self.LONG_STEP_S:
                frame = sys._current_frames().get(self._main)
                if frame is None:
                    continue
                stack = traceback.extract_stack(frame)[-14:]
                key = " < ".join(
                    f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack)
                )
                self.long_stacks[key] = self.long_stacks.get(key, 0) + 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step = time.perf_counter()
        ru = resource.getrusage(resource.RUSAGE_THREAD)
        self._step_cpu = ru.ru_utime
        self._step_sys = ru.ru_stime
        self._in_step = True

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self._in_step = False
        spent = time.perf_counter() - self._step
        name = task.name.rsplit(".", 1)[-1] if "<" not in task.name else task.name
        entry = self.by_task.setdefault(name, [0.0, 0, 0.0])
        entry[0] += spent
        entry[1] += 1
        entry[2] = max(entry[2], spent)
        self._tick_steps += 1
        if spent > 0.003:
            ru = resource.getrusage(resource.RUSAGE_THREAD)
            user, system = ru.ru_utime - self._step_cpu, ru.ru_stime - self._step_sys
            self.long_steps.append((time.monotonic(), name, spent, user, system))

    def before_io_wait(self, timeout: float) -> None:
        now = time.perf_counter()
        self.ticks.append((time.monotonic(), now - self._tick, self._tick_steps))
        self._tick_steps = 0

    def after_io_wait(self, timeout: float) -> None:
        self._tick = time.perf_counter()

    def report(self, start: float | None, end: float | None) -> str:
        ticks = [b for t, b, _n in self.ticks if start is None or end is None or start <= t <= end]
        worst = sorted(self.ticks, key=lambda x: -x[1])[:5]
        lines = [
            f"loop ticks during the stream: {len(ticks):,}; busy per tick p50 "
            f"{pct(ticks, 50) * 1e3:.2f} ms, p99 {pct(ticks, 99) * 1e3:.2f} ms, max "
            f"{max(ticks, default=0) * 1e3:.2f} ms; busy total {sum(ticks):.2f} s",
            f"  {'task':<48} {'total s':>8} {'steps':>8} {'us/step':>8} {'max ms':>8}",
        ]
        top = sorted(self.by_task.items(), key=lambda kv: -kv[1][0])[:18]
        for name, (total, steps, longest) in top:
            lines.append(
                f"  {name[:48]:<48} {total:>8.3f} {steps:>8,} {total / steps * 1e6:>8.1f} "
                f"{longest * 1e3:>8.2f}"
            )
        for t, busy, n in worst:
            longs = [
                f"{name}={spent * 1e3:.1f} (user {user * 1e3:.1f}, sys {system * 1e3:.1f})"
                for when, name, spent, user, system in self.long_steps
                if t - busy - 0.001 <= when <= t
            ]
            lines.append(f"  long tick {busy * 1e3:.1f} ms, {n} steps; steps > 3 ms: {longs[:8]}")
        lines.append(f"  stacks sampled inside steps longer than {self.LONG_STEP_S * 1e3:.0f} ms:")
        for key, n in sorted(self.long_stacks.items(), key=lambda kv: -kv[1])[:12]:
            lines.append(f"    {n:>5}  {key}")
        return "\n".join(lines)


@attrs.define
class Frame:
    #: Paced frames (the deltas) go out on the clock; the others with the next one.
    paced: bool
    kind: str
    line: bytes
    marker: str | None = None


@attrs.define
class Turn:
    """A turn's frames as flat lists of atoms: millions of small objects in the daemon's
    heap would make its garbage collector (and so the figures) slower than a real one."""

    result: dict[str, Any]
    lines: list[bytes]
    paced: bytes
    kinds: list[str]
    markers: dict[int, str]
    items: int

    @classmethod
    def of(cls, result: dict[str, Any], frames: list[Frame], items: int) -> Turn:
        return cls(
            result,
            [f.line for f in frames],
            bytes(f.paced for f in frames),
            [sys.intern(f.kind) for f in frames],
            {i: f.marker for i, f in enumerate(frames) if f.marker is not None},
            items,
        )


def build_turn(
    shapes: Any,
    total: int,
    item_range: tuple[int, int],
    index: int = 1,
    seed: int = 7,
    ascii_only: bool = False,
) -> Turn:
    """One turn of ``total`` deltas in Codex 0.169.0 shapes, built before it streams.

    Delta ``k`` (0-based, over the turn) starts with ``[#k]``: the stamp that ties
    what a subscriber receives back to the moment the adapter read that frame.
    """
    b = shapes.StreamBuilder(11)
    rng = random.Random(seed)
    thread = shapes.THREAD_ID
    turn_id = f"01a22d23-2a22-7680-9674-{index:012x}"
    base = {"threadId": thread, "turnId": turn_id}
    second = b.ms // 1000
    frames = [
        Frame(
            False,
            "status",
            b.note(
                "thread/status/changed",
                {"threadId": thread, "status": {"type": "active", "activeFlags": []}},
            ),
        ),
        Frame(
            False,
            "turn",
            b.note(
                "turn/started",
                {"threadId": thread, "turn": b.turn_object(turn_id, startedAt=second)},
            ),
        ),
    ]
    user = {
        "type": "userMessage",
        "id": f"user_{index}",
        "clientId": None,
        "content": [{"type": "text", "text": "stream", "text_elements": []}],
        "startedAtMs": b.ms,
        "completedAtMs": None,
    }
    frames.append(
        Frame(False, "item", b.note("item/started", {"item": user, **base, "startedAtMs": b.ms}))
    )
    user = {**user, "completedAtMs": b.ms}
    frames.append(
        Frame(
            False,
            "item",
            b.note(
                "item/completed",
                {**base, "item": user, "contentTokenCount": None, "completedAtMs": b.ms},
            ),
        )
    )
    k = 0
    items = 0
    last_agent: dict[str, Any] | None = None
    while k < total:
        items += 1
        n = min(total - k, rng.randint(*item_range))
        agent = items % 2 == 1
        ref = f"msg_fan{items}" if agent else f"call_fan{items}"
        started = b.tick()
        command = f"pytest -q tests/test_{items}.py"
        opening = (
            b.agent_item(ref, "", False, started)
            if agent
            else b.command_item(ref, command, None, False, started)
        )
        frames.append(
            Frame(
                False,
                "item",
                b.note("item/started", {"item": opening, **base, "startedAtMs": started}),
                f"started:{ref}",
            )
        )
        method = "item/agentMessage/delta" if agent else "item/commandExecution/outputDelta"
        parts: list[str] = []
        for _ in range(n):
            if agent:
                piece = f"[#{k}]{b.words(rng.randint(2, 14))} "
            else:
                piece = f"[#{k}]{b.words(rng.randint(20, 90))}\n"
            if ascii_only:
                piece = piece.encode("ascii", "replace").decode()
            k += 1
            parts.append(piece)
            frames.append(
                Frame(True, "delta", b.note(method, {**base, "itemId": ref, "delta": piece}))
            )
        text = "".join(parts)
        b.tick(1, 4)
        closing = (
            b.agent_item(ref, text, True, started)
            if agent
            else b.command_item(ref, command, text, True, started)
        )
        if agent:
            last_agent = closing
        frames.append(
            Frame(
                False,
                "item",
                b.note(
                    "item/completed",
                    {**base, "item": closing, "contentTokenCount": None, "completedAtMs": b.ms},
                ),
                f"completed:{ref}",
            )
        )
    usage = {
        "totalTokens": 1983,
        "inputTokens": 1981,
        "cachedInputTokens": 0,
        "cacheWriteInputTokens": 0,
        "outputTokens": 2,
        "reasoningOutputTokens": 0,
    }
    frames.append(
        Frame(
            False,
            "usage",
            b.note(
                "thread/tokenUsage/updated",
                {
                    **base,
                    "tokenUsage": {"total": usage, "last": usage, "modelContextWindow": 121600},
                },
            ),
        )
    )
    frames.append(
        Frame(
            False,
            "status",
            b.note("thread/status/changed", {"threadId": thread, "status": {"type": "idle"}}),
        )
    )
    frames.append(
        Frame(
            False,
            "turn_end",
            b.note(
                "turn/completed",
                {
                    "threadId": thread,
                    "turn": b.turn_object(
                        turn_id,
                        items=[last_agent] if last_agent else [],
                        itemsView="summary",
                        status="completed",
                        startedAt=second,
                        completedAt=b.ms // 1000,
                        durationMs=b.ms - second * 1000,
                    ),
                },
            ),
            "turn_end",
        )
    )
    return Turn.of({"turn": b.turn_object(turn_id)}, frames, items)


class PacedCodexProcess:
    """An in-memory ``codex app-server`` (a ``ProviderProcess``) streaming on a clock.

    Replies come at once; the turn's delta frames are released at ``rate`` a second
    (other frames go out right after the delta before them). Frames are built in
    advance, so the daemon's CPU holds only a list pop and a clock read per frame.
    """

    def __init__(self, shapes: Any, turn: Turn, rec: Records, rate: float) -> None:
        self.shapes = shapes
        self.turn = turn
        self.rec = rec
        self.rate = rate
        stream = shapes.build_stream(100, 20)
        self._initialize = stream.initialize
        self._thread_start = stream.thread_start
        self._ready: deque[bytes] = deque()
        self._next: int | None = None
        self._started = False
        self._paced = 0
        self._t0 = 0.0
        self._wake = trio.Event()
        self._status: ExitStatus | None = None
        self._exited = trio.Event()
        self._since_yield = 0
        #: trio's clock has its own offset; records are CLOCK_MONOTONIC.
        self._offset = 0.0

    @property
    def pid(self) -> int | None:
        return None

    async def send_line(self, line: bytes) -> None:
        if self._status is not None:
            raise trio.BrokenResourceError("the codex process has exited")
        frame = msgspec.json.decode(line)
        method, request_id = frame.get("method"), frame.get("id")
        if method == "initialize":
            self._ready.append(self._initialize)
        elif method == "thread/start":
            self._ready.append(self._thread_start)
        elif method == "turn/start":
            if self._started:
                raise RuntimeError("the bench streams one turn per process")
            self._started = True
            self._ready.append(self.shapes._line({"id": request_id, "result": self.turn.result}))
            self._next = 0
            self._offset = trio.current_time() - time.monotonic()
            self._t0 = trio.current_time()
            self.rec.stream_start = time.monotonic()
        elif request_id is not None:
            self._ready.append(self.shapes._line({"id": request_id, "result": {}}))
        self._wake.set()
        await trio.lowlevel.checkpoint()

    async def receive_line(self) -> bytes | OversizedLine | None:
        rec = self.rec
        while True:
            if self._ready:
                rec.read.append(time.monotonic())
                rec.kinds.append("reply")
                return self._ready.popleft()
            turn = self.turn
            if self._next is not None and self._next < len(turn.lines):
                at = self._next
                self._next += 1
                if turn.paced[at]:
                    due = self._t0 + self._paced / self.rate
                    self._paced += 1
                    if trio.current_time() < due:
                        self._since_yield = 0
                        await trio.sleep_until(due)
                    now = time.monotonic()
                    rec.delta_read.append(now)
                    rec.delta_due.append(due - self._offset)
                else:
                    now = time.monotonic()
                marker = turn.markers.get(at)
                if marker is not None:
                    rec.markers[marker] = len(rec.read)
                    if marker == "turn_end":
                        rec.stream_end = now
                rec.read.append(now)
                rec.kinds.append(turn.kinds[at])
                line = turn.lines[at]
                self._since_yield += len(line) + 1
                if self._since_yield >= CHUNK_BYTES:
                    self._since_yield = 0
                    await trio.lowlevel.checkpoint()
                return line
            if self._status is not None:
                return None
            self._wake = trio.Event()
            await self._wake.wait()

    async def close_stdin(self) -> None:
        self._finish(ExitStatus(code=0, signal=None))
        await trio.lowlevel.checkpoint()

    async def wait(self) -> ExitStatus:
        await self._exited.wait()
        assert self._status is not None
        return self._status

    def stderr_tail(self) -> str:
        return ""

    async def kill(self) -> None:
        self._finish(ExitStatus(code=None, signal=int(signal.SIGKILL)))
        await trio.lowlevel.checkpoint()

    def _finish(self, status: ExitStatus) -> None:
        if self._status is None:
            self._status = status
            self._wake.set()
            self._exited.set()


class PacedLauncher:
    """Stands in for ``RecordingLauncher``: every launch gets a fresh paced process."""

    def __init__(self, make: Callable[[], PacedCodexProcess]) -> None:
        self._make = make

    async def launch(self, spec: LaunchSpec) -> PacedCodexProcess:
        await trio.lowlevel.checkpoint()
        return self._make()

    @property
    def current(self) -> None:
        return None  # no child to signal: the stop ladder ends at the protocol close


def _instrument(rec: Records, args: argparse.Namespace) -> None:
    """Wrap (in this process only) the points the breakdown needs: flush, commit, publish, send."""
    from t3orch.api.transport import WebSocketChannel
    from t3orch.provider_events import ItemCompleted, ItemDelta, ItemStarted
    from t3orch.service import CoreService
    from t3orch.store.broadcast import Broadcast
    from t3orch.store.sqlite.backend import SQLiteStore

    ingest_queued = CoreService.ingest_queued

    async def timed_ingest(self: Any, binding: Any, events: Sequence[Any]) -> Any:
        now = time.monotonic()
        for event in events:
            if isinstance(event, ItemDelta):
                m = STAMP.search(event.text)
                if m is not None:
                    rec.flush[int(m.group(1))] = now
            elif isinstance(event, ItemStarted):
                rec.item_queued[f"started:{event.native_item_ref}"] = now
            elif isinstance(event, ItemCompleted):
                rec.item_queued[f"completed:{event.native_item_ref}"] = now
        return await ingest_queued(self, binding, events)

    CoreService.ingest_queued = timed_ingest  # type: ignore[method-assign]

    commit_batch = SQLiteStore.commit_batch
    connect = SQLiteStore._connect
    commit_stmt = [0.0]

    def traced_connect(self: Any, *args_: Any) -> Any:
        conn = connect(self, *args_)
        if not self.readonly:
            if args.wal_autocheckpoint is not None:
                conn.execute(f"PRAGMA wal_autocheckpoint = {args.wal_autocheckpoint}")

            if not args.commit_trace:
                return conn

            def trace(statement: str) -> None:
                # When the COMMIT statement starts: its fsync (and any WAL checkpoint
                # it triggers) is the rest of the commit.
                if statement == "COMMIT":
                    commit_stmt[0] = time.monotonic()

            conn.set_trace_callback(trace)
        return conn

    SQLiteStore._connect = traced_connect  # type: ignore[method-assign]

    # A batch is decided, written and committed in one call on the writer's thread:
    # its commit spans the call, its CPU is that thread's during it.
    def timed_commit(self: Any, submissions: Sequence[Any]) -> Any:
        start = time.monotonic()
        cpu = time.thread_time()
        try:
            return commit_batch(self, submissions)
        finally:
            end = time.monotonic()
            spent = time.thread_time() - cpu
            rec.commits.append((start, end, len(submissions), spent, end - commit_stmt[0]))

    SQLiteStore.commit_batch = timed_commit  # type: ignore[method-assign]

    publish = Broadcast.publish

    def timed_publish(self: Any, events: Sequence[Any]) -> None:
        if events:
            rec.publish.append((time.monotonic(), events[0].sequence, events[-1].sequence))
        publish(self, events)

    Broadcast.publish = timed_publish  # type: ignore[method-assign]

    send_many = WebSocketChannel.send_many
    ports: dict[int, int] = {}

    async def timed_send_many(self: Any, frames: Sequence[bytes]) -> None:
        before = time.monotonic()
        await send_many(self, frames)
        rec.frames_queued += note(self, before, time.monotonic(), frames)

    def note(self: Any, before: float, after: float, frames: Sequence[bytes]) -> int:
        port = ports.get(id(self))
        if port is None:
            # getpeername per frame would add a system call per frame to the daemon.
            port = ports[id(self)] = int(self._ws.remote.port)
        events = 0
        for frame in frames:
            head = frame[:160]
            if b'"method":"event"' in head:
                m = SEND_SEQ.search(head)
                if m is not None:
                    rec.sends.append((before, after, port, int(m.group(1)), len(frame)))
                    events += 1
        return events

    WebSocketChannel.send_many = timed_send_many  # type: ignore[method-assign]

    write_now = getattr(WebSocketChannel, "write_now", None)  # (an older tree: A/B runs)
    if write_now is None:
        return

    def timed_write_now(self: Any, frames: Sequence[bytes]) -> bool:
        # A direct write from the publishing task (the rest, if any, goes with the
        # write loop's next send_many: its frames are stamped here).
        before = time.monotonic()
        whole = write_now(self, frames)
        rec.frames_direct += note(self, before, time.monotonic(), frames)
        rec.direct_partial += not whole
        return whole

    WebSocketChannel.write_now = timed_write_now  # type: ignore[method-assign]


def _watch_gc(rec: Records) -> None:
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            rec.gc.append((time.monotonic(), info["generation"], time.perf_counter() - started[0]))

    gc.callbacks.append(on_gc)


async def _daemon_main(args: argparse.Namespace, rec: Records) -> None:
    import supervisor.session as session_mod
    from t3orch.config import (
        ClaudeConfig,
        CodexConfig,
        Config,
        DaemonConfig,
        ProvidersConfig,
    )
    from t3orch.daemon import run_daemon

    shapes = _load_codex_bench()
    turn = build_turn(
        shapes,
        max(1, round(args.rate * args.seconds)),
        _item_range(args.item_deltas),
        ascii_only=args.ascii,
    )
    rec.items = turn.items
    gc.collect()  # the builder's garbage, not the daemon's

    def make() -> PacedCodexProcess:
        return PacedCodexProcess(shapes, turn, rec, args.rate)

    session_mod.RecordingLauncher = lambda nursery: PacedLauncher(make)  # type: ignore[attr-defined,assignment,return-value]
    _instrument(rec, args)
    _watch_gc(rec)
    config = Config(
        daemon=DaemonConfig(synchronous=args.sync),
        providers=ProvidersConfig(
            codex=CodexConfig(command=["codex-in-memory"]), claude=ClaudeConfig(command=None)
        ),
    )
    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(run_daemon, config, Path(args.daemon_child))
        if args.switch_interval is not None:
            sys.setswitchinterval(args.switch_interval / 1000)
        print(json.dumps({"pid": os.getpid(), "port": daemon.port}), flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(0))
        await stdin.receive_some(64)  # "stop" or EOF
        await stdin.aclose()
        nursery.cancel_scope.cancel()


def daemon_child(args: argparse.Namespace) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    raise_descriptor_limit()  # as ``t3orch serve`` does before anything opens
    rec = Records()
    prof = cProfile.Profile() if args.profile else None
    if prof is not None:
        prof.enable()
    steps = StepTimes() if args.steps else None
    try:
        trio.run(_daemon_main, args, rec, instruments=[steps] if steps else [])
    finally:
        if steps is not None:
            rec.steps = steps.report(rec.stream_start, rec.stream_end)
        if prof is not None:
            prof.disable()
            # Kept with the state dir (--keep) for a closer look: python -m pstats FILE.
            prof.dump_stats(Path(args.daemon_child).parent / "daemon.prof")
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(35)
            rec.profile = out.getvalue()
        path = Path(args.daemon_child).parent / "records.json"
        path.write_bytes(msgspec.json.encode(attrs.asdict(rec)))
    return 0


def _item_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(":")
    low = int(lo)
    return low, int(hi or lo)


# == the subscriber side ===============================================================
# The subscribers are ``bench/ws_harness.py reader`` processes: raw sockets, a real
# handshake and subscribe, a tiny frame parser, frames stamped on arrival and decoded
# here only after the run. The same readers then read the bare loopback fan-out
# (``ws_harness.py floor``): the physical floor the daemon's figures are set against.

HARNESS = _HERE / "ws_harness.py"


def _harness() -> Any:
    spec = importlib.util.spec_from_file_location("_bench_ws_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@attrs.define
class Sub:
    index: int
    port: int = 0
    #: (receive time, frame) of every text frame, the subscribe response included.
    frames: list[tuple[float, bytes]] = attrs.field(factory=list)


class HarnessProc:
    """One harness process and the lines it prints (``ready``, ``run-ended``, ...)."""

    def __init__(self, proc: trio.Process, out: Path) -> None:
        self.proc = proc
        self.out = out
        self.said: dict[str, trio.Event] = {}
        self.values: dict[str, str] = {}

    def event(self, word: str) -> trio.Event:
        return self.said.setdefault(word, trio.Event())

    async def follow(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        async for chunk in self.proc.stdout:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                word, _, value = line.decode().partition(" ")
                self.values[word] = value
                self.event(word).set()

    async def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(line.encode() + b"\n")


async def _spawn(nursery: trio.Nursery, argv: list[str], out: Path) -> HarnessProc:
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(HARNESS), *argv, "--out", str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    hp = HarnessProc(proc, out)
    nursery.start_soon(hp.follow)
    return hp


async def _start_readers(
    nursery: trio.Nursery,
    args: argparse.Namespace,
    root: Path,
    tag: str,
    port: int,
    token_file: Path,
    thread_id: str,
) -> list[HarnessProc]:
    procs = max(1, min(args.reader_procs, args.subscribers))
    readers: list[HarnessProc] = []
    first = 0
    for i in range(procs):
        count = args.subscribers // procs + (1 if i < args.subscribers % procs else 0)
        argv = ["reader", "--port", str(port), "--token-file", str(token_file)]
        argv += ["--thread", thread_id, "--count", str(count), "--first-index", str(first)]
        if first == 0:
            argv.append("--watch-run")
        readers.append(await _spawn(nursery, argv, root / f"{tag}-reader{i}.bin"))
        first += count
    with trio.fail_after(60):
        for r in readers:
            await r.event("ready").wait()
    return readers


async def _stop_readers(readers: list[HarnessProc]) -> list[Sub]:
    harness = _harness()
    subs: dict[int, Sub] = {}
    for r in readers:
        await r.say("stop")
    for r in readers:
        with trio.fail_after(60):
            await r.event("done").wait()
            await r.proc.wait()
        ports, frames = harness.read_frames(r.out)
        for index, port in ports.items():
            subs[index] = Sub(index, port)
        for t, index, payload in frames:
            subs[index].frames.append((t, payload))
    return [subs[i] for i in sorted(subs)]


async def _rpc(ws: trio_websocket.WebSocketConnection, rid: int, method: str, params: Any) -> Any:
    msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    await ws.send_message(msgspec.json.encode(msg).decode())
    while True:
        doc = msgspec.json.decode(await ws.get_message())
        if doc.get("id") == rid:
            if "error" in doc:
                raise RuntimeError(f"{method}: {doc['error']}")
            return doc["result"]


def _headers(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


@attrs.define
class Driven:
    subs: list[Sub]
    thread_id: str
    run_id: str
    cpu: list[tuple[float, float]]
    #: The reader processes' CPU, summed.
    own_cpu: list[tuple[float, float]]


async def _drive(
    args: argparse.Namespace, port: int, token: str, daemon_pid: int, root: Path
) -> Driven:
    url = f"ws://127.0.0.1:{port}/"
    daemon = psutil.Process(daemon_pid)
    cpu: list[tuple[float, float]] = []
    own_cpu: list[tuple[float, float]] = []
    async with (
        trio_websocket.open_websocket_url(url, extra_headers=_headers(token)) as control,
        trio.open_nursery() as nursery,
    ):
        created = await _rpc(
            control,
            1,
            "thread.create",
            {
                "commandId": "fanout-create",
                "provider": "codex",
                "cwd": str(root / "work"),
                "title": "fanout",
            },
        )
        thread_id = str(created["result"]["threadId"])
        readers = await _start_readers(
            nursery, args, root, "daemon", port, root / "state" / "api-token", thread_id
        )
        procs = [psutil.Process(r.proc.pid) for r in readers]

        async def sample() -> None:
            while True:
                t = daemon.cpu_times()
                own = 0.0
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        o = p.cpu_times()
                        own += o.user + o.system
                now = time.monotonic()
                cpu.append((now, t.user + t.system))
                own_cpu.append((now, own))
                await trio.sleep(0.25)

        nursery.start_soon(sample)
        await trio.sleep(0.5)  # let the snapshots drain
        sent = await _rpc(
            control,
            2,
            "run.send",
            {"commandId": "fanout-send", "threadId": thread_id, "text": "stream, please"},
        )
        run_id = str(sent["result"]["runId"])
        with trio.fail_after(args.seconds * 4 + 60):
            await readers[0].event("run-ended").wait()
        await trio.sleep(0.5)  # stragglers
        subs = await _stop_readers(readers)
        nursery.cancel_scope.cancel()
    return Driven(subs, thread_id, run_id, cpu, own_cpu)


# -- the physical floor ------------------------------------------------------------------


@attrs.define
class Floor:
    #: Bare fan-out: batch written (first socket) -> frame read, over subscribers x events.
    fanout: list[float]
    #: One 4 KiB write + fdatasync in the state dir's file system.
    fdatasync: list[float]
    sizes: int


def _floor_schedule(
    sub: Sub, publish: list[list[Any]]
) -> list[tuple[float, list[bytes], list[int]]]:
    """Subscriber 0's event frames, grouped as the daemon published them, at its times."""
    batch_of: dict[int, int] = {}
    for i, (_t, first, last) in enumerate(publish):
        for seq in range(first, last + 1):
            batch_of[seq] = i
    grouped: dict[int, tuple[list[bytes], list[int]]] = {}
    for _recv, frame in sub.frames:
        m = SEND_SEQ.search(frame[:200])
        if m is None or b'"method":"event"' not in frame[:200]:
            continue
        seq = int(m.group(1))
        if seq in batch_of:
            frames, seqs = grouped.setdefault(batch_of[seq], ([], []))
            frames.append(frame)
            seqs.append(seq)
    t0 = publish[0][0] if publish else 0.0
    return [(publish[i][0] - t0, *grouped[i]) for i in sorted(grouped)]


def measure_fdatasync(directory: Path, count: int = 200) -> list[float]:
    """The disk's floor for a commit: a small write and its fdatasync, ``count`` times."""
    out: list[float] = []
    path = directory / "fdatasync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        block = b"x" * 4096
        for _ in range(count):
            t = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            out.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    return out


async def _floor(args: argparse.Namespace, root: Path, sub: Sub, rec: dict[str, Any]) -> Floor:
    schedule = _floor_schedule(sub, rec["publish"])
    path = root / "floor.schedule"
    with path.open("wb") as f:
        for offset, frames, seqs in schedule:
            line = [offset, [fr.decode("latin-1") for fr in frames], seqs]
            f.write(json.dumps(line).encode() + b"\n")
    token_file = root / "floor-token"
    token_file.write_text("floor")
    async with trio.open_nursery() as nursery:
        writer = await _spawn(
            nursery,
            ["floor", "--count", str(args.subscribers), "--schedule", str(path)],
            root / "floor.stamps",
        )
        with trio.fail_after(30):
            await writer.event("port").wait()
        readers = await _start_readers(
            nursery, args, root, "floor", int(writer.values["port"]), token_file, "floor"
        )
        await writer.event("connected").wait()
        await writer.say("go")
        with trio.fail_after(args.seconds * 4 + 60):
            await writer.event("done").wait()
        await trio.sleep(0.3)
        subs = await _stop_readers(readers)
        await writer.say("bye")
        await writer.proc.wait()
        nursery.cancel_scope.cancel()
    stamp: dict[int, float] = {}
    for t, seqs in json.loads((root / "floor.stamps").read_text()):
        for seq in seqs:
            stamp[seq] = t
    lat: list[float] = []
    for s in subs:
        for recv, frame in s.frames:
            m = SEND_SEQ.search(frame[:200])
            if m is not None and int(m.group(1)) in stamp:
                lat.append(recv - stamp[int(m.group(1))])
    return Floor(lat, measure_fdatasync(root), len(schedule))


# == analysis ===========================================================================


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    k = min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def summary(values_s: Sequence[float]) -> dict[str, Any]:
    ms = [v * 1000 for v in values_s]
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 50), 2),
        "p99_ms": round(pct(ms, 99), 2),
        "max_ms": round(max(ms), 2) if ms else math.nan,
    }


def cpu_between(
    samples: list[tuple[float, float]], start: float, end: float
) -> tuple[float, float]:
    """Average CPU% (of one core) over [start, end], and the peak over ~1 s windows."""

    def at(t: float) -> float:
        for (t0, c0), (t1, c1) in itertools.pairwise(samples):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return samples[-1][1] if t > samples[-1][0] else samples[0][1]

    avg = (at(end) - at(start)) / (end - start) * 100 if end > start else math.nan
    inside = [s for s in samples if start <= s[0] <= end]
    peak = 0.0
    for a, b in zip(inside, inside[4:], strict=False):
        if b[0] > a[0]:
            peak = max(peak, (b[1] - a[1]) / (b[0] - a[0]) * 100)
    return avg, peak


@attrs.define
class Analysis:
    figures: dict[str, Any]
    lines: list[str]


def analyse(
    args: argparse.Namespace, driven: Driven, rec: dict[str, Any], floor: Floor
) -> Analysis:
    read: list[float] = rec["read"]
    delta_read: list[float] = rec["delta_read"]
    markers: dict[str, int] = rec["markers"]
    flush = {int(k): v for k, v in rec["flush"].items()}
    publish_at: dict[int, float] = {}
    for t, first, last in rec["publish"]:
        for seq in range(first, last + 1):
            publish_at[seq] = t
    sent_at: dict[tuple[int, int], tuple[float, float]] = {
        (port, seq): (before, after) for before, after, port, seq, _size in rec["sends"]
    }
    start: float = rec["stream_start"]
    end: float = rec["stream_end"]
    behind = [r - d for r, d in zip(delta_read, rec["delta_due"], strict=True)]

    upsert_lat: list[float] = []
    upsert_started: list[float] = []
    upsert_completed: list[float] = []
    item_queued: dict[str, float] = rec["item_queued"]
    upsert_from_queued: list[float] = []
    by_item: dict[str, list[float]] = {}
    publish_first: dict[str, float] = {}
    upsert_read_to_queued: list[float] = []
    upsert_queued_to_publish: list[float] = []
    upsert_queued_to_commit: list[float] = []
    upsert_commit: list[float] = []
    upsert_commit_to_publish: list[float] = []
    commits = sorted(rec["commits"], key=lambda c: c[1])
    commit_ends = [c[1] for c in commits]
    flush_lat: list[float] = []
    first_lat: list[float] = []
    every_lat: list[float] = []
    publish_lat: list[float] = []
    window: list[float] = []
    flush_to_publish: list[float] = []
    publish_to_sent: list[float] = []
    publish_to_send_start: list[float] = []
    send_start_to_done: list[float] = []
    frame_bytes = 0
    sent_to_recv: list[float] = []
    resyncs = 0
    per_sub_events: list[int] = []
    per_sub_seqs: list[set[int]] = []
    stamps_seen: list[int] = []
    spread: dict[int, list[float]] = {}
    decode = msgspec.json.decode
    for sub in driven.subs:
        n_events = 0
        seqs: set[int] = set()
        stamps: set[int] = set()
        for recv, text in sub.frames:
            doc = decode(text)
            method = doc.get("method")
            if method == "resync":
                resyncs += 1
                continue
            if method != "event":
                continue
            params = doc["params"]
            seq = int(params["sequence"])
            env = params["event"]
            seqs.add(seq)
            spread.setdefault(seq, []).append(recv)
            if start <= recv <= end + 1.0:
                n_events += 1
                frame_bytes += len(text)
            if seq in publish_at:
                publish_lat.append(recv - publish_at[seq])
                sent = sent_at.get((sub.port, seq))
                if sent is not None:
                    publish_to_sent.append(sent[1] - publish_at[seq])
                    publish_to_send_start.append(sent[0] - publish_at[seq])
                    send_start_to_done.append(sent[1] - sent[0])
                    sent_to_recv.append(recv - sent[1])
            payload = env["payload"]
            kind = env["type"]
            if kind == "turn_item.delta":
                found = [(int(i), delta_read[int(i)]) for i in STAMP.findall(payload["text"])]
                if not found:
                    continue
                first_idx, first_t = found[0]
                first_lat.append(recv - first_t)
                every_lat.extend(recv - t for _, t in found)
                stamps.update(i for i, _ in found)
                if first_idx in flush:
                    flush_lat.append(recv - flush[first_idx])
                    if sub.index == 0:
                        window.append(flush[first_idx] - first_t)
                        if seq in publish_at:
                            flush_to_publish.append(publish_at[seq] - flush[first_idx])
            elif kind == "turn_item.upserted":
                item = payload["item"]
                ref = (item.get("nativeItemRef") or {}).get("value")
                status = item.get("status")
                key = f"started:{ref}" if status == "running" else f"completed:{ref}"
                if key in markers:
                    lat = recv - read[markers[key]]
                    upsert_lat.append(lat)
                    by_item.setdefault(key, []).append(lat)
                    (upsert_started if status == "running" else upsert_completed).append(lat)
                    queued = item_queued.get(key)
                    if queued is not None:
                        upsert_from_queued.append(recv - queued)
                        if sub.index == 0:
                            upsert_read_to_queued.append(queued - read[markers[key]])
                            if seq in publish_at:
                                upsert_queued_to_publish.append(publish_at[seq] - queued)
                                publish_first[key] = publish_at[seq]
                                # Its commit: the last to end before the publish.
                                c = bisect.bisect_right(commit_ends, publish_at[seq]) - 1
                                if c >= 0:
                                    c_start, c_end = commits[c][0], commits[c][1]
                                    upsert_queued_to_commit.append(c_start - queued)
                                    upsert_commit.append(c_end - c_start)
                                    upsert_commit_to_publish.append(publish_at[seq] - c_end)
        per_sub_events.append(n_events)
        per_sub_seqs.append(seqs)
        stamps_seen.append(len(stamps))

    duration = end - start
    gcs = [g for g in rec["gc"] if start <= g[0] <= end]
    all_seqs = set().union(*per_sub_seqs) if per_sub_seqs else set()
    complete = all(s == all_seqs for s in per_sub_seqs)
    deltas = len(delta_read)
    every_stamp = all(n == deltas for n in stamps_seen)
    spreads = [max(v) - min(v) for v in spread.values() if len(v) > 1]
    cpu_avg, cpu_peak = cpu_between(driven.cpu, start, end)
    own_avg, _ = cpu_between(driven.own_cpu, start, end)
    rate_events = [n / duration for n in per_sub_events]

    fig: dict[str, Any] = {
        "subscribers": args.subscribers,
        "rate": args.rate,
        "seconds": args.seconds,
        "sync": args.sync,
        "item_deltas": args.item_deltas,
        "deltas_read": deltas,
        "items": rec["items"],
        "stream_seconds": round(duration, 3),
        "delta_read_rate": round(deltas / duration, 1),
        "reader_behind_schedule": summary(behind),
        "stored_events_for_thread": len(all_seqs),
        "commits": len(rec["commits"]),
        "commit_ms": summary([e - s for s, e, *_ in rec["commits"]]),
        "commit_cpu_ms": summary([c[3] for c in rec["commits"]]),
        "commit_statement_ms": summary([c[4] for c in rec["commits"]]),
        "events_per_subscriber_per_s": {
            "min": round(min(rate_events), 2),
            "mean": round(sum(rate_events) / len(rate_events), 2),
            "max": round(max(rate_events), 2),
        },
        "every_subscriber_got_every_event": complete,
        "every_subscriber_saw_every_delta": every_stamp,
        "resyncs": resyncs,
        "latency_item_upsert_read_to_subscriber": summary(upsert_lat),
        "latency_item_started_read_to_subscriber": summary(upsert_started),
        "latency_item_completed_read_to_subscriber": summary(upsert_completed),
        "latency_item_upsert_queued_to_subscriber": summary(upsert_from_queued),
        "latency_delta_flush_to_subscriber": summary(flush_lat),
        "latency_delta_first_frame_to_subscriber": summary(first_lat),
        "latency_delta_every_frame_to_subscriber": summary(every_lat),
        "latency_publish_to_subscriber": summary(publish_lat),
        "breakdown": {
            "item_frame_read_to_queued": summary(upsert_read_to_queued),
            "item_queued_to_publish": summary(upsert_queued_to_publish),
            "item_queued_to_commit_start": summary(upsert_queued_to_commit),
            "item_commit": summary(upsert_commit),
            "item_commit_end_to_publish": summary(upsert_commit_to_publish),
            "coalescing_window_first_read_to_flush": summary(window),
            "flush_to_publish": summary(flush_to_publish),
            "publish_to_server_send_done": summary(publish_to_sent),
            "publish_to_server_send_start": summary(publish_to_send_start),
            "server_send_start_to_done": summary(send_start_to_done),
            "server_send_done_to_subscriber": summary(sent_to_recv),
            "first_to_last_subscriber_per_event": summary(spreads),
        },
        "bytes_per_subscriber_per_s": round(frame_bytes / len(driven.subs) / duration),
        "event_frames_written_on_publish": rec["frames_direct"],
        "event_frames_through_write_loops": rec["frames_queued"],
        "direct_writes_partial": rec["direct_partial"],
        "gc_during_stream": {
            "passes": len(gcs),
            "gen2_passes": sum(1 for _, g, _ in gcs if g == 2),
            "total_ms": round(sum(d for _, _, d in gcs) * 1000, 1),
            "max_ms": round(max((d for _, _, d in gcs), default=0.0) * 1000, 1),
        },
        "daemon_cpu_percent": round(cpu_avg, 1),
        "daemon_cpu_peak_1s_percent": round(cpu_peak, 1),
        "subscriber_processes_cpu_percent": round(own_avg, 1),
        "floor": {
            "fanout_write_to_subscriber": summary(floor.fanout),
            "fdatasync_4k": summary(floor.fdatasync),
            "batches": floor.sizes,
        },
    }
    fl = fig["floor"]["fanout_write_to_subscriber"]
    sync = fig["floor"]["fdatasync_4k"]

    def ratio(figure: dict[str, Any], base: dict[str, Any], q: str) -> float:
        return round(figure[q] / base[q], 1) if base[q] > 0 else math.nan

    fig["ratio_to_floor"] = {
        name: {q: ratio(fig[key], fl, q) for q in ("p50_ms", "p99_ms")}
        for name, key in (
            ("item_upsert_read_to_subscriber", "latency_item_upsert_read_to_subscriber"),
            ("delta_flush_to_subscriber", "latency_delta_flush_to_subscriber"),
            ("publish_to_subscriber", "latency_publish_to_subscriber"),
        )
    }
    up99 = fig["latency_item_upsert_read_to_subscriber"]["p99_ms"]
    fl99 = fig["latency_delta_flush_to_subscriber"]["p99_ms"]
    ff99 = fig["latency_delta_first_frame_to_subscriber"]["p99_ms"]
    window_target = DEFAULT_WINDOW_S * 1000 + TARGET_P99_MS
    fig["pass_item_upsert_p99"] = up99 < TARGET_P99_MS
    fig["pass_delta_flush_p99"] = fl99 < TARGET_P99_MS
    fig["pass_delta_first_frame_p99_window_adjusted"] = ff99 < window_target
    fig["pass_no_resync"] = resyncs == 0 and complete

    def row(label: str, s: dict[str, Any], target: str = "") -> str:
        figures = f"{s['n']:>7,} {s['p50_ms']:>8.2f} {s['p99_ms']:>8.2f} {s['max_ms']:>8.2f}"
        return f"  {label:<44} {figures}  {target}"

    be = fig["breakdown"]
    lines = [
        f"stream: {deltas:,} deltas read in {duration:.2f} s ({deltas / duration:,.0f}/s) over "
        f"{rec['items']} items of {args.item_deltas} deltas; reader behind schedule p50 "
        f"{fig['reader_behind_schedule']['p50_ms']:.2f} ms, p99 "
        f"{fig['reader_behind_schedule']['p99_ms']:.2f} ms, max "
        f"{fig['reader_behind_schedule']['max_ms']:.2f} ms",
        f"store: {len(all_seqs):,} events for the thread, {len(rec['commits']):,} commits "
        f"(batch decide -> commit p50 {fig['commit_ms']['p50_ms']:.2f} ms, "
        f"p99 {fig['commit_ms']['p99_ms']:.2f} ms; the writer thread's CPU in it p50 "
        f"{fig['commit_cpu_ms']['p50_ms']:.2f} ms, p99 {fig['commit_cpu_ms']['p99_ms']:.2f} ms; "
        + (
            f"its COMMIT statement p50 {fig['commit_statement_ms']['p50_ms']:.2f} ms, p99 "
            f"{fig['commit_statement_ms']['p99_ms']:.2f} ms; "
            if args.commit_trace
            else ""
        )
        + f"synchronous={args.sync})",
        f"delivery: {args.subscribers} subscribers, events/s each during the stream: min "
        f"{min(rate_events):.1f}, mean {sum(rate_events) / len(rate_events):.1f}, max "
        f"{max(rate_events):.1f} ({fig['bytes_per_subscriber_per_s'] / 1e3:,.0f} kB/s); "
        f"every subscriber got every event: {'yes' if complete else 'NO'}; "
        f"every delta stamp seen by all: {'yes' if every_stamp else 'NO'}; resync: "
        f"{resyncs if resyncs else 'none'}",
        f"event frames written on the publishing task: {rec['frames_direct']:,} of "
        f"{rec['frames_direct'] + rec['frames_queued']:,} (the rest through write loops); "
        f"direct writes the socket took only part of: {rec['direct_partial']:,}",
        "",
        f"  {'latency (ms)':<44} {'n':>7} {'p50':>8} {'p99':>8} {'max':>8}  target",
        row(
            "item upserts: frame read -> subscriber",
            fig["latency_item_upsert_read_to_subscriber"],
            f"p99 < {TARGET_P99_MS:.0f}: {verdict(fig['pass_item_upsert_p99'])}",
        ),
        row("  of which item/started", fig["latency_item_started_read_to_subscriber"]),
        row("  of which item/completed", fig["latency_item_completed_read_to_subscriber"]),
        row(
            "item upserts: pump queued -> subscriber",
            fig["latency_item_upsert_queued_to_subscriber"],
        ),
        row(
            "deltas: coalescer flush -> subscriber",
            fig["latency_delta_flush_to_subscriber"],
            f"p99 < {TARGET_P99_MS:.0f}: {verdict(fig['pass_delta_flush_p99'])}",
        ),
        row(
            "deltas: first frame of batch -> subscriber",
            fig["latency_delta_first_frame_to_subscriber"],
            f"p99 < {window_target:.0f} (window + {TARGET_P99_MS:.0f}): "
            f"{verdict(fig['pass_delta_first_frame_p99_window_adjusted'])}",
        ),
        row(
            "deltas: every frame -> subscriber (info)",
            fig["latency_delta_every_frame_to_subscriber"],
        ),
        row("every event: publish -> subscriber (info)", fig["latency_publish_to_subscriber"]),
        "",
        "  breakdown (ms)",
        row("item: frame read -> pump queued it", be["item_frame_read_to_queued"]),
        row("item: queued -> commit published", be["item_queued_to_publish"]),
        row("  of which queued -> its commit starts", be["item_queued_to_commit_start"]),
        row("  of which its decide -> commit", be["item_commit"]),
        row("  of which commit end -> published", be["item_commit_end_to_publish"]),
        row("window: first frame read -> flush", be["coalescing_window_first_read_to_flush"]),
        row("flush -> commit published", be["flush_to_publish"]),
        row("published -> server send done", be["publish_to_server_send_done"]),
        row("  of which published -> send start", be["publish_to_server_send_start"]),
        row("  of which send start -> send done", be["server_send_start_to_done"]),
        row("server send done -> subscriber", be["server_send_done_to_subscriber"]),
        row("first -> last subscriber, same event", be["first_to_last_subscriber_per_event"]),
        "",
        "  slowest item upserts (frame read -> last subscriber; read -> queued -> published): "
        + "; ".join(
            f"{key} {max(lats) * 1e3:.0f} ms"
            + (
                f" ({(item_queued[key] - read[markers[key]]) * 1e3:.0f} / "
                f"{(publish_first.get(key, math.nan) - item_queued[key]) * 1e3:.0f})"
                if key in item_queued
                else ""
            )
            for key, lats in sorted(by_item.items(), key=lambda kv: -max(kv[1]))[:3]
        ),
        "",
        f"daemon GC during the stream: {len(gcs)} passes "
        f"({fig['gc_during_stream']['gen2_passes']} full), "
        f"{fig['gc_during_stream']['total_ms']:.0f} ms in all, longest "
        f"{fig['gc_during_stream']['max_ms']:.1f} ms",
        f"daemon CPU during the stream: {cpu_avg:.1f}% of one core (peak 1 s: {cpu_peak:.1f}%); "
        f"subscriber processes ({max(1, min(args.reader_procs, args.subscribers))}, "
        f"raw-socket readers): {own_avg:.1f}%",
        "",
        "  physical floor of this machine, measured in this run (ms)",
        row(
            "bare fan-out: write -> subscriber",
            fl,
            f"(one process, the same frames to {args.subscribers} loopback sockets "
            "at the daemon's publish times, the same readers)",
        ),
        row("4 KiB write + fdatasync (the disk)", sync),
        "  ratio to the bare fan-out floor (p50 / p99):",
        *(
            f"    {name.replace('_', ' '):<42} {r['p50_ms']:>6}x {r['p99_ms']:>6}x"
            for name, r in fig["ratio_to_floor"].items()
        ),
        f"no resync and complete delivery: {verdict(fig['pass_no_resync'])}",
    ]
    return Analysis(fig, lines)


# == main ===============================================================================


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--rate", type=float, default=2000.0, help="deltas per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the run streams")
    parser.add_argument(
        "--item-deltas", default="200:2000", help="deltas per item, LOW:HIGH (uniform)"
    )
    parser.add_argument("--sync", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--profile", action="store_true", help="cProfile the daemon process")
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="what-if: the daemon's sys.setswitchinterval in ms (Python's default is 5)",
    )
    parser.add_argument(
        "--ascii",
        action="store_true",
        help="what-if: ASCII-only delta text (the default mixes in é and —, as real text does)",
    )
    parser.add_argument(
        "--steps", action="store_true", help="time the daemon's trio task steps and loop ticks"
    )
    parser.add_argument(
        "--reader-procs",
        type=int,
        default=2,
        help="processes the subscribers are spread over (bench/ws_harness.py readers)",
    )
    parser.add_argument(
        "--commit-trace",
        action="store_true",
        help="time the COMMIT statement (an SQLite trace callback per statement: it slows "
        "the writer, so it is off by default)",
    )
    parser.add_argument(
        "--wal-autocheckpoint",
        type=int,
        default=None,
        help="what-if: the writer's PRAGMA wal_autocheckpoint (pages; SQLite's default 1000)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the state dir")
    parser.add_argument("--daemon-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.daemon_child:
        return daemon_child(args)

    say: Callable[[str], None] = (lambda _s: None) if args.json else print
    load = os.getloadavg()
    say(
        f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )
    say(
        f"{args.subscribers} WebSocket subscribers (threadDetail), {args.rate:,.0f} deltas/s for "
        f"{args.seconds:g} s; daemon in its own process (synchronous={args.sync})"
    )
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="t3fan-", dir="/tmp"))
    state = root / "state"
    work = root / "work"
    work.mkdir()
    err_path = root / "daemon.stderr"
    child_args = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--daemon-child",
        str(state),
        "--rate",
        str(args.rate),
        "--seconds",
        str(args.seconds),
        "--item-deltas",
        args.item_deltas,
        "--sync",
        args.sync,
        *(["--profile"] if args.profile else []),
        *(["--steps"] if args.steps else []),
        *(["--ascii"] if args.ascii else []),
        *(["--switch-interval", str(args.switch_interval)] if args.switch_interval else []),
        *(["--commit-trace"] if args.commit_trace else []),
        *(
            ["--wal-autocheckpoint", str(args.wal_autocheckpoint)]
            if args.wal_autocheckpoint is not None
            else []
        ),
    ]
    try:
        with err_path.open("wb") as err:
            proc = subprocess.Popen(
                child_args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
            try:
                assert proc.stdout is not None and proc.stdin is not None
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("the daemon did not start")
                hello = json.loads(line)
                token = read_token(state)
                driven = trio.run(_drive, args, int(hello["port"]), token, int(hello["pid"]), root)
                proc.stdin.write(b"stop\n")
                proc.stdin.flush()
                proc.wait(timeout=60)
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
                sys.stderr.write(err_path.read_text()[-4000:])
                raise
        rec = json.loads((root / "records.json").read_bytes())
        # The floor runs once the daemon is gone: the machine's own cost of the same
        # fan-out (same frames, same schedule, same readers), measured in this run.
        floor = trio.run(_floor, args, root, driven.subs[0], rec)
        result = analyse(args, driven, rec, floor)
        result.figures["load_average_at_start"] = [round(x, 2) for x in load]
        result.figures["cpus"] = os.cpu_count()
        result.figures["wall_seconds"] = round(time.perf_counter() - started, 1)
        for text in result.lines:
            say(text)
        if args.steps:
            say("")
            say("== daemon trio loop (task steps) ==")
            say(rec["steps"])
        if args.profile:
            say("")
            say("== daemon profile (main thread, tottime) ==")
            say(rec["profile"])
        say(f"total {time.perf_counter() - started:.1f} s")
        if args.json:
            print(json.dumps(result.figures, indent=2))
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    f = result.figures
    ok = f["pass_item_upsert_p99"] and f["pass_delta_flush_p99"] and f["pass_no_resync"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
