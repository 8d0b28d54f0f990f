"""Ingest through the real core: turn lifecycle, requests, settling, coalescing."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing

from t3orch.core import open_core
from t3orch.domain.request import LiveCapability, NotResumableCapability
from t3orch.domain.turn_items import (
    AssistantMessage,
)
from t3orch.ingest.coalesce import DeltaCoalescer
from t3orch.projections.check import compare, rebuild
from t3orch.projections.views import pending_requests, thread_detail
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RequestResolved,
    RuntimeExited,
    TurnCompleted,
    TurnStarted,
)
from t3orch.store.errors import CommandRejected
from tests.store.support import new_thread, pending_approval, reply_events, started_turn


def _items(core, thread_id: str) -> list[dict]:  # type: ignore[no-untyped-def]
    with core.reader.snapshot():
        detail = thread_detail(core.reader, thread_id)
    return [msgspec.json.decode(r) for r in detail.turn_items]


def _get(core, kind: str, id: str):  # type: ignore[no-untyped-def]
    with core.reader.snapshot():
        row = core.reader.row(kind, id)
    assert row is not None
    return row.decode()


async def test_completed_turn_projects_run_items_and_messages(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid, "hello")
        await core.service.ingest(b, reply_events("t1", "the answer"))
        items = _items(core, tid)
        assert [(i["type"], i["status"]) for i in items] == [
            ("user_message", "completed"),
            ("assistant_message", "completed"),
        ]
        assert items[1]["text"] == "the answer"
        assert items[1]["providerTurnId"] == b.turn.provider_turn_id  # type: ignore[union-attr]
        assert items[1]["nativeItemRef"]["value"] == "m1"
        run = _get(core, "run", b.turn.run_id)  # type: ignore[union-attr]
        assert run.status == "completed" and run.completed_at
        pt = _get(core, "provider_thread", b.provider_thread_id)
        assert pt.native_thread_ref == "native-1" and pt.resume_ref_confirmed
        with core.reader.snapshot():
            messages = [m.decode() for m in core.reader.rows("message", thread_id=tid)]
        assert [(m.role, m.text, m.streaming) for m in messages] == [
            ("user", "hello", False),
            ("assistant", "the answer", False),
        ]


async def test_interrupted_turn_closes_items_left_streaming(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        await core.service.ingest(
            b,
            [
                TurnStarted(native_turn_ref="t1"),
                ItemStarted(native_item_ref="m1", content=AssistantMessage()),
                ItemDelta(native_item_ref="m1", text="partial"),
                TurnCompleted(native_turn_ref="t1", status="interrupted"),
            ],
        )
        items = _items(core, tid)
        assert (items[1]["status"], items[1]["text"]) == ("interrupted", "partial")
        assert _get(core, "run", b.turn.run_id).status == "interrupted"  # type: ignore[union-attr]
        # An interrupted turn does not make an unconfirmed ref trusted.
        assert not _get(core, "provider_thread", b.provider_thread_id).resume_ref_confirmed


async def test_request_answered_exactly_once(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b, req = await pending_approval(core, tid)
        assert req.kind == "command" and isinstance(req.response_capability, LiveCapability)
        assert _get(core, "run", b.turn.run_id).status == "waiting"
        results: list[object] = []

        async def answer(decision: str) -> None:
            try:
                results.append(await core.service.claim_request(req.id, decision))
            except CommandRejected as exc:
                results.append(exc.code)

        async with trio.open_nursery() as n:
            n.start_soon(answer, "accept")
            n.start_soon(answer, "decline")
        assert sorted(map(str, results)).count("request_already_answered") == 1
        await core.service.ingest(b, [RequestResolved(native_request_ref="0", decision="accept")])
        assert _get(core, "runtime_request", req.id).status == "resolved"
        assert _get(core, "run", b.turn.run_id).status == "running"
        with pytest.raises(CommandRejected, match="resolved"):
            await core.service.claim_request(req.id, "accept")


async def test_only_an_offered_decision_is_accepted(tmp_path: Path) -> None:
    # The request offers accept/decline: acceptForSession is a word of the
    # vocabulary, but one the adapter said it cannot send for this request.
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        _, req = await pending_approval(core, tid)
        with pytest.raises(CommandRejected, match="offers accept/decline") as refused:
            await core.service.claim_request(req.id, "acceptForSession")
        assert refused.value.code == "decision_not_offered"
        assert _get(core, "runtime_request", req.id).decision is None
        claimed = await core.service.claim_request(req.id, "decline")
        assert claimed.result["decision"] == "decline"


async def test_provider_exit_expires_requests_and_fails_the_run(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b, req = await pending_approval(core, tid)
        await core.service.ingest(b, [RuntimeExited(code=None, signal=9, stderr_tail="oops")])
        req = _get(core, "runtime_request", req.id)
        assert req.status == "expired" and isinstance(
            req.response_capability, NotResumableCapability
        )
        with pytest.raises(CommandRejected) as info:
            await core.service.claim_request(req.id, "accept")
        assert info.value.code == "request_not_pending"
        run = _get(core, "run", b.turn.run_id)  # type: ignore[union-attr]
        assert run.status == "failed" and "signal 9" in run.last_error
        session = _get(core, "provider_session", b.provider_session_id)
        assert session.status == "error" and "oops" in session.last_error
        pt = _get(core, "provider_thread", b.provider_thread_id)
        assert pt.status == "not_loaded"  # kept for resume, not closed
        assert all(
            i["status"] in ("completed", "interrupted", "cancelled") for i in _items(core, tid)
        )
        with core.reader.snapshot():
            assert pending_requests(core.reader).requests == []


async def test_reconcile_settles_everything_left_in_flight(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    async with open_core(db) as core:
        tid = await new_thread(core.service)
        b, req = await pending_approval(core, tid)
    async with open_core(db) as core:  # as a restarted daemon would
        counts = await core.service.reconcile()
        assert counts["run"] == 1 and counts["runtime_request"] == 1
        assert counts["provider_session"] == 1 and counts["turn_item"] >= 1
        assert _get(core, "run", b.turn.run_id).status == "interrupted"  # type: ignore[union-attr]
        assert _get(core, "runtime_request", req.id).status == "expired"
        again = await core.service.reconcile()
        assert set(again.values()) == {0}


async def test_coalescing_bounds_stored_deltas(tmp_path: Path) -> None:
    """A 10,000-character reply streamed 3 characters at a time for 20 s (≈3,334 deltas)."""
    clock = trio.testing.MockClock()
    text = "".join(chr(97 + i % 26) for i in range(10_000))
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        coalescer = DeltaCoalescer()
        events: list[tuple[float, ProviderEvent]] = [
            (0.0, TurnStarted(native_turn_ref="t")),
            (0.0, ItemStarted(native_item_ref="m", content=AssistantMessage())),
        ]
        chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
        step = 20.0 / len(chunks)
        events += [(i * step, ItemDelta(native_item_ref="m", text=c)) for i, c in enumerate(chunks)]
        events += [
            (20.0, ItemCompleted(native_item_ref="m", content=AssistantMessage(text=text))),
            (20.0, TurnCompleted(native_turn_ref="t", status="completed")),
        ]
        for at, event in events:
            ready = coalescer.push(event, clock.current_time() + at)
            if ready:
                await core.service.ingest(b, ready)
        with core.reader.snapshot():
            stored = [e for e in core.reader.iter_events() if e.type == "turn_item.delta"]
        assert len(chunks) > 3000
        assert len(stored) <= 4 * 20 + 1, len(stored)
        assert "".join(e.payload.text for e in stored) == text  # type: ignore[union-attr]
        assert _items(core, tid)[1]["text"] == text


async def test_delta_channels_go_to_their_fields(tmp_path: Path) -> None:
    """Reasoning summaries do not mix into the text; a patch snapshot replaces the diff."""
    from t3orch.domain.turn_items import (
        FileChange,
        Reasoning,
    )

    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        coalescer = DeltaCoalescer()
        events: list[ProviderEvent] = [
            TurnStarted(native_turn_ref="t"),
            ItemStarted(native_item_ref="r", content=Reasoning()),
            ItemDelta(native_item_ref="r", text="think "),
            ItemDelta(native_item_ref="r", text="sum ", channel="summary"),
            ItemDelta(native_item_ref="r", text="more"),
            ItemDelta(native_item_ref="r", text="mary", channel="summary"),
            ItemStarted(native_item_ref="f", content=FileChange(file_name="a.txt")),
            ItemDelta(native_item_ref="f", text="diff v1", channel="patch"),
            ItemDelta(native_item_ref="f", text="diff v2", channel="patch"),
        ]
        ready: list[ProviderEvent] = []
        for event in events:
            ready += coalescer.push(event, 0.0)
        ready += coalescer.flush_all()
        await core.service.ingest(b, ready)
        items = {i["type"]: i for i in _items(core, tid)}
        assert items["reasoning"]["text"] == "think more"
        assert items["reasoning"]["summary"] == "sum mary"
        assert items["file_change"]["diffStr"] == "diff v2"
        with core.reader.snapshot():
            rebuilt, _, _ = rebuild(core.reader.iter_events())
            assert compare(core.reader.all_rows(), rebuilt) == []


def test_coalescer_flushes_due_buffers_in_the_order_they_opened() -> None:
    c = DeltaCoalescer(window_s=1.0)
    assert c.next_deadline() is None
    for i, ref in enumerate(["c", "a", "b"]):
        assert c.push(ItemDelta(native_item_ref=ref, text=f"{ref}1"), now=i * 0.1) == []
    assert c.next_deadline() == 1.0
    # "c" and "a" have waited a window; "b" (opened at 0.2) has not.
    out = c.push(ItemDelta(native_item_ref="a", text="a2"), now=1.15)
    assert [(e.native_item_ref, e.text) for e in out if isinstance(e, ItemDelta)] == [
        ("c", "c1"),
        ("a", "a1a2"),
    ]
    assert c.next_deadline() == 1.2
    assert [e.native_item_ref for e in c.flush_all() if isinstance(e, ItemDelta)] == ["b"]
