"""Store benchmark: the durable event log end to end against SQLite's own limit.

Prints figures; it is not a timed test. Three measurements, each with its target
(issue 2, section Benchmark):

1. **Append**: ``--events`` realistic events through the real core (``open_core`` →
   ``CoreService.ingest_queued`` → ``EventWriter`` group commit → ``SQLiteStore``
   with projections on), fed by ``--sessions`` concurrent trio tasks that each play
   a coding-agent session as the daemon's pump does. Each session's turns are
   generated before the clock starts by pushing raw provider deltas (~18
   characters, ~20 per second per item) through the real ``DeltaCoalescer``: per
   item an ``ItemStarted``, coalesced deltas (~110 characters, a ~280 B
   ``turn_item.delta`` event with its correlation) and an ``ItemCompleted``
   carrying the whole ~4 KB text (half ``AssistantMessage``, half ``CommandExecution``
   output). About 86% of the stored events are deltas; the rest are item, node,
   run and session upserts. Generating and coalescing is the supervisor's work,
   so it is timed apart (printed as "generated in").
2. **Bare limit**: the same rows (copied from the benchmarked log) inserted with a
   bare ``executemany`` into a fresh file with the same pragmas and the same
   schema, in transactions of the size the writer achieved (and, for reference,
   of 256 rows), right after the append it copies. Target: the core reaches >= 40%
   of that rate, as the median of ``--rounds`` rounds of append then bare (this
   machine's CPU speed drifts up to 2x within a minute: runs far apart compare
   the weather, not the code). The rows are bound
   as the writer binds them (BLOBs as ``bytearray``, only non-NULL columns, one
   ``executemany`` per run of rows with the same columns); the plain binding of
   the rows as SQLite returns them is printed for reference.
3. **Thread detail**: a 10,000-item thread built through the real core, then the
   time to read ``thread_detail`` inside ``reader.snapshot()`` and encode it to
   JSON (median of several runs). Target: < 50 ms.

Peak RSS of the process during the core phases is printed too (target < 150 MB).

4. **Realistic load** (``--realistic-s``, run first): ``--realistic-sessions`` (20)
   sessions streaming at provider cadence through the real ingest stream
   (``t3orch/ingest/stream.py``: queue, coalescer, in-flight bound, turn barrier):
   a raw ~18-character delta every ~51 ms per streaming item, an approval per turn
   (the request opens, the user answers after ``USER_THINK_S``, the provider
   resolves it), turn ends. Printed: the committed events/s, the CPU it took (all
   threads, % of one core and µs per committed event), and the p50/p99 latency of
   an answer's commit and of a turn end's.

5. **A plain turn's transactions** (``--transactions TURNS``, run alone): the six
   transactions of one plain Codex turn as the writer committed them
   (``bench/plain_turn.json``, recorded from ``bench/stream.py``; each turn with ids of
   its own), each through ``SQLiteStore.commit_visible`` (decide, encode, project,
   stage, write, COMMIT; the fsync apart), against a bare connection inserting and
   upserting the same rows: the median thread CPU of each. ``--profile``: cProfile them.
   The recorded decisions read nothing: ingest's own reads are not in it.

Run: ``python bench/store.py [--events N] [--rounds R] [--sync FULL|NORMAL] [--dir D] [--json]
[--realistic-s S] [--realistic-only] [--transactions TURNS [--profile]]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import multiprocessing
import os
import pstats
import random
import re
import resource
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal

import msgspec
import psutil
import trio

from t3orch.commands.specs import CreateThread
from t3orch.core import Core, open_core
from t3orch.domain.provider import ProviderCapabilities
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    ItemContent,
)
from t3orch.events import Correlation, EventDraft, EventPayload
from t3orch.ingest.binding import SessionBinding
from t3orch.ingest.coalesce import DEFAULT_WINDOW_S, DeltaCoalescer
from t3orch.ingest.queue import EventQueue
from t3orch.ingest.stream import MAX_INGEST_BATCH, IngestStream
from t3orch.projections.views import thread_detail
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RequestOpened,
    RequestResolved,
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
)
from t3orch.store.inflight import MAX_INFLIGHT_EVENTS, InflightWindow
from t3orch.store.interface import Decision, Submission
from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.sqlite.checkpointer import INTERVAL_S as CHECKPOINT_INTERVAL_S
from t3orch.store.sqlite.checkpointer import SAFETY_PAGES
from t3orch.store.sqlite.rows import UPSERT_ROW
from t3orch.store.sqlite.schema import migrate

Sync = Literal["FULL", "NORMAL"]

#: Targets of issue 2 (the ratio: a floor since issue 16, was a 40% target).
TARGET_RATIO = 0.25
TARGET_RSS_MB = 150.0
TARGET_DETAIL_MS = 50.0

#: A raw provider delta (what an adapter yields) and how often it arrives. The
#: coalescer merges ``window / RAW_DELTA_EVERY_S + 1`` of them into one stored delta.
RAW_DELTA_CHARS = 18
RAW_DELTA_EVERY_S = DEFAULT_WINDOW_S / 4.9
#: Stored deltas per item: 36 x ~110 characters = a ~4 KB completed item.
RAW_DELTAS_PER_ITEM = 36 * 6
ITEMS_PER_TURN = 10

_VOCABULARY = """
the file module function returns value error test passes build config path import class
method update change line diff output result check run command src tests README lock cache
index query schema commit branch merge patch
"""
_WORDS = tuple(_VOCABULARY.split())
_EVENT_INSERT = (
    "INSERT INTO events (event_id, type, occurred_at, thread_id, run_id, node_id, "
    "provider_session_id, command_id, correlation, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_EVENT_SELECT = (
    "SELECT event_id, type, occurred_at, thread_id, run_id, node_id, provider_session_id, "
    "command_id, correlation, payload FROM events ORDER BY sequence"
)


# -- helpers ----------------------------------------------------------------------


def peak_rss_mb() -> float:
    """The process's high-water resident set (Linux reports ru_maxrss in KiB)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / (1024 * 1024)


