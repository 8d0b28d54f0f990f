"""The single writer: batches commit one after another, in queue order, on its thread.

The store is the real SQLite store; one test makes a commit fail as a full disk
would (the only fake: the write raising SQLite's own error).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from t3orch.domain.turn_items import AssistantMessage
from t3orch.events import EventDraft, ProviderDiagnostic
from t3orch.ids import CommandId
from t3orch.projections.check import compare, rebuild
from t3orch.store import writer as writer_module
from t3orch.store.errors import StoreFull
from t3orch.store.interface import Decision, Outcome, StateView
from t3orch.store.open import open_log
from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.staging import StagedBatch
from t3orch.store.writer import EventWriter, Pile, Ticket
from tests.store.contract import ITEM, diag, put_item, stream

_WAIT_S = 10


def _note(view: StateView) -> Decision:
    """One event, whose result is the streamed item's text as this decide saw it."""
    item = view.get(AssistantMessage, ITEM)
    draft = EventDraft(
        payload=ProviderDiagnostic(provider_session_id=None, level="info", code="c", message="m")
    )
    return Decision([draft], None if item is None else item.text)


async def test_every_batch_is_decided_and_committed_on_the_writer_thread(tmp_path: Path) -> None:
    """No thread but the writer's touches the store: a backlog is taken batch by batch."""
    seen: list[tuple[str, list[str]]] = []
    entered, release = threading.Event(), threading.Event()

    def hold(view: StateView) -> Decision:
        entered.set()
        release.wait(_WAIT_S)
        return Decision([])

    def where(view: StateView) -> Decision:
        seen.append((threading.current_thread().name, [t.name for t in threading.enumerate()]))
        return Decision([])

    # The log as the daemon opens it, one submission per batch: while the first is
    # decided, a backlog queues behind it.
    async with open_log(tmp_path / "w.db", max_batch=1) as log:
        with trio.fail_after(_WAIT_S):
            held = await log.writer.enqueue(hold)
            assert await trio.to_thread.run_sync(entered.wait, _WAIT_S)
            queued = (put_item("a").decide, where, where, stream("b").decide, where)
            tickets = [await log.writer.enqueue(d) for d in queued]
            release.set()
            outcomes = [await t.outcome() for t in (held, *tickets)]
    assert [e.sequence for o in outcomes for e in o.events] == [1, 2]
    assert [name for name, _ in seen] == ["t3orch event writer"] * 3
    assert all(not [t for t in threads if "decider" in t] for _, threads in seen)


class FailingOnce(SQLiteStore):
    """A store whose next write fails as a full disk does (SQLite's own error)."""

    fail_next = True

    def _write(self, batch: StagedBatch) -> None:
        if self.fail_next:
            self.fail_next = False
            raise sqlite3.OperationalError("database or disk is full")
        super()._write(batch)


async def test_a_batch_the_store_has_no_room_for_commits_once_it_has_before_those_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "FULL_RETRY_S", 0.05)
    store = FailingOnce(tmp_path / "e.db")
    writer = EventWriter(store, max_batch=2)
    results: list[Outcome | StoreFull] = []
    try:
        with trio.fail_after(_WAIT_S):
            # The item and a command are the first batch (no room); the rest queue behind.
            tickets = [
                await writer.enqueue(put_item("hel").decide),
                await writer.enqueue(diag(1).decide, command_id=CommandId("cmd-1")),
                await writer.enqueue(stream("lo").decide),
                await writer.enqueue(_note),
            ]
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                for t in tickets:
                    try:
                        results.append(await t.outcome())
                    except StoreFull as exc:
                        results.append(exc)
                writer.close()
    finally:
        store.close()
    item, command, delta, note = results
    # The command was refused (nothing of it written); the item waited for room and
    # committed first, then what was queued behind it, in order.
    assert isinstance(command, StoreFull) and "full" in str(command)
    assert isinstance(item, Outcome) and isinstance(delta, Outcome) and isinstance(note, Outcome)
    assert [e.sequence for o in (item, delta, note) for e in o.events] == [1, 2, 3]
    assert note.result == "hello"
    reopened = SQLiteStore(tmp_path / "e.db")
    try:
        assert [e.sequence for e in reopened.iter_events()] == [1, 2, 3]
        assert reopened.receipt(CommandId("cmd-1")) is None
        rebuilt, _, gaps = rebuild(reopened.iter_events())
        assert not gaps and compare(reopened.all_rows(), rebuilt) == []
    finally:
        reopened.close()


