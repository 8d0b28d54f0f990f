"""Queued ingest batches joining in the writer, and completions that carry their text."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import trio.testing

from t3orch.core import Core, open_core
from t3orch.domain.turn_items import AssistantMessage
from t3orch.ids import CommandId
from t3orch.ingest.binding import SessionBinding
from t3orch.ingest.translate import IngestBatch
from t3orch.projections.check import compare, rebuild
from t3orch.projections.views import thread_detail
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    TurnStarted,
)
from t3orch.store.inflight import InflightWindow
from t3orch.store.interface import Decision, StateView
from tests.store.support import new_thread, started_turn


def _delta(text: str) -> list[ProviderEvent]:
    return [ItemDelta(native_item_ref="m", text=text)]


async def _streaming(core: Core) -> tuple[str, SessionBinding]:
    tid = await new_thread(core.service)
    b = await started_turn(core.service, tid)
    await core.service.ingest(
        b,
        [
            TurnStarted(native_turn_ref="t"),
            ItemStarted(native_item_ref="m", content=AssistantMessage()),
        ],
    )
    return tid, b


def _reply(core: Core, tid: str) -> dict:  # type: ignore[type-arg]
    with core.reader.snapshot():
        detail = thread_detail(core.reader, tid)
    item: dict = msgspec.json.decode(detail.turn_items[-1])  # type: ignore[type-arg]
    return item


def _log(core: Core) -> list[tuple[str, str | None]]:
    with core.reader.snapshot():
        return [
            (e.type, getattr(e.payload, "text", None))
            for e in core.reader.iter_events()
            if e.type.startswith("turn_item.")
        ]


@asynccontextmanager
async def _writer_busy(core: Core) -> AsyncIterator[None]:
    """The writer thread is deciding a command that waits for the block to end:
    what is queued meanwhile waits, untaken, and is taken together afterwards."""
    entered, release = threading.Event(), threading.Event()

    def hold(view: StateView) -> Decision:
        entered.set()
        release.wait(10)
        return Decision([])

    held = await core.writer.enqueue(hold, command_id=CommandId("cmd_hold"))
    assert await trio.to_thread.run_sync(entered.wait, 10)
    try:
        yield
    finally:
        release.set()
    await held.outcome()


def _rows_equal_a_rebuild(core: Core) -> None:
    with core.reader.snapshot():
        rebuilt, _, gaps = rebuild(core.reader.iter_events())
        assert not gaps
        assert compare(core.reader.all_rows(), rebuilt) == []


async def test_a_sessions_batches_queued_back_to_back_are_one_submission(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        svc = core.service
        t1, b1 = await _streaming(core)
        t2, b2 = await _streaming(core)
        before = core.writer.stats.submissions
        async with _writer_busy(core):
            a = await svc.ingest_queued(b1, _delta("a"))
            b = await svc.ingest_queued(b1, _delta("b"))
            c = await svc.ingest_queued(b2, _delta("c"))
            d = await svc.ingest_queued(b1, _delta("d"))
        oa, ob, oc, od = [await t.outcome() for t in (a, b, c, d)]
        # b joined a; d queued behind another session's batch stays apart (log order).
        assert core.writer.stats.submissions - before == 1 + 3
        assert oa is ob and oa is not od
        texts = [[e.payload.text for e in o.events] for o in (oa, oc, od)]  # type: ignore[union-attr]
        assert texts == [["a", "b"], ["c"], ["d"]]
        assert [t for kind, t in _log(core) if kind == "turn_item.delta"] == ["a", "b", "c", "d"]
        assert (_reply(core, t1)["text"], _reply(core, t2)["text"]) == ("abd", "c")
        _rows_equal_a_rebuild(core)


async def test_the_inflight_window_counts_events_not_joined_batches(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid, b = await _streaming(core)
        window = InflightWindow(limit=3)
        # Joined batches share one ticket: the window holds one submission of 3 events.
        async with _writer_busy(core):
            for text in "abc":
                await window.add(await core.service.ingest_queued(b, _delta(text)), 1)
            assert (len(window), window.events) == (1, 3)
        # One more event is over the limit: add waits for that commit, then returns.
        await window.add(await core.service.ingest_queued(b, _delta("d")), 1)
        assert window.events <= 3
        await window.drain()
        assert (len(window), window.events) == (0, 0)
        assert _reply(core, tid)["text"] == "abcd"


async def test_nothing_joins_a_taken_batch_or_a_command(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid, b = await _streaming(core)
        before = core.writer.stats.submissions
        first = await core.service.ingest_queued(b, _delta("a"))
        # Once a submission queued after it is being decided, the writer has taken it.
        async with _writer_busy(core):
            second = await core.service.ingest_queued(b, _delta("b"))
            command = await core.writer.enqueue(
                IngestBatch(b, _delta("c")), command_id=CommandId("cmd_1"), command_type="ingest"
            )
            behind = await core.service.ingest_queued(b, _delta("d"))
        outcomes = [await t.outcome() for t in (first, second, command, behind)]
        assert core.writer.stats.submissions - before == 4 + 1
        assert [len(o.events) for o in outcomes] == [1, 1, 1, 1]
        assert _reply(core, tid)["text"] == "abcd"


async def test_completions_carrying_their_text_after_stored_deltas(tmp_path: Path) -> None:
    """The completion's text wins over what streamed; one without text keeps it."""
    async with open_core(tmp_path / "e.db") as core:
        svc = core.service
        tid, b = await _streaming(core)
        await svc.ingest(b, _delta("ab"))
        await svc.ingest(b, _delta("c"))
        await svc.ingest(
            b, [ItemCompleted(native_item_ref="m", content=AssistantMessage(text="abc"))]
        )
        reply = _reply(core, tid)
        assert (reply["status"], reply["text"]) == ("completed", "abc")
        # Completed again, with its status unchanged: compared with the whole item.
        await svc.ingest(
            b, [ItemCompleted(native_item_ref="m", content=AssistantMessage(text="abc"))]
        )
        reply = _reply(core, tid)
        assert (reply["status"], reply["text"]) == ("completed", "abc")

        await svc.ingest(
            b,
            [
                ItemStarted(native_item_ref="n", content=AssistantMessage()),
                ItemDelta(native_item_ref="n", text="draft"),
            ],
        )
        await svc.ingest(
            b, [ItemCompleted(native_item_ref="n", content=AssistantMessage(text="final"))]
        )
        assert _reply(core, tid)["text"] == "final"

        await svc.ingest(
            b,
            [
                ItemStarted(native_item_ref="o", content=AssistantMessage()),
                ItemDelta(native_item_ref="o", text="kept"),
            ],
        )
        await svc.ingest(b, [ItemCompleted(native_item_ref="o", content=AssistantMessage())])
        reply = _reply(core, tid)
        assert (reply["status"], reply["text"]) == ("completed", "kept")
        with core.reader.snapshot():
            messages = [m.decode() for m in core.reader.rows("message", thread_id=tid)]
        assert [(m.text, m.streaming) for m in messages[1:]] == [
            ("abc", False),
            ("final", False),
            ("kept", False),
        ]
        _rows_equal_a_rebuild(core)