_CORPUS = " ".join(random.Random(7).choice(_WORDS) for _ in range(20_000))


def text_of(rng: random.Random, chars: int) -> str:
    # A slice of a pre-built corpus: generating text word by word cost the bench
    # more CPU than the store it measures (and the two share the GIL).
    start = rng.randrange(0, len(_CORPUS) - chars - 1)
    return _CORPUS[start : start + chars]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def written_bytes() -> int:
    """Bytes this process has sent to the storage layer (Linux; 0 where unsupported)."""
    try:
        return int(psutil.Process().io_counters().write_bytes)
    except (AttributeError, psutil.Error):
        return 0


# -- 1. append through the real core -------------------------------------------------


class Budget:
    """Stops every session once the log holds the requested number of events."""

    def __init__(self, core: Core, events: int) -> None:
        self._core = core
        self._events = events

    def done(self) -> bool:
        return self._core.writer.stats.events >= self._events


#: Distinct turns generated per session; turns reuse them (an item's ids derive from
#: its provider turn, so the same native refs in another turn are other items).
TEMPLATES_PER_SESSION = 4


def turn_template(seed: int) -> list[list[ProviderEvent]]:
    """One turn's items as the daemon's pump would ingest them: raw provider deltas
    through the real ``DeltaCoalescer``, one list per flush (a pump wake-up)."""
    rng = random.Random(seed)
    coalescer = DeltaCoalescer()
    now = 0.0
    batches: list[list[ProviderEvent]] = []

    def push(event: ProviderEvent, advance: float = 0.0) -> None:
        nonlocal now
        now += advance
        ready = coalescer.push(event, now)
        if ready:
            batches.append(ready)

    for n in range(ITEMS_PER_TURN):
        ref = f"item-{n}"
        command = n % 2 == 1
        started: ItemContent = (
            CommandExecution(input="pytest -q") if command else AssistantMessage()
        )
        push(ItemStarted(native_item_ref=ref, content=started))
        parts: list[str] = []
        for _ in range(RAW_DELTAS_PER_ITEM):
            piece = text_of(rng, RAW_DELTA_CHARS - 1) + " "
            parts.append(piece)
            push(ItemDelta(native_item_ref=ref, text=piece), RAW_DELTA_EVERY_S)
        full = "".join(parts)
        done: ItemContent = (
            CommandExecution(input="pytest -q", output=full, exit_code=0)
            if command
            else AssistantMessage(text=full)
        )
        push(ItemCompleted(native_item_ref=ref, content=done), RAW_DELTA_EVERY_S)
    tail = coalescer.flush_all()
    if tail:
        batches.append(tail)
    return batches


class SessionPlayer:
    """One provider session: replays coalesced turns into ingest as the pump does."""

    def __init__(self, core: Core, binding: SessionBinding) -> None:
        self.core = core
        self.binding = binding
        # The daemon's pump's own window and bound (supervisor/session.py).
        self.inflight = InflightWindow(MAX_INFLIGHT_EVENTS)

    async def queue(self, batch: list[ProviderEvent]) -> None:
        # As the daemon's pump does: queue mid-turn batches, bound the events in
        # flight, and wait at turn boundaries.
        await self.inflight.add(
            await self.core.service.ingest_queued(self.binding, batch), len(batch)
        )

    async def settle(self, batch: list[ProviderEvent]) -> None:
        # Queued behind the batches in flight (it may commit with them), then
        # awaited with them: the pump's ``_ingest``.
        ticket = await self.core.service.ingest_queued(self.binding, batch)
        await self.inflight.drain()
        await ticket.outcome()