async def test_a_batch_sees_the_text_streamed_by_the_batch_committed_before_it(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    writer = EventWriter(store, max_batch=2)
    try:
        with trio.fail_after(_WAIT_S):
            queued = [put_item("hel").decide, stream("lo").decide, stream("!").decide, _note]
            tickets = [await writer.enqueue(d) for d in queued]
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                outcomes = [await t.outcome() for t in tickets]
                writer.close()
    finally:
        store.close()
    # The item's text as stored in the log (batch 1) and staged in its own batch.
    assert outcomes[-1].result == "hello!"
    assert [e.sequence for o in outcomes for e in o.events] == [1, 2, 3, 4]


async def test_piles_of_one_key_queued_back_to_back_join_as_data(tmp_path: Path) -> None:
    """The join is the writer's: it extends the queued pile; the decide is a plain
    function reading the list it was given (nothing is asked of it)."""
    entered, release = threading.Event(), threading.Event()

    def hold(view: StateView) -> Decision:
        entered.set()
        release.wait(_WAIT_S)
        return Decision([])

    def noting(items: list[str]) -> Callable[[StateView], Decision]:
        def decide(view: StateView) -> Decision:
            drafts = [
                EventDraft(
                    payload=ProviderDiagnostic(
                        provider_session_id=None, level="info", code="c", message=text
                    )
                )
                for text in items
            ]
            return Decision(drafts, list(items))

        return decide

    async def queue(key: str, *texts: str) -> Ticket:
        items = list(texts)
        pile = Pile(key, items)
        return await log.writer.enqueue(noting(items), size=len(items), pile=pile)

    async with open_log(tmp_path / "p.db") as log:
        with trio.fail_after(_WAIT_S):
            held = await log.writer.enqueue(hold)
            assert await trio.to_thread.run_sync(entered.wait, _WAIT_S)
            a = await queue("s1", "a")
            b = await queue("s1", "b", "c")
            c = await queue("s2", "d")
            d = await queue("s1", "e")
            release.set()
            await held.outcome()
            oa, ob, oc, od = [await t.outcome() for t in (a, b, c, d)]
    # b joined a; d stays apart, behind another key's pile (the log's order).
    assert oa is ob and oa is not od
    assert (oa.result, oc.result, od.result) == (["a", "b", "c"], ["d"], ["e"])
    assert [e.sequence for o in (oa, oc, od) for e in o.events] == [1, 2, 3, 4, 5]


async def test_a_submission_queued_with_next_commits_in_the_next_ones_transaction(
    tmp_path: Path,
) -> None:
    """``with_next``: the writer, idle, does not take it alone; it waits for the next
    one queued and commits both in one batch, in order (a checkpoint's record and the
    turn's end: one fsync)."""
    async with open_log(tmp_path / "n.db") as log:
        with trio.fail_after(_WAIT_S):
            await (await log.writer.enqueue(_note)).outcome()
            batches = log.writer.stats.batches
            first = await log.writer.enqueue(_note, with_next=True)
            # Time for the idle writer thread to have taken it, were it alone.
            await trio.to_thread.run_sync(threading.Event().wait, 0.2)
            assert log.writer.stats.batches == batches
            second = await log.writer.enqueue(_note)
            a, b = await first.outcome(), await second.outcome()
    assert log.writer.stats.batches == batches + 1
    assert [e.sequence for e in a.events] == [2] and [e.sequence for e in b.events] == [3]