async def test_completions_in_the_decision_that_streamed_the_text(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid, b = await _streaming(core)
        await core.service.ingest(
            b,
            [
                ItemDelta(native_item_ref="m", text="x"),
                ItemCompleted(native_item_ref="m", content=AssistantMessage(text="xy")),
                ItemStarted(native_item_ref="n", content=AssistantMessage()),
                ItemDelta(native_item_ref="n", text="streamed"),
                ItemCompleted(native_item_ref="n", content=AssistantMessage()),
            ],
        )
        with core.reader.snapshot():
            detail = thread_detail(core.reader, tid)
        texts = [msgspec.json.decode(i)["text"] for i in detail.turn_items[1:]]
        assert texts == ["xy", "streamed"]
        upserts = [t for kind, t in _log(core) if kind == "turn_item.upserted"]
        # user message; m started, completed; n started, completed.
        assert len(upserts) == 5
        _rows_equal_a_rebuild(core)


async def test_a_streamed_delta_carries_the_correlation_of_any_other_event(
    tmp_path: Path,
) -> None:
    from t3orch.ingest.translate import _correlation

    async with open_core(tmp_path / "e.db") as core:
        _, b = await _streaming(core)
        delta = ItemDelta(native_item_ref="m", text="hi", raw_event_id="raw_7")
        await core.service.ingest(b, [delta])
        with core.reader.snapshot():
            stored = [e for e in core.reader.iter_events() if e.type == "turn_item.delta"]
        assert [e.correlation for e in stored] == [_correlation(b, delta)]
        assert stored[0].correlation.raw_event_id == "raw_7"
        assert stored[0].correlation.native_item_ref == "m"
        assert stored[0].correlation.provider == b.provider