async def play_session(
    core: Core, index: int, budget: Budget, templates: list[list[list[ProviderEvent]]]
) -> None:
    svc = core.service
    created = await svc.create_thread(
        CreateThread(provider="standin", cwd="/tmp", title=f"bench session {index}")
    )
    thread_id = created.result["threadId"]
    session = await svc.open_session(thread_id)
    assert session.provider_thread_id is not None
    turn_no = 0
    while not budget.done():
        turn_no += 1
        sent = await svc.send_message(thread_id, f"step {turn_no}: fix the failing test")
        turn = await svc.begin_attempt(sent.result["runId"], session.provider_thread_id)
        player = SessionPlayer(core, session.with_turn(turn))
        if turn_no == 1:
            await player.settle(
                [
                    SessionReady(
                        provider_version="bench",
                        capabilities=ProviderCapabilities(native_turn_ids=True),
                        model="bench-model",
                    ),
                    ThreadRefsLearned(native_thread_ref=f"native-{index}"),
                ]
            )
        await player.queue([TurnStarted(native_turn_ref=f"turn-{turn_no}")])
        for batch in templates[turn_no % len(templates)]:
            if budget.done():
                break
            await player.queue(batch)
        await player.settle(
            [
                TurnCompleted(
                    native_turn_ref=f"turn-{turn_no}",
                    status="completed",
                    usage={"inputTokens": 1200, "outputTokens": 480},
                )
            ]
        )


async def append_phase(db: Path, events: int, sessions: int, sync: Sync) -> dict[str, Any]:
    # The provider side is generated before the clock starts: producing text and
    # coalescing raw deltas is the supervisor's work, not the log's, and it would
    # share the GIL with the writer it is meant to measure.
    generated = time.perf_counter()
    templates = [
        [turn_template(i * 7919 + k) for k in range(TEMPLATES_PER_SESSION)] for i in range(sessions)
    ]
    generated = time.perf_counter() - generated
    async with open_core(db, synchronous=sync) as core:
        budget = Budget(core, events)
        written = written_bytes()
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(sessions):
                nursery.start_soon(play_session, core, i, budget, templates[i])
        elapsed = time.perf_counter() - started
        written = written_bytes() - written
        stats = core.writer.stats
        with core.reader.snapshot():
            head = core.reader.last_sequence()
    return {
        "events": head,
        "seconds": elapsed,
        "events_per_s": head / elapsed,
        "commits": stats.batches,
        "submissions": stats.submissions,
        "events_per_commit": stats.events / max(stats.batches, 1),
        "submissions_per_commit": stats.submissions / max(stats.batches, 1),
        "written_mb": written / 1e6,
        "generate_seconds": generated,
    }


def event_mix(db: Path) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT type, count(*), avg(length(payload) + length(correlation)) FROM events "
            "GROUP BY type ORDER BY count(*) DESC"
        ).fetchall()
        total = sum(r[1] for r in rows)
        (row_bytes,) = conn.execute(
            "SELECT sum(length(payload) + length(correlation) + length(event_id) "
            "+ length(occurred_at) + coalesce(length(thread_id), 0) + coalesce(length(run_id), 0)"
            " + coalesce(length(node_id), 0)) FROM events"
        ).fetchone()
    finally:
        conn.close()
    return {
        "by_type": {
            t: {"share": n / total, "avg_bytes": round(b)} for t, n, b in rows if n / total > 0.001
        },
        "avg_row_bytes": row_bytes / total,
        "log_mb": row_bytes / 1e6,
    }


# -- 2. the physical limit: bare executemany ----------------------------------------------


def _checkpoint_beside(path: Path, stop: threading.Event) -> None:
    """What ``WalCheckpointer`` does for the store, for the bare run."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        while not stop.wait(CHECKPOINT_INTERVAL_S):
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    finally:
        conn.close()


_EVENT_COLUMNS = (
    "event_id",
    "type",
    "occurred_at",
    "thread_id",
    "run_id",
    "node_id",
    "provider_session_id",
    "command_id",
    "correlation",
    "payload",
)

Binding = Literal["lean", "plain"]


def _lean(rows: list[tuple[Any, ...]]) -> list[tuple[str, tuple[Any, ...]]]:
    """Each row as its insert of only the non-NULL columns, BLOBs as bytearray: the
    binding shortcuts the writer takes (Python's sqlite3 sends ``bytes`` and ``None``
    through its adapter lookup, ~3,000 instructions a value), so the limit has them too."""
    out: list[tuple[str, tuple[Any, ...]]] = []
    statements: dict[tuple[str, ...], str] = {}
    for row in rows:
        names = tuple(c for c, v in zip(_EVENT_COLUMNS, row, strict=True) if v is not None)
        sql = statements.get(names)
        if sql is None:
            sql = statements[names] = (
                f"INSERT INTO events ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
            )
        values = tuple(bytearray(v) if isinstance(v, bytes) else v for v in row if v is not None)
        out.append((sql, values))
    return out


def bare_phase(
    source: Path, target: Path, batch: int, sync: Sync, binding: Binding = "lean"
) -> dict[str, Any]:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        rows = src.execute(_EVENT_SELECT).fetchall()
    finally:
        src.close()
    # Prepared before the clock, as the rows themselves are.
    lean = _lean(rows) if binding == "lean" else []
    conn = sqlite3.connect(target, isolation_level=None)
    stop = threading.Event()
    checkpointer = threading.Thread(target=_checkpoint_beside, args=(target, stop))
    try:
        # The pragmas SQLiteStore sets, and the very same schema (events + its indexes).
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {sync}")
        conn.execute("PRAGMA journal_size_limit = 33554432")
        conn.execute("PRAGMA cache_size = -16384")
        # The store's checkpointing too: a high automatic mark, and passive
        # checkpoints from another connection beside the inserts.
        conn.execute(f"PRAGMA wal_autocheckpoint = {SAFETY_PAGES}")
        migrate(conn)
        checkpointer.start()
        written = written_bytes()
        started = time.perf_counter()
        if binding == "plain":
            for i in range(0, len(rows), batch):
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_EVENT_INSERT, rows[i : i + batch])
                conn.execute("COMMIT")
        else:
            for i in range(0, len(lean), batch):
                conn.execute("BEGIN IMMEDIATE")
                # One executemany per run of rows with the same columns, in order.
                for sql, run in itertools.groupby(lean[i : i + batch], itemgetter(0)):
                    conn.executemany(sql, [values for _, values in run])
                conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        written = written_bytes() - written
    finally:
        stop.set()
        if checkpointer.is_alive():
            checkpointer.join()
        conn.close()
    return {
        "written_mb": written / 1e6,
        "events": len(rows),
        "batch": batch,
        "binding": binding,
        "seconds": elapsed,
        "events_per_s": len(rows) / elapsed,
    }


def bare_apart(
    source: Path, target: Path, batch: int, sync: Sync, binding: Binding = "lean"
) -> dict[str, Any]:
    """``bare_phase`` in a forked process: it holds the whole log in memory, and the
    peak RSS printed is the core's."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        return pool.submit(bare_phase, source, target, batch, sync, binding).result()


