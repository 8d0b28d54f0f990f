"""Codex adapter benchmark: the real adapter (and the log behind it) against bare msgspec.

Prints figures; it is not a timed test (issue 3, section Benchmark). A synthetic
``--frames`` Codex stream in the real 0.169.0 shapes (turns of ``turn/started``,
user/agent/command items, mostly ``item/agentMessage/delta`` and
``item/commandExecution/outputDelta`` with ``emittedAtMs``, token usage, rate
limits, status changes, ``turn/completed``) is measured three ways:

1. **Bare decode**, the physical limit: ``msgspec.json.decode`` of every line (and,
   for reference, a typed envelope keeping ``params`` as ``msgspec.Raw``).
2. **Adapter alone**: the real ``CodexAdapter.open_runtime`` (frame decoder, client
   routing, mapper, event queue) over an in-memory :class:`FastCodexProcess` that
   answers ``initialize``/``thread/start``/``turn/start`` and then hands out that
   turn's lines as fast as they are asked for (it yields to trio once per 64 KiB,
   as a pipe read would). A consumer takes the queued events in batches. Target:
   >= 30% of the bare decode rate. For reference the same run through the real
   ``BoundedLineReader`` over 64 KiB chunks is printed as well.
3. **Adapter + log**: the real ``SessionRunner`` (its ``_pump``: one
   ``EventQueue.take``, ``DeltaCoalescer``, ``CoreService.ingest``) over the same
   process, into a real store (``open_core`` on a temp file, ``synchronous=FULL``),
   one ``send_message`` + ``start_turn`` + ``wait_turn`` per turn as the manager
   does. Target: >= 50,000 frames/s. The events stored against frames in (the
   coalescing ratio) are printed too.

Each throughput is the best of ``--runs`` runs (the machine is shared; the load
average at start is printed). ``--profile`` prints a cProfile of one run of each
adapter phase.

Run: ``python bench/codex_adapter.py [--frames N] [--turn-frames N] [--runs N] [--json]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import random
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio

# Run as ``python bench/codex_adapter.py``, this directory comes first on sys.path, where
# ``bench/supervisor.py`` would shadow the ``supervisor`` package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _HERE]

import supervisor.session as session_mod  # noqa: E402
from adapters.codex.adapter import CodexAdapter  # noqa: E402
from adapters.codex.frames import (  # noqa: E402
    Delta,
    ItemCompletedFrame,
    ItemStartedFrame,
    Notification,
    decode_frames,
)
from adapters.codex.mapper import CodexMapper  # noqa: E402
from adapters.diagnostics import RotatingRawLog  # noqa: E402
from adapters.line_reader import BoundedLineReader  # noqa: E402
from adapters.protocol import NullRawSink, RawFrameSink, RuntimeConfig  # noqa: E402
from adapters.transport import DEFAULT_MAX_LINE_BYTES, ExitStatus, LaunchSpec, OversizedLine  # noqa: E402
from supervisor.session import MAX_INGEST_BATCH, SessionRunner  # noqa: E402
from t3orch.commands.specs import CreateThread  # noqa: E402
from t3orch.core import open_core  # noqa: E402
from t3orch.ingest.queue import EventQueue  # noqa: E402
from t3orch.provider_events import RuntimeExited, TurnCompleted  # noqa: E402
from t3orch.provider_versions import CODEX_TESTED  # noqa: E402

#: Targets of issue 3.
TARGET_ADAPTER_RATIO = 0.30
TARGET_LOG_FPS = 50_000.0

#: What one pipe read hands over at most (the real ``BoundedLineReader`` chunk).
CHUNK_BYTES = 64 * 1024
#: The event queue's bound in a session (``SessionRunner.run`` uses MAX_INGEST_BATCH).
QUEUE_SIZE = MAX_INGEST_BATCH

CODEX_VERSION = CODEX_TESTED
THREAD_ID = "01a22d23-29ff-7810-a22a-20759d90506a"
USER_AGENT = f"t3orch/{CODEX_VERSION} (Debian 12.0.0; x86_64) unknown (t3orch; 0.1.0)"

_VOCABULARY = """
the file module function returns value error test passes build config path import class
method update change line diff output result check run command src tests README lock cache
index query schema commit branch merge patch fixture adapter stream frame decode
"""
_WORDS = tuple(_VOCABULARY.split())
_SYMBOLS = ("`", '"', "(", ")", ":", ".", ",", "—", "é", "\n", "\t", "\\")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


# -- the synthetic stream -------------------------------------------------------------


def _line(frame: dict[str, Any]) -> bytes:
    return msgspec.json.encode(frame)


@attrs.define
class Stream:
    """The inbound side of one ``codex app-server``: responses and per-turn frames."""

    initialize: bytes
    thread_start: bytes
    #: Per turn: the ``turn/start`` result (the id is filled in at reply time), then its lines.
    turn_results: list[dict[str, Any]]
    turns: list[list[bytes]]

    @property
    def frames(self) -> int:
        return 2 + len(self.turns) + sum(len(t) for t in self.turns)

    def lines(self) -> list[bytes]:
        """Every inbound line in order (``turn/start`` replies numbered as the adapter will)."""
        out = [self.initialize, self.thread_start]
        for index, (result, turn) in enumerate(zip(self.turn_results, self.turns, strict=True)):
            out.append(_line({"id": index + 3, "result": result}))
            out.extend(turn)
        return out

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for turn in self.turns:
            for line in turn:
                end = line.find(b'"', 11)
                method = line[11:end].decode()
                counts[method] = counts.get(method, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


class StreamBuilder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ms = 1_796_053_608_953
        self.items = 0

    def tick(self, low: int = 0, high: int = 3) -> int:
        self.ms += self.rng.randint(low, high)
        return self.ms

    def words(self, chars: int) -> str:
        out: list[str] = []
        n = 0
        while n < chars:
            word = self.rng.choice(_WORDS)
            if self.rng.random() < 0.08:
                word += self.rng.choice(_SYMBOLS)
            out.append(word)
            n += len(word) + 1
        return " ".join(out)[:chars]

    def note(self, method: str, params: dict[str, Any]) -> bytes:
        return _line({"method": method, "params": params, "emittedAtMs": self.tick()})

    def turn_object(self, turn_id: str, **over: Any) -> dict[str, Any]:
        turn: dict[str, Any] = {
            "id": turn_id,
            "rootTurnId": turn_id,
            "items": [],
            "itemsView": "notLoaded",
            "status": "inProgress",
            "error": None,
            "startedAt": None,
            "completedAt": None,
            "durationMs": None,
        }
        turn.update(over)
        return turn

    def agent_item(self, ref: str, text: str, done: bool, started: int) -> dict[str, Any]:
        return {
            "type": "agentMessage",
            "moderation": None,
            "id": ref,
            "text": text,
            "phase": None,
            "memoryCitation": None,
            "delivery": None,
            "questions": None,
            "startedAtMs": started,
            "completedAtMs": self.ms if done else None,
        }

    def command_item(
        self, ref: str, command: str, output: str | None, done: bool, started: int
    ) -> dict[str, Any]:
        return {
            "type": "commandExecution",
            "id": ref,
            "pluginId": None,
            "scriptPath": None,
            "command": f"/bin/bash -lc '{command}'",
            "cwd": "/tmp/t3orch-bench/work",
            "processId": "34814" if done else None,
            "source": "agent",
            "status": "completed" if done else "inProgress",
            "commandActions": [{"type": "unknown", "command": command}],
            "aggregatedOutput": output,
            "exitCode": 0 if done else None,
            "durationMs": self.ms - started if done else None,
            "startedAtMs": started,
            "completedAtMs": self.ms if done else None,
        }

    def item_frames(self, turn_id: str, deltas: int) -> tuple[list[bytes], dict[str, Any]]:
        """One agent message or command execution with ``deltas`` streamed pieces."""
        self.items += 1
        base = {"threadId": THREAD_ID, "turnId": turn_id}
        started = self.tick()
        agent = self.rng.random() < 0.55
        ref = f"msg_{self.items}" if agent else f"call_{self.items}"
        command = f"pytest -q tests/test_{self.rng.choice(_WORDS)}.py"
        opening = (
            self.agent_item(ref, "", False, started)
            if agent
            else self.command_item(ref, command, None, False, started)
        )
        out = [
            self.note("item/started", {"item": opening, **base, "startedAtMs": started}),
        ]
        method = "item/agentMessage/delta" if agent else "item/commandExecution/outputDelta"
        parts: list[str] = []
        for _ in range(deltas):
            if agent:
                piece = self.words(self.rng.randint(2, 14))
                piece = piece if self.rng.random() < 0.9 else piece + " "
            else:
                piece = "".join(
                    self.words(self.rng.randint(20, 110)) + "\n"
                    for _ in range(self.rng.randint(1, 3))
                )
            parts.append(piece)
            out.append(self.note(method, {**base, "itemId": ref, "delta": piece}))
        text = "".join(parts)
        self.tick(1, 40)
        closing = (
            self.agent_item(ref, text, True, started)
            if agent
            else self.command_item(ref, command, text, True, started)
        )
        out.append(
            self.note(
                "item/completed",
                {**base, "item": closing, "contentTokenCount": None, "completedAtMs": self.ms},
            )
        )
        return out, closing

    def turn(self, index: int, budget: int) -> tuple[dict[str, Any], list[bytes]]:
        """One turn of exactly ``budget`` notification lines (``budget`` >= 12)."""
        turn_id = f"01a22d23-2a22-7680-9674-{index:012x}"
        base = {"threadId": THREAD_ID, "turnId": turn_id}
        second = self.ms // 1000
        head = [
            self.note(
                "thread/status/changed",
                {"threadId": THREAD_ID, "status": {"type": "active", "activeFlags": []}},
            ),
            self.note(
                "turn/started",
                {"threadId": THREAD_ID, "turn": self.turn_object(turn_id, startedAt=second)},
            ),
        ]
        user_ref = f"user_{index}"
        user = {
            "type": "userMessage",
            "id": user_ref,
            "clientId": None,
            "content": [{"type": "text", "text": f"step {index}", "text_elements": []}],
            "startedAtMs": self.ms,
            "completedAtMs": None,
        }
        head.append(self.note("item/started", {"item": user, **base, "startedAtMs": self.ms}))
        user = {**user, "completedAtMs": self.ms}
        head.append(
            self.note(
                "item/completed",
                {**base, "item": user, "contentTokenCount": None, "completedAtMs": self.ms},
            )
        )
        tail_size = 4
        remaining = budget - len(head) - tail_size
        body: list[bytes] = []
        last_agent: dict[str, Any] | None = None
        while remaining >= 3:
            deltas = min(self.rng.randint(40, 260), remaining - 2)
            if remaining - 2 - deltas < 3:
                deltas = remaining - 2
            frames, closing = self.item_frames(turn_id, deltas)
            body.extend(frames)
            remaining -= len(frames)
            if closing["type"] == "agentMessage":
                last_agent = closing
        for _ in range(remaining):  # pad with what a busy turn sends between items
            body.append(
                self.note(
                    "thread/status/changed",
                    {"threadId": THREAD_ID, "status": {"type": "active", "activeFlags": []}},
                )
            )
        usage = {
            "totalTokens": 1983 * index,
            "inputTokens": 1981 * index,
            "cachedInputTokens": 0,
            "cacheWriteInputTokens": 0,
            "outputTokens": 2 * index,
            "reasoningOutputTokens": 0,
        }
        tail = [
            self.note(
                "thread/tokenUsage/updated",
                {
                    **base,
                    "tokenUsage": {"total": usage, "last": usage, "modelContextWindow": 121600},
                },
            ),
            self.note(
                "account/rateLimits/updated",
                {
                    "rateLimits": {
                        "limitId": "codex",
                        "limitName": None,
                        "normalModelSlug": None,
                        "primary": None,
                        "secondary": None,
                        "credits": None,
                        "individualLimit": None,
                        "spendControlReached": None,
                        "planType": None,
                        "rateLimitReachedType": None,
                    }
                },
            ),
            self.note("thread/status/changed", {"threadId": THREAD_ID, "status": {"type": "idle"}}),
            self.note(
                "turn/completed",
                {
                    "threadId": THREAD_ID,
                    "turn": self.turn_object(
                        turn_id,
                        items=[last_agent] if last_agent else [],
                        itemsView="summary",
                        status="completed",
                        startedAt=second,
                        completedAt=self.ms // 1000,
                        durationMs=self.ms - second * 1000,
                    ),
                },
            ),
        ]
        lines = head + body + tail
        assert len(lines) == budget
        return self.turn_object(turn_id), lines


def build_stream(frames: int, turn_frames: int, seed: int = 3) -> Stream:
    """``frames`` inbound lines in all: two replies, then per turn its reply and its lines."""
    builder = StreamBuilder(seed)
    initialize = _line(
        {
            "id": 1,
            "result": {
                "userAgent": USER_AGENT,
                "codexHome": "/tmp/t3orch-bench/codex-home",
                "platformFamily": "unix",
                "platformOs": "linux",
            },
        }
    )
    thread: dict[str, Any] = {
        "id": THREAD_ID,
        "sessionId": THREAD_ID,
        "forkedFromId": None,
        "preview": "",
        "ephemeral": False,
        "modelProvider": "mock",
        "model": "mock-model",
        "createdAt": builder.ms // 1000,
        "status": {"type": "idle"},
        "cwd": "/tmp/t3orch-bench/work",
        "cliVersion": CODEX_VERSION,
        "source": "vscode",
        "turns": [],
    }
    thread_start = _line({"id": 2, "result": {"thread": thread, "model": "mock-model"}})
    left = frames - 2
    count = max(1, math.ceil(left / (turn_frames + 1)))
    results: list[dict[str, Any]] = []
    turns: list[list[bytes]] = []
    for index in range(1, count + 1):
        budget = math.ceil(left / (count - index + 1)) - 1
        result, lines = builder.turn(index, max(12, budget))
        results.append({"turn": result})
        turns.append(lines)
        left -= len(lines) + 1
    return Stream(initialize, thread_start, results, turns)


# -- an in-memory codex process ------------------------------------------------------


class _ChunkStream:
    """A ``ReceiveStream`` of queued byte chunks, for the real ``BoundedLineReader``."""

    def __init__(self, process: FastCodexProcess) -> None:
        self._process = process

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return await self._process.next_chunk(max_bytes or CHUNK_BYTES)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def pipe_reads(lines: list[bytes]) -> list[list[bytes]]:
    """``lines`` cut as 64 KiB pipe reads would hand them out: whole lines, at least one."""
    reads: list[list[bytes]] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        current.append(line)
        size += len(line) + 1
        if size >= CHUNK_BYTES:
            reads.append(current)
            current, size = [], 0
    if current:
        reads.append(current)
    return reads


class FastCodexProcess:
    """A :class:`~adapters.transport.ProviderProcess` answering from a :class:`Stream`.

    ``initialize``, ``thread/start`` and each ``turn/start`` are answered at once, the
    ``turn/start`` reply followed by that turn's lines. ``receive_lines`` hands out one
    ``CHUNK_BYTES`` read of whole lines per call without waiting (the reads are cut
    before the clock starts, as the lines are encoded before it) and yields to trio
    once per read, as a pipe read would; ``receive_line`` hands out the same lines one
    at a time. With ``framing=True`` the lines go through the real ``BoundedLineReader``.
    """

    def __init__(self, stream: Stream, *, framing: bool = False) -> None:
        self._stream = stream
        self._turn = 0
        self._turn_reads = [pipe_reads(turn) for turn in stream.turns]
        self._reads: deque[list[bytes]] = deque()
        self._partial: deque[bytes | OversizedLine] = deque()
        self._blob = bytearray()
        self._wake = trio.Event()
        self._stdout_open = True
        self._status: ExitStatus | None = None
        self._exited = trio.Event()
        self._reader = BoundedLineReader(_ChunkStream(self), DEFAULT_MAX_LINE_BYTES)  # type: ignore[arg-type]
        self._framing = framing
        self.delivered = 0

    @property
    def pid(self) -> int | None:
        return None

    def _emit(self, reads: list[list[bytes]]) -> None:
        if self._framing:
            for lines in reads:
                self._blob += b"\n".join(lines)
                self._blob += b"\n"
        else:
            self._reads.extend(reads)
        self._wake.set()

    async def send_line(self, line: bytes) -> None:
        if self._status is not None:
            raise trio.BrokenResourceError("the codex process has exited")
        frame = msgspec.json.decode(line)
        method, request_id = frame.get("method"), frame.get("id")
        if method == "initialize":
            self._emit([[self._stream.initialize]])
        elif method == "thread/start":
            self._emit([[self._stream.thread_start]])
        elif method == "turn/start":
            if self._turn >= len(self._stream.turns):
                raise RuntimeError("the bench asked for more turns than the stream holds")
            result = self._stream.turn_results[self._turn]
            reply = _line({"id": request_id, "result": result})
            first, *rest = self._turn_reads[self._turn]
            self._emit([[reply, *first], *rest])
            self._turn += 1
        elif request_id is not None:
            self._emit([[_line({"id": request_id, "result": {}})]])
        await trio.lowlevel.checkpoint()

    async def next_chunk(self, max_bytes: int) -> bytes:
        while not self._blob:
            if not self._stdout_open:
                return b""
            self._wake = trio.Event()
            await self._wake.wait()
        with memoryview(self._blob) as view:
            chunk = bytes(view[:max_bytes])
        del self._blob[:max_bytes]
        return chunk

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        if self._framing:
            framed = await self._reader.receive_lines()
            self.delivered += len(framed)
            return framed
        if self._partial:  # what receive_line left of a read
            lines = list(self._partial)
            self._partial.clear()
            return lines
        while not self._reads:
            if not self._stdout_open:
                return []
            self._wake = trio.Event()
            await self._wake.wait()
        await trio.lowlevel.checkpoint()
        read: list[bytes | OversizedLine] = list(self._reads.popleft())
        self.delivered += len(read)
        return read

    async def receive_line(self) -> bytes | OversizedLine | None:
        """The same lines one at a time (the adapter reads them with ``receive_lines``)."""
        if self._framing:
            framed = await self._reader.receive_line()
            self.delivered += framed is not None
            return framed
        if not self._partial:
            self._partial.extend(await self.receive_lines())
        return self._partial.popleft() if self._partial else None

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
            self._stdout_open = False
            self._wake.set()
            self._exited.set()


class FastLauncher:
    """A ``ProcessLauncher`` (and ``RecordingLauncher`` stand-in) handing out one process."""

    def __init__(self, process: FastCodexProcess) -> None:
        self.process = process
        self.launched: list[LaunchSpec] = []

    async def launch(self, spec: LaunchSpec) -> FastCodexProcess:
        self.launched.append(spec)
        await trio.lowlevel.checkpoint()
        return self.process

    @property
    def current(self) -> None:
        # No child to signal: SessionRunner's stop ladder ends at the protocol close.
        return None


def runtime_config() -> RuntimeConfig:
    return RuntimeConfig(command=["codex"], env={}, cwd="/tmp/t3orch-bench/work")


# -- measurements -----------------------------------------------------------------------


@attrs.define
class Run:
    seconds: float
    frames: int
    events: int = 0
    stored: int = 0
    transactions: int = 0
    #: Of ``seconds``: in ``send_message`` + ``start_turn`` (handoff + attempt, turn/start).
    starting: float = 0.0

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else math.inf


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.seconds)


def best_of(runs: int, stage: Callable[[list[bytes]], Run], lines: list[bytes]) -> Run:
    return best([stage(lines) for _ in range(runs)])


class _Envelope(msgspec.Struct):
    id: int | str | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw(b"")
    result: msgspec.Raw = msgspec.Raw(b"")
    error: msgspec.Raw = msgspec.Raw(b"")


def bare_decode(lines: list[bytes]) -> Run:
    decode = msgspec.json.decode
    start = time.perf_counter()
    for line in lines:
        decode(line)
    return Run(time.perf_counter() - start, len(lines))


def bare_envelope(lines: list[bytes]) -> Run:
    decode = msgspec.json.Decoder(_Envelope).decode
    start = time.perf_counter()
    for line in lines:
        decode(line)
    return Run(time.perf_counter() - start, len(lines))


async def adapter_alone(
    stream: Stream, *, framing: bool = False, raw_dir: Path | None = None
) -> Run:
    """The real adapter over the in-memory process; a consumer takes events in batches.

    ``raw_dir``: record raw frames with the daemon's ``RotatingRawLog`` there instead
    of the ``NullRawSink``.
    """
    process = FastCodexProcess(stream, framing=framing)
    raw: RawFrameSink = NullRawSink()
    raw_log: RotatingRawLog | None = None
    if raw_dir is not None:
        raw = raw_log = RotatingRawLog(raw_dir, "codex", f"bench-{time.monotonic_ns()}")
    queue = EventQueue(QUEUE_SIZE)
    turn_done = trio.Event()
    events = 0

    async def consume() -> None:
        nonlocal events, turn_done
        async with queue:
            while batch := await queue.take():
                events += len(batch)
                # An exact type test: ``isinstance`` against a msgspec Struct class
                # costs ~1,000 instructions per event, more than a tenth of the
                # adapter's own work, and this consumer is not part of the adapter.
                for event in batch:
                    if type(event) is TurnCompleted:
                        turn_done.set()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        async with CodexAdapter().open_runtime(
            runtime_config(), FastLauncher(process), queue, raw
        ) as rt:
            await rt.open_thread(None)
            for index in range(len(stream.turns)):
                turn_done = trio.Event()
                await rt.start_turn(f"step {index + 1}")
                await turn_done.wait()
            elapsed = time.perf_counter() - start
            await rt.close()
        queue.close()
    if raw_log is not None:
        raw_log.close()
    assert process.delivered == stream.frames, (process.delivered, stream.frames)
    return Run(elapsed, process.delivered, events=events)


async def adapter_and_log(stream: Stream, directory: Path, drain: int | None = None) -> Run:
    """The real SessionRunner (pump, coalescer, ingest) into a real store.

    ``SessionRunner.run`` builds its own ``RecordingLauncher`` (real processes); it is
    swapped for :class:`FastLauncher` while this runs. ``drain`` overrides the session's
    ``MAX_INGEST_BATCH`` (its event queue's bound; a what-if, not the shipped behaviour).
    """
    process = FastCodexProcess(stream)
    original = session_mod.RecordingLauncher  # type: ignore[attr-defined]
    original_drain = session_mod.MAX_INGEST_BATCH
    session_mod.RecordingLauncher = lambda nursery: FastLauncher(process)  # type: ignore[attr-defined,assignment,return-value]
    if drain is not None:
        session_mod.MAX_INGEST_BATCH = drain
    try:
        async with open_core(directory / "bench.sqlite") as core:
            svc = core.service
            created = await svc.create_thread(
                CreateThread(provider="codex", cwd="/tmp/t3orch-bench/work", title="bench")
            )
            thread_id = str(created.result["threadId"])
            runner = SessionRunner(
                core=svc,
                reader=core.reader,
                thread_id=thread_id,
                provider="codex",
                adapter=CodexAdapter(),
                config=runtime_config(),
            )
            async with trio.open_nursery() as nursery:
                stored_before = core.writer.stats.events
                batches_before = core.writer.stats.batches
                start = time.perf_counter()
                await nursery.start(runner.run)
                starting = 0.0
                for index in range(len(stream.turns)):
                    mark = time.perf_counter()
                    sent = await svc.send_message(thread_id, f"step {index + 1}")
                    await runner.start_turn(str(sent.result["runId"]), f"step {index + 1}")
                    starting += time.perf_counter() - mark
                    await runner.wait_turn()
                elapsed = time.perf_counter() - start
                stored = core.writer.stats.events - stored_before
                transactions = core.writer.stats.batches - batches_before
                runner.stop("bench done")
                await runner.exited.wait()
            exit_event = runner.exit_event
            assert isinstance(exit_event, RuntimeExited), exit_event
    finally:
        session_mod.RecordingLauncher = original  # type: ignore[attr-defined]
        session_mod.MAX_INGEST_BATCH = original_drain
    assert process.delivered == stream.frames, (process.delivered, stream.frames)
    return Run(
        elapsed, process.delivered, stored=stored, transactions=transactions, starting=starting
    )


# -- where the adapter's time goes: the hot path built up stage by stage ------------------


def stage_decode(lines: list[bytes]) -> Run:
    """``decode_frames`` alone, a 64 KiB read at a time (the Delta fast path for deltas)."""
    reads = pipe_reads(lines)
    start = time.perf_counter()
    for read in reads:
        decode_frames(list(read))
    return Run(time.perf_counter() - start, len(lines))


def _route(
    reads: list[list[bytes]],
    raw: RawFrameSink | None,
    deliver: Callable[[list[Any]], object],
    after_read: Callable[[], object] = lambda: None,
) -> None:
    """What ``CodexRuntime._on_read`` does with a read of deltas and notifications:
    one ``match`` over the frame structs, a frame's events appended to the read's list,
    one delivery."""
    mapper = CodexMapper()
    raw_id = "raw"
    for read in reads:
        out: list[Any] = []
        add = out.append
        for line, frame in zip(read, decode_frames(list(read)), strict=True):
            if raw is not None:
                raw_id = raw.record("incoming", line)
            match frame:
                case Delta(params=params):
                    add(mapper.delta(params.item_id, params.delta, raw_id))
                case Notification(method=method, params=params):
                    out += mapper.notification(method, params, raw_id)
                case ItemStartedFrame(params=item):
                    out += mapper.item_started(item, raw_id)
                case ItemCompletedFrame(params=item):
                    out += mapper.item_completed(item, raw_id)
        deliver(out)
        after_read()


def stage_map(lines: list[bytes], raw: RawFrameSink | None) -> Run:
    """``decode_frames`` + the mapper (as ``CodexRuntime._on_read`` routes), events dropped."""
    kept: deque[Any] = deque(maxlen=1)
    reads = pipe_reads(lines)
    start = time.perf_counter()
    _route(reads, raw, kept.append)
    return Run(time.perf_counter() - start, len(lines))


def stage_queue(lines: list[bytes]) -> Run:
    """The above + NullRawSink + the session's ``EventQueue``: one ``put_all`` per read,
    as ``_on_read`` does, and one take per read (no tasks: the consumer's take is called
    where the reader would yield to it)."""
    queue = EventQueue(QUEUE_SIZE)
    reads = pipe_reads(lines)
    start = time.perf_counter()
    _route(reads, NullRawSink(), queue.put_all, queue.take_nowait)
    return Run(time.perf_counter() - start, len(lines))


async def stage_line_reader(stream: Stream) -> Run:
    """The real ``BoundedLineReader.receive_lines`` alone, over 64 KiB reads of the stream."""
    blob = b"".join(line + b"\n" for line in stream.lines())

    class Blob:
        offset = 0

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            await trio.lowlevel.checkpoint()
            chunk = blob[self.offset : self.offset + (max_bytes or CHUNK_BYTES)]
            self.offset += len(chunk)
            return chunk

        async def aclose(self) -> None:
            await trio.lowlevel.checkpoint()

    reader = BoundedLineReader(Blob(), DEFAULT_MAX_LINE_BYTES)  # type: ignore[arg-type]
    n = 0
    start = time.perf_counter()
    while lines := await reader.receive_lines():
        n += len(lines)
    return Run(time.perf_counter() - start, n)


def repeat(runs: int, once: Callable[[], Awaitable[Run]]) -> list[Run]:
    return [trio.run(once) for _ in range(runs)]


def profile(once: Callable[[], Awaitable[Run]], top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    trio.run(once)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


# -- main ---------------------------------------------------------------------------


@attrs.define
class Report:
    figures: dict[str, Any] = attrs.field(factory=dict)

    def add(self, key: str, value: Any) -> None:
        self.figures[key] = value


def _fmt(fps: float) -> str:
    return f"{fps:>12,.0f} frames/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--frames", type=int, default=100_000, help="inbound lines in the stream")
    parser.add_argument("--turn-frames", type=int, default=2_000, help="about this many per turn")
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs per figure")
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go (a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--profile", action="store_true", help="cProfile one run of each phase")
    parser.add_argument("--no-framing", action="store_true", help="skip the line-reader run")
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="also run adapter + log with the session's event queue bound at 1024 and 4096",
    )
    args = parser.parse_args(argv)
    if args.frames < 100 or args.turn_frames < 20:
        parser.error("--frames must be >= 100 and --turn-frames >= 20")

    say: Callable[[str], None] = (lambda _s: None) if args.json else print
    load = os.getloadavg()
    report = Report()
    report.add("load_average_at_start", [round(x, 2) for x in load])
    report.add("cpus", os.cpu_count())
    say(
        f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )
    say(f"python {sys.version.split()[0]}, msgspec {msgspec.__version__}, trio {trio.__version__}")

    # The bench thread's cwd must exist (creating a thread refuses one that does not).
    Path(runtime_config().cwd).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stream = build_stream(args.frames, args.turn_frames)
    lines = stream.lines()
    kinds = stream.kinds()
    deltas = kinds.get("item/agentMessage/delta", 0) + kinds.get(
        "item/commandExecution/outputDelta", 0
    )
    size = sum(len(line) + 1 for line in lines)
    report.add("frames", len(lines))
    report.add("turns", len(stream.turns))
    report.add("stream_bytes", size)
    report.add("delta_share", round(deltas / len(lines), 4))
    report.add("methods", kinds)
    say(
        f"stream: {len(lines):,} frames, {len(stream.turns)} turns, {size / 1e6:.1f} MB "
        f"(mean {size / len(lines):.0f} B/line), {deltas / len(lines):.1%} deltas "
        f"[built in {time.perf_counter() - started:.1f} s]"
    )
    for method, n in kinds.items():
        say(f"    {n:>8,}  {method}")

    # 1 and 2, interleaved: the machine is shared, so each round measures the bare
    # decode (twice: it is short) right before the adapter and the best of each is kept.
    bares: list[Run] = []
    envs: list[Run] = []
    alone: list[Run] = []
    for _ in range(args.runs):
        bares += [bare_decode(lines), bare_decode(lines)]
        envs.append(bare_envelope(lines))
        alone.append(trio.run(adapter_alone, stream))
    bare, env, a = best(bares), best(envs), best(alone)
    report.add("bare_decode_fps", round(bare.fps))
    report.add("bare_envelope_fps", round(env.fps))
    say("")
    say(f"1. bare msgspec.json.decode      {_fmt(bare.fps)}   (the physical limit)")
    say(f"   typed envelope, Raw params    {_fmt(env.fps)}")

    # 2. adapter alone
    ratio = a.fps / bare.fps
    ok_ratio = ratio >= TARGET_ADAPTER_RATIO
    report.add("adapter_fps", round(a.fps))
    report.add("adapter_fps_runs", [round(r.fps) for r in alone])
    report.add("adapter_events", a.events)
    report.add("adapter_ratio_to_bare", round(ratio, 4))
    report.add("adapter_ratio_to_envelope", round(a.fps / env.fps, 4))
    report.add("adapter_target_ratio", TARGET_ADAPTER_RATIO)
    report.add("adapter_pass", ok_ratio)
    say("")
    say(
        f"2. adapter alone                 {_fmt(a.fps)}   "
        f"{ratio:.1%} of bare decode (target >= {TARGET_ADAPTER_RATIO:.0%}): {verdict(ok_ratio)}"
    )
    say(
        f"   runs: {', '.join(f'{r.fps:,.0f}' for r in alone)}; "
        f"{a.events:,} canonical events; {a.fps / env.fps:.1%} of the typed envelope"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as raw_tmp:
        raw_dir = Path(raw_tmp)
        rawlog = best(repeat(args.runs, lambda: adapter_alone(stream, raw_dir=raw_dir)))
    report.add("adapter_with_raw_log_fps", round(rawlog.fps))
    say(
        f"   with the daemon's raw log     {_fmt(rawlog.fps)}   "
        f"{rawlog.fps / bare.fps:.1%} of bare decode (reference: RotatingRawLog, not NullRawSink)"
    )
    if not args.no_framing:
        framed = best(repeat(args.runs, lambda: adapter_alone(stream, framing=True)))
        report.add("adapter_with_line_reader_fps", round(framed.fps))
        report.add("adapter_with_line_reader_ratio_to_bare", round(framed.fps / bare.fps, 4))
        say(
            f"   with the real line reader     {_fmt(framed.fps)}   "
            f"{framed.fps / bare.fps:.1%} of bare decode (reference: BoundedLineReader, 64 KiB)"
        )

    # where the adapter's time goes: short stages, so more repeats on a slice
    part = lines[: min(len(lines), 30_000)]
    tries = max(args.runs, 5)
    stages: list[tuple[str, str, Run]] = [
        ("bare", "bare msgspec.json.decode", best_of(tries, bare_decode, part)),
        ("decode_frame", "decode_frames (Delta fast path)", best_of(tries, stage_decode, part)),
        (
            "map",
            "+ mapper (_on_read routing)",
            best_of(tries, lambda ls: stage_map(ls, None), part),
        ),
        (
            "raw",
            "+ NullRawSink.record",
            best_of(tries, lambda ls: stage_map(ls, NullRawSink()), part),
        ),
        (
            "queue",
            "+ EventQueue put/take",
            best_of(tries, stage_queue, part),
        ),
        ("adapter", "full adapter (tasks, awaits)", a),
    ]
    reader = best(repeat(tries, lambda: stage_line_reader(stream)))
    say("")
    say(
        f"   where the time goes (first {len(part):,} frames, best of {tries}; "
        "microseconds per frame, cumulative):"
    )
    previous = 0.0
    breakdown: dict[str, float] = {}
    for key, label, run in stages:
        per = run.seconds / run.frames * 1e6
        breakdown[key] = round(per, 3)
        step = "" if key == "bare" else f"  (+{per - previous:.2f})"
        say(f"     {label:<34} {per:6.2f} us{step}")
        previous = per if key != "bare" else 0.0
    per_line = reader.seconds / reader.frames * 1e6
    breakdown["line_reader_alone"] = round(per_line, 3)
    say(f"     {'BoundedLineReader alone':<34} {per_line:6.2f} us  (not in the figure above)")
    report.add("microseconds_per_frame", breakdown)

    # 3. adapter + log
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        logged: list[Run] = []
        for index in range(args.runs):
            sub = root / f"run{index}"
            sub.mkdir()
            logged.append(trio.run(adapter_and_log, stream, sub))
        lg = best(logged)
        ok_log = lg.fps >= TARGET_LOG_FPS
        report.add("adapter_log_fps", round(lg.fps))
        report.add("adapter_log_fps_runs", [round(r.fps) for r in logged])
        report.add("adapter_log_stored_events", lg.stored)
        report.add("adapter_log_transactions", lg.transactions)
        report.add("adapter_log_frames_per_stored_event", round(lg.frames / max(1, lg.stored), 2))
        report.add("adapter_log_turn_start_seconds", round(lg.starting, 3))
        report.add("adapter_log_seconds", round(lg.seconds, 3))
        report.add("adapter_log_target_fps", TARGET_LOG_FPS)
        report.add("adapter_log_pass", ok_log)
        say("")
        say(
            f"3. adapter + log (FULL)          {_fmt(lg.fps)}   "
            f"(target >= {TARGET_LOG_FPS:,.0f}): {verdict(ok_log)}"
        )
        say(
            f"   runs: {', '.join(f'{r.fps:,.0f}' for r in logged)}; stored {lg.stored:,} events "
            f"for {lg.frames:,} frames ({lg.frames / max(1, lg.stored):.1f} frames per stored "
            f"event) in {lg.transactions:,} transactions"
        )
        say(
            f"   of its {lg.seconds:.2f} s, {lg.starting:.2f} s went to starting "
            f"{len(stream.turns)} turns (send_message + handoff and attempt + turn/start)"
        )
        if args.what_if:
            for drain in (1024, 4096):
                runs: list[Run] = []
                for index in range(args.runs):
                    sub = root / f"drain{drain}-{index}"
                    sub.mkdir()
                    runs.append(trio.run(adapter_and_log, stream, sub, drain))
                w = best(runs)
                report.add(f"what_if_drain_{drain}_fps", round(w.fps))
                say(
                    f"   what-if MAX_INGEST_BATCH={drain:<5} {_fmt(w.fps)}   "
                    f"{w.transactions:,} transactions (runs: "
                    f"{', '.join(f'{r.fps:,.0f}' for r in runs)})"
                )

        if args.profile:
            say("")
            say("== profile: adapter alone ==")
            say(profile(lambda: adapter_alone(stream), 25))
            sub = root / "profiled"
            sub.mkdir()
            say("== profile: adapter + log ==")
            say(profile(lambda: adapter_and_log(stream, sub), 30))

    total = time.perf_counter() - started
    report.add("wall_seconds", round(total, 1))
    say("")
    say(f"total {total:.1f} s")
    if args.json:
        print(json.dumps(report.figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
