"""``t3orch demo``: a scripted conversation driven through the real core.

Until the supervisor lands this plays canonical provider events (what an
adapter would yield) through ingest, the coalescer, the writer and the
projections, answers an approval like a user would, and proves the result with
the same check ``t3orch check`` runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import msgspec
import trio

from t3orch.commands.specs import CreateThread
from t3orch.core import open_core
from t3orch.domain.provider import ProviderCapabilities
from t3orch.ingest.coalesce import DeltaCoalescer
from t3orch.projections.check import compare, rebuild
from t3orch.projections.views import thread_detail
from t3orch.provider_events import (
    AssistantText,
    CommandRun,
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
from t3orch.state import prepare_state_dir, resolve_state_dir

REPLY = (
    "Here is the plan: I will create hello.txt, then list the directory to show it exists. "
) * 4


def _script(turn: str) -> list[tuple[float, ProviderEvent]]:
    words = REPLY.split(" ")
    steps: list[tuple[float, ProviderEvent]] = [
        (
            0.0,
            SessionReady(
                provider_version="scripted",
                capabilities=ProviderCapabilities(native_turn_ids=True),
                model="scripted-model",
            ),
        ),
        (0.0, ThreadRefsLearned(native_thread_ref="native-thread-1")),
        (0.01, TurnStarted(native_turn_ref=turn)),
        (0.0, ItemStarted(native_item_ref="msg-1", content=AssistantText())),
    ]
    steps += [(0.004, ItemDelta(native_item_ref="msg-1", text=w + " ")) for w in words]
    steps += [
        (0.0, ItemCompleted(native_item_ref="msg-1", content=AssistantText(text=REPLY + " "))),
        (0.01, ItemStarted(native_item_ref="cmd-1", content=CommandRun(input="touch hello.txt"))),
        (
            0.0,
            RequestOpened(
                native_request_ref="0",
                kind="command",
                native_item_ref="cmd-1",
                summary="touch hello.txt",
                detail={"command": "touch hello.txt"},
                available_decisions=["accept", "decline", "cancel"],
            ),
        ),
    ]
    return steps


def _after_approval(turn: str) -> list[tuple[float, ProviderEvent]]:
    return [
        (0.0, RequestResolved(native_request_ref="0", decision="accept")),
        (0.01, ItemDelta(native_item_ref="cmd-1", text="created hello.txt\n")),
        (
            0.0,
            ItemCompleted(
                native_item_ref="cmd-1",
                content=CommandRun(
                    input="touch hello.txt", output="created hello.txt\n", exit_code=0
                ),
            ),
        ),
        (
            0.01,
            TurnCompleted(
                native_turn_ref=turn,
                status="completed",
                usage={"inputTokens": 120, "outputTokens": 48},
            ),
        ),
    ]


async def _play(core, binding, steps, coalescer: DeltaCoalescer) -> int:  # type: ignore[no-untyped-def]
    seq = 0
    for delay, event in steps:
        if delay:
            await trio.sleep(delay)
        ready = coalescer.push(event, trio.current_time())
        if ready:
            seq = await core.service.ingest(binding, ready)
    tail = coalescer.flush_all()
    if tail:
        seq = await core.service.ingest(binding, tail)
    return seq


async def _demo(db: Path) -> int:
    started = time.perf_counter()
    async with open_core(db) as core:
        svc = core.service
        created = await svc.create_thread(
            CreateThread(provider="standin", cwd=str(db.parent), title="Demo thread"),
            command_id="demo-create",
        )
        thread_id = created.result["threadId"]
        print(f"thread {thread_id} created at sequence {created.sequence}")
        sent = await svc.send_message(
            thread_id, "Create hello.txt and show it.", command_id="demo-send"
        )
        again = await svc.send_message(
            thread_id, "Create hello.txt and show it.", command_id="demo-send"
        )
        print(
            f"run {sent.result['runId']} queued; a repeated command id returned the same run "
            f"(duplicate={again.duplicate}, same={again.result == sent.result})"
        )
        session = await svc.open_session(thread_id)
        assert session.provider_thread_id is not None
        turn = await svc.begin_attempt(sent.result["runId"], session.provider_thread_id)
        binding = session.with_turn(turn)
        coalescer = DeltaCoalescer()
        await _play(core, binding, _script("turn-1"), coalescer)
        with core.reader.snapshot():
            pending = core.reader.rows_by_status("runtime_request", ("pending",))
        request_id = pending[0].id
        print(f"approval requested: {request_id} — answering accept")
        await svc.claim_request(request_id, "accept", command_id="demo-approve")
        last = await _play(core, binding, _after_approval("turn-1"), coalescer)
        with core.reader.snapshot():
            detail = thread_detail(core.reader, thread_id)
            rebuilt, count, gaps = rebuild(core.reader.iter_events())
            diffs = gaps + compare(core.reader.all_rows(), rebuilt)
            deltas = sum(1 for e in core.reader.iter_events() if e.type == "turn_item.delta")
    print("\nturn items:")
    for raw in detail.visible_turn_items:
        item = msgspec.json.decode(raw)
        text = item.get("text") or item.get("input") or item.get("summary") or ""
        print(f"  [{item['status']:>9}] {item['type']:<18} {text.strip()[:70]}")
    runs = [msgspec.json.decode(r) for r in detail.runs]
    print(
        f"\nsummary: {len(runs)} run ({runs[0]['status']}), {len(detail.turn_items)} items, "
        f"{count} events up to sequence {last}, {deltas} stored delta rows for "
        f"{len(REPLY.split(' '))} streamed deltas, check: "
        f"{'ok' if not diffs else diffs[0]}; {time.perf_counter() - started:.2f}s"
    )
    return 0 if not diffs and runs[0]["status"] == "completed" else 1


def cmd_demo(args: argparse.Namespace) -> int:
    if args.state_dir:
        db = prepare_state_dir(resolve_state_dir(args.state_dir), create=True)
        return trio.run(_demo, db)
    with tempfile.TemporaryDirectory(prefix="t3orch-demo-") as tmp:
        db = prepare_state_dir(Path(tmp) / "state", create=True)
        return trio.run(_demo, db)