# -- 3. thread-detail snapshot of a 10,000-item thread -------------------------------------


async def build_detail_thread(
    db: Path, items: int, item_bytes: int, per_turn: int, sync: Sync
) -> tuple[str, float]:
    rng = random.Random(42)
    started = time.perf_counter()
    async with open_core(db, synchronous=sync) as core:
        svc = core.service
        created = await svc.create_thread(
            CreateThread(provider="standin", cwd="/tmp", title="long thread")
        )
        thread_id = created.result["threadId"]
        session = await svc.open_session(thread_id)
        assert session.provider_thread_id is not None
        made = 0
        turn_no = 0
        while made < items:
            turn_no += 1
            # The user's message is a turn item too.
            sent = await svc.send_message(thread_id, f"request {turn_no}")
            made += 1
            turn = await svc.begin_attempt(sent.result["runId"], session.provider_thread_id)
            binding = session.with_turn(turn)
            await svc.ingest(binding, [TurnStarted(native_turn_ref=f"t{turn_no}")])
            in_turn = min(per_turn, items - made)
            chunk: list[ProviderEvent] = []
            for n in range(in_turn):
                text = text_of(rng, item_bytes)
                content: ItemContent = (
                    CommandExecution(input="make test", output=text, exit_code=0)
                    if n % 2
                    else AssistantMessage(text=text)
                )
                chunk.append(ItemCompleted(native_item_ref=f"i{turn_no}-{n}", content=content))
                if len(chunk) == 50:
                    await svc.ingest(binding, chunk)
                    chunk = []
            if chunk:
                await svc.ingest(binding, chunk)
            made += in_turn
            await svc.ingest(
                binding, [TurnCompleted(native_turn_ref=f"t{turn_no}", status="completed")]
            )
    return thread_id, time.perf_counter() - started


@contextmanager
def opened_reader(db: Path) -> Iterator[Any]:
    from t3orch.store.open import open_reader

    reader = open_reader(db)
    try:
        yield reader
    finally:
        reader.close()


def detail_phase(db: Path, thread_id: str, runs: int) -> dict[str, Any]:
    timings: list[float] = []
    read_only: list[float] = []
    size = 0
    count = 0
    with opened_reader(db) as reader:
        for _ in range(runs):
            t0 = time.perf_counter()
            with reader.snapshot():
                detail = thread_detail(reader, thread_id)
            t1 = time.perf_counter()
            body = msgspec.json.encode(detail)
            t2 = time.perf_counter()
            timings.append(t2 - t0)
            read_only.append(t1 - t0)
            size = len(body)
            count = len(detail.turn_items)
            del detail, body
    return {
        "turn_items": count,
        "json_mb": size / 1e6,
        "median_ms": statistics.median(timings) * 1e3,
        "read_median_ms": statistics.median(read_only) * 1e3,
        "min_ms": min(timings) * 1e3,
        "runs": runs,
    }


# -- 4. realistic load: 20 sessions at provider cadence, with approvals ---------------

#: How long the user takes to answer an approval.
USER_THINK_S = 0.5
#: Raw deltas per streamed item of a realistic turn: the reply before the command,
#: the command's output, the reply after it (~2, ~1 and ~2 s at provider cadence).
REALISTIC_DELTAS = (40, 20, 40)


class _Stats:
    def __init__(self) -> None:
        self.answers: list[float] = []
        self.turn_ends: list[float] = []
        self.turns = 0


class _Owner:
    """The stream's owner as the supervisor is, minus the process: it times turn ends."""

    def __init__(self, stats: _Stats) -> None:
        self.stats = stats
        self.end_put_at = 0.0

    def observed(self, event: ProviderEvent) -> None:
        pass

    def working(self) -> None:
        pass

    def turn_closing(self) -> None:
        pass

    def interrupted_by_us(self) -> str | None:
        return None

    async def turn_barrier(self, run_id: str, committed: Any) -> None:
        return None

    async def subagent_ended(self, run_id: str, child_native_thread_ref: str | None) -> None:
        pass

    async def exiting(self, event: Any) -> None:
        pass

    def turn_ended(self, turn: Any, event: TurnCompleted) -> None:
        self.stats.turn_ends.append(trio.current_time() - self.end_put_at)
        self.stats.turns += 1

    def runtime_exited(self, event: Any, turn: Any) -> None:
        pass


async def _stream_item(
    queue: EventQueue, rng: random.Random, ref: str, deltas: int, command: bool
) -> None:
    started: ItemContent = CommandExecution(input="pytest -q") if command else AssistantMessage()
    queue.put(ItemStarted(native_item_ref=ref, content=started))
    parts = []
    for _ in range(deltas):
        await trio.sleep(RAW_DELTA_EVERY_S)
        piece = text_of(rng, RAW_DELTA_CHARS - 1) + " "
        parts.append(piece)
        queue.put(ItemDelta(native_item_ref=ref, text=piece))
    full = "".join(parts)
    done: ItemContent = (
        CommandExecution(input="pytest -q", output=full, exit_code=0)
        if command
        else AssistantMessage(text=full)
    )
    queue.put(ItemCompleted(native_item_ref=ref, content=done))


async def realistic_session(core: Core, index: int, until: float, stats: _Stats) -> None:
    svc = core.service
    rng = random.Random(index)
    created = await svc.create_thread(
        CreateThread(provider="standin", cwd="/tmp", title=f"realistic {index}")
    )
    thread_id = created.result["threadId"]
    session = await svc.open_session(thread_id)
    assert session.provider_thread_id is not None
    queue = EventQueue(MAX_INGEST_BATCH)
    owner = _Owner(stats)
    stream = IngestStream(svc, session, owner)
    async with trio.open_nursery() as nursery:
        await nursery.start(stream.run, queue)
        queue.put_all(
            [
                SessionReady(
                    provider_version="bench",
                    capabilities=ProviderCapabilities(native_turn_ids=True),
                    model="bench-model",
                ),
                ThreadRefsLearned(native_thread_ref=f"native-{index}"),
            ]
        )
        await trio.sleep(rng.random())  # sessions out of step, as users are
        turn_no = 0
        while trio.current_time() < until:
            turn_no += 1
            sent = await svc.send_message(thread_id, f"step {turn_no}: fix the failing test")
            turn = await svc.begin_attempt(sent.result["runId"], session.provider_thread_id)
            stream.turn_started(turn)
            queue.put(TurnStarted(native_turn_ref=f"turn-{turn_no}"))
            before, output, after = REALISTIC_DELTAS
            await _stream_item(queue, rng, f"m{turn_no}a", before, command=False)
            cmd = f"c{turn_no}"
            queue.put(ItemStarted(native_item_ref=cmd, content=CommandExecution(input="pytest -q")))
            queue.put(
                RequestOpened(
                    native_request_ref=f"r{turn_no}",
                    kind="command",
                    native_item_ref=cmd,
                    summary="pytest -q",
                    available_decisions=["accept", "decline"],
                )
            )
            await trio.sleep(USER_THINK_S)
            pending = core.reader.pending_requests(thread_id)
            while not pending:
                await trio.sleep(0.01)
                pending = core.reader.pending_requests(thread_id)
            asked = trio.current_time()
            await svc.claim_request(pending[0].id, "accept")
            stats.answers.append(trio.current_time() - asked)
            queue.put(RequestResolved(native_request_ref=f"r{turn_no}", decision="accept"))
            await _stream_item(queue, rng, cmd, output, command=True)
            await _stream_item(queue, rng, f"m{turn_no}b", after, command=False)
            owner.end_put_at = trio.current_time()
            queue.put(
                TurnCompleted(
                    native_turn_ref=f"turn-{turn_no}",
                    status="completed",
                    usage={"inputTokens": 1200, "outputTokens": 480},
                )
            )
            await stream.turn_done.wait()
        queue.close()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def realistic_phase(db: Path, sessions: int, seconds: float, sync: Sync) -> dict[str, Any]:
    stats = _Stats()
    async with open_core(db, synchronous=sync) as core:
        before = core.writer.stats.events, core.writer.stats.batches
        cpu, wall = time.process_time(), time.perf_counter()
        until = trio.current_time() + seconds
        async with trio.open_nursery() as nursery:
            for i in range(sessions):
                nursery.start_soon(realistic_session, core, i, until, stats)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        events = core.writer.stats.events - before[0]
        commits = core.writer.stats.batches - before[1]
    return {
        "sessions": sessions,
        "seconds": wall,
        "events": events,
        "events_per_s": events / wall,
        "commits": commits,
        "turns": stats.turns,
        "approvals": len(stats.answers),
        "cpu_pct": 100 * cpu / wall,
        "cpu_us_per_event": 1e6 * cpu / max(events, 1),
        "answer_p50_ms": 1e3 * _pct(stats.answers, 0.5),
        "answer_p99_ms": 1e3 * _pct(stats.answers, 0.99),
        "turn_end_p50_ms": 1e3 * _pct(stats.turn_ends, 0.5),
        "turn_end_p99_ms": 1e3 * _pct(stats.turn_ends, 0.99),
    }


def realistic(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    db = root / "realistic.db"
    r = trio.run(realistic_phase, db, args.realistic_sessions, args.realistic_s, args.sync)
    for f in root.glob("realistic.db*"):
        f.unlink()
    return r


def print_realistic(r: dict[str, Any]) -> None:
    turn_s = sum(REALISTIC_DELTAS) * RAW_DELTA_EVERY_S + USER_THINK_S
    print(
        f"realistic load: {r['sessions']} sessions at provider cadence (a raw delta every "
        f"{RAW_DELTA_EVERY_S * 1e3:.0f} ms per streaming item, an approval answered after "
        f"{USER_THINK_S:g} s and a turn end per ~{turn_s:.0f} s turn) for {r['seconds']:.0f} s: "
        f"{r['events_per_s']:.0f} events/s, {r['turns']} turns, {r['approvals']} approvals; "
        f"CPU {r['cpu_pct']:.1f}% of a core ({r['cpu_us_per_event']:.0f} us per committed event); "
        f"answer commit p50/p99 {r['answer_p50_ms']:.1f} / {r['answer_p99_ms']:.1f} ms, "
        f"turn end p50/p99 {r['turn_end_p50_ms']:.1f} / {r['turn_end_p99_ms']:.1f} ms"
    )


# -- 5. a plain turn's transactions, one at a time, against bare SQLite ----------------------

#: One plain Codex turn's transactions as the writer committed them (bench/stream.py).
PLAIN_TURN = Path(__file__).with_name("plain_turn.json")
#: Ids made anew by each turn (the thread, its session and daemon stay): a turn's
#: rows are inserted, as a real turn's are, not updates of the last turn's.
_PER_TURN_IDS = re.compile(rb'"((?:att|chk|cks|itm|msg|nod|ptu|run)_[0-9a-f]{22})[0-9a-f]{6}"')


def plain_turns(turns: int) -> list[list[list[list[EventDraft]]]]:
    """``turns`` copies of the recorded turn (per turn, transaction, submission: its
    drafts), each with its own ids."""
    raw = PLAIN_TURN.read_bytes()
    out = []
    for n in range(turns):
        suffix = b"%06x" % n
        text = _PER_TURN_IDS.sub(lambda m, s=suffix: b'"' + m.group(1) + s + b'"', raw)
        recorded = msgspec.json.decode(text)["transactions"]
        out.append(
            [
                [
                    [
                        EventDraft(
                            payload=msgspec.convert(e["payload"], EventPayload),
                            correlation=msgspec.convert(e["correlation"], Correlation),
                        )
                        for e in sub
                    ]
                    for sub in txn
                ]
                for txn in recorded
            ]
        )
    return out


def _deciding(drafts: list[EventDraft]) -> Submission:
    decision = Decision(events=drafts)
    return Submission(lambda view: decision)


def transactions_phase(root: Path, turns: int, profile: bool) -> dict[str, Any]:
    """The writer's work per transaction of a plain turn (``SQLiteStore.commit_visible``:
    decide, encode, project, stage, write, COMMIT; the fsync apart), as thread CPU,
    against a bare SQLite connection inserting and upserting the same rows."""
    recorded = plain_turns(turns)
    store = SQLiteStore(root / "txn.db", synchronous="FULL")
    cpu: list[list[float]] = [[] for _ in recorded[0]]
    written: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = []
    profiler = cProfile.Profile() if profile else None
    try:
        for turn in recorded:
            for i, txn in enumerate(turn):
                subs = [_deciding(drafts) for drafts in txn]
                head = store.last_sequence()
                if profiler is not None:
                    profiler.enable()
                started = time.thread_time_ns()
                store.commit_visible(subs)
                cpu[i].append((time.thread_time_ns() - started) / 1e3)
                if profiler is not None:
                    profiler.disable()
                store.make_durable()
                # What it wrote, for the bare run (read apart from the clock).
                conn = store._conn
                events = conn.execute(
                    "SELECT * FROM events WHERE sequence > ? ORDER BY sequence", (head,)
                ).fetchall()
                rows = conn.execute(
                    "SELECT kind, id, thread_id, position, status, body, updated_seq "
                    "FROM rows WHERE updated_seq > ?",
                    (head,),
                ).fetchall()
                written.append((events, rows))
    finally:
        store.close()
    bare = _bare_transactions(root / "bare.db", written, len(cpu))
    report: dict[str, Any] = {
        "turns": turns,
        "transactions": [
            {
                "events": sum(len(s) for s in recorded[0][i]),
                "submissions": len(recorded[0][i]),
                "store_us": statistics.median(cpu[i]),
                "bare_us": statistics.median(bare[i]),
            }
            for i in range(len(cpu))
        ],
    }
    report["store_us_per_turn"] = sum(t["store_us"] for t in report["transactions"])
    report["bare_us_per_turn"] = sum(t["bare_us"] for t in report["transactions"])
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        report["profile"] = out.getvalue()
    return report


def _bare_transactions(
    path: Path, written: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]], per_turn: int
) -> list[list[float]]:
    """Each transaction's rows by a bare connection (the store's schema and pragmas,
    BLOBs bound as ``bytearray`` as the writer binds them): its CPU per transaction."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA cache_size = -16384")
    migrate(conn)
    cpu: list[list[float]] = [[] for _ in range(per_turn)]
    marks = ", ".join("?" * 11)
    try:
        for n, (events, rows) in enumerate(written):
            ev = [(*e[:9], bytearray(e[9]), bytearray(e[10])) for e in events]
            rw = [(*r[:5], bytearray(r[5]), r[6]) for r in rows]
            started = time.thread_time_ns()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(f"INSERT INTO events VALUES ({marks})", ev)
            conn.executemany(UPSERT_ROW, rw)
            conn.execute("COMMIT")
            cpu[n % per_turn].append((time.thread_time_ns() - started) / 1e3)
    finally:
        conn.close()
    return cpu


def print_transactions(r: dict[str, Any]) -> None:
    print(
        f"a plain turn's transactions (bench/plain_turn.json), median thread CPU of "
        f"{r['turns']} turns, SQLiteStore.commit_visible vs bare SQLite of the same rows:"
    )
    for i, t in enumerate(r["transactions"]):
        print(
            f"  txn {i}: {t['submissions']} submissions, {t['events']:2} events: "
            f"{t['store_us']:7.0f} µs  (bare {t['bare_us']:5.0f} µs)"
        )
    print(f"  per turn: {r['store_us_per_turn']:.0f} µs (bare {r['bare_us_per_turn']:.0f} µs)")
    if "profile" in r:
        print(r["profile"])


# -- driver ---------------------------------------------------------------------------------


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    sync: Sync = args.sync
    proc = psutil.Process()
    report: dict[str, Any] = {
        "sqlite": sqlite3.sqlite_version,
        "python": sys.version.split()[0],
        "cpus": psutil.cpu_count(),
        "sync": sync,
        "sessions": args.sessions,
        "loadavg_start": list(os.getloadavg()),
    }

    if args.realistic_s > 0:
        report["realistic"] = realistic(args, root)

    # Rounds of (append, then at once the bare run at the batch it achieved): this
    # machine's speed drifts by up to 2x within a minute, so each ratio compares
    # runs seconds apart, and the median of the rounds is the figure.
    rounds: list[dict[str, Any]] = []
    for n in range(args.rounds):
        core_db = root / f"core{n}.db"
        append = trio.run(append_phase, core_db, args.events, args.sessions, sync)
        append["peak_rss_mb"] = peak_rss_mb()
        achieved = max(1, round(append["events_per_commit"]))
        bare = bare_apart(core_db, root / f"bare{n}.db", achieved, sync)
        rounds.append(
            {"append": append, "bare": bare, "ratio": append["events_per_s"] / bare["events_per_s"]}
        )
        if n < args.rounds - 1:
            for f in root.glob(f"*{n}.db*"):
                f.unlink()
    median = sorted(rounds, key=itemgetter("ratio"))[len(rounds) // 2]
    append, bare = median["append"], median["bare"]
    report["rounds"] = rounds
    report["append"] = append
    report["mix"] = event_mix(core_db)

    detail_db = root / "detail.db"
    thread_id, build_s = trio.run(
        build_detail_thread,
        detail_db,
        args.detail_items,
        args.detail_item_bytes,
        args.detail_per_turn,
        sync,
    )
    detail = detail_phase(detail_db, thread_id, args.detail_runs)
    detail["build_seconds"] = build_s
    detail["item_bytes"] = args.detail_item_bytes
    report["detail"] = detail
    # Everything the core did is behind us: the high-water mark covers it all.
    report["peak_rss_mb"] = peak_rss_mb()
    report["rss_now_mb"] = proc.memory_info().rss / 2**20

    # References, from the last round's log: the plain binding, and 256-row batches.
    plain = bare_apart(core_db, root / "plain.db", achieved, sync, "plain")
    bare256 = bare_apart(core_db, root / "bare256.db", 256, sync)
    last = rounds[-1]["append"]["events_per_s"]
    report["bare"] = bare
    report["bare_plain"] = plain
    report["bare_256"] = bare256
    report["ratio"] = median["ratio"]
    report["ratio_plain"] = last / plain["events_per_s"]
    report["ratio_256"] = last / bare256["events_per_s"]
    report["loadavg_end"] = list(os.getloadavg())
    report["pass"] = {
        "ratio": report["ratio"] >= TARGET_RATIO,
        "peak_rss": report["peak_rss_mb"] < TARGET_RSS_MB,
        "detail": detail["median_ms"] < TARGET_DETAIL_MS,
    }
    return report


def print_report(r: dict[str, Any]) -> None:
    a, b, b256, d, ok = r["append"], r["bare"], r["bare_256"], r["detail"], r["pass"]
    plain = r["bare_plain"]
    print(
        f"store bench: SQLite {r['sqlite']}, Python {r['python']}, {r['cpus']} CPUs, "
        f"synchronous={r['sync']}, {r['sessions']} concurrent sessions; load average "
        f"{r['loadavg_start'][0]:.1f} -> {r['loadavg_end'][0]:.1f}"
    )
    print("event mix (share, avg payload+correlation bytes):")
    for t, m in r["mix"]["by_type"].items():
        print(f"  {t:<28} {m['share']:6.1%} {m['avg_bytes']:>6} B")
    print(f"  avg row {r['mix']['avg_row_bytes']:.0f} B, log {r['mix']['log_mb']:.1f} MB")
    print(
        f"{len(r['rounds'])} rounds of append, then bare at the batch it achieved (core/bare): "
        + "; ".join(
            f"{x['append']['events_per_s']:,.0f}/{x['bare']['events_per_s']:,.0f} = "
            f"{x['ratio']:.0%}"
            for x in r["rounds"]
        )
    )
    print(
        f"append (core, projections on; the median round): {a['events']:,} events in "
        f"{a['seconds']:.1f} s = "
        f"{a['events_per_s']:,.0f} events/s; {a['commits']:,} commits, "
        f"{a['events_per_commit']:.1f} events and {a['submissions_per_commit']:.1f} "
        f"submissions per commit; {a['written_mb']:.0f} MB written (provider side "
        f"generated and coalesced beforehand in {a['generate_seconds']:.1f} s)"
    )
    print(
        f"bare executemany (the median round), {b['batch']} rows/txn (writer's batch; "
        "BLOBs as bytearray, "
        "no NULL columns bound, as the writer binds): "
        f"{b['events_per_s']:,.0f} events/s ({b['seconds']:.1f} s); "
        f"{b['written_mb']:.0f} MB written"
    )
    print(
        f"bare executemany, {plain['batch']} rows/txn, rows bound as SQLite returns them "
        f"(bytes, NULLs; the bare run before 2026-11-30 21:30): "
        f"{plain['events_per_s']:,.0f} events/s ({plain['seconds']:.1f} s)"
    )
    print(
        f"bare executemany, 256 rows/txn (reference): {b256['events_per_s']:,.0f} events/s "
        f"({b256['seconds']:.1f} s)"
    )
    print(
        f"ratio core/bare (median of the rounds): {r['ratio']:.0%} (floor "
        f"{TARGET_RATIO:.0%}) {verdict(ok['ratio'])}; last round vs the plain binding: "
        f"{r['ratio_plain']:.0%}, vs 256-row bare: {r['ratio_256']:.0%}"
    )
    print(
        f"peak RSS: {r['peak_rss_mb']:.0f} MB (target < {TARGET_RSS_MB:.0f} MB) "
        f"{verdict(ok['peak_rss'])}; during append {a['peak_rss_mb']:.0f} MB"
    )
    print(
        f"thread detail, {d['turn_items']:,} items of ~{d['item_bytes']} B "
        f"({d['json_mb']:.1f} MB JSON): median {d['median_ms']:.1f} ms over {d['runs']} runs "
        f"(read {d['read_median_ms']:.1f} ms + encode; target < {TARGET_DETAIL_MS:.0f} ms) "
        f"{verdict(ok['detail'])}; built in {d['build_seconds']:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--events", type=int, default=100_000, help="events to append (100000)")
    p.add_argument("--sync", choices=("FULL", "NORMAL"), default="FULL")
    p.add_argument("--dir", type=Path, default=None, help="work dir (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument("--sessions", type=int, default=8, help="concurrent sessions (8)")
    p.add_argument("--rounds", type=int, default=3, help="append + bare rounds (3)")
    p.add_argument("--detail-items", type=int, default=10_000)
    p.add_argument("--detail-item-bytes", type=int, default=1024)
    p.add_argument("--detail-per-turn", type=int, default=1000)
    p.add_argument("--detail-runs", type=int, default=7)
    p.add_argument("--realistic-s", type=float, default=10.0, help="seconds (10; 0: skip)")
    p.add_argument("--realistic-sessions", type=int, default=20)
    p.add_argument("--realistic-only", action="store_true", help="only the realistic load")
    p.add_argument(
        "--transactions",
        type=int,
        default=0,
        metavar="TURNS",
        help="only a plain turn's transactions, TURNS times, against bare SQLite",
    )
    p.add_argument("--profile", action="store_true", help="with --transactions: cProfile them")
    args = p.parse_args(argv)
    if args.transactions:
        with tempfile.TemporaryDirectory(prefix="store-bench-", dir=args.dir) as tmp:
            txns = transactions_phase(Path(tmp), args.transactions, args.profile)
        if args.json:
            print(json.dumps(txns, indent=2))
        else:
            print_transactions(txns)
        return 0
    if args.realistic_only:
        with tempfile.TemporaryDirectory(prefix="store-bench-", dir=args.dir) as tmp:
            row = realistic(args, Path(tmp))
        if args.json:
            print(json.dumps(row, indent=2))
        else:
            print_realistic(row)
        return 0
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
        report = run(args, root)
    else:
        with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
            report = run(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
        if report.get("realistic"):
            print_realistic(report["realistic"])
    return 0 if all(report["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
