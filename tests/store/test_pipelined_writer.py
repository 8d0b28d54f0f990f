"""The writer decides the next batch while the batch ahead of it commits.

The store is the real SQLite store; only its write and commit wait for the test
(and one commit fails as a full disk would), so a batch is sure to be decided
on top of one that has not committed.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from t3orch.events import EventDraft, ProviderDiagnostic
from t3orch.projections.check import compare, rebuild
from t3orch.store.errors import StoreFull
from t3orch.store.interface import Decision, Outcome, StateView, Submission
from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.sqlite.staging import PreparedBatch
from t3orch.store.writer import EventWriter
from tests.store.contract import ITEM, diag, put_item, stream

_WAIT_S = 10


class GatedStore(SQLiteStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.may_write = threading.Event()
        self.writing = threading.Event()
        self.may_commit = threading.Event()
        self.decided_behind = threading.Event()
        self.fail_commit = False
        self.prepared_on_top: list[bool] = []

    def prepare_batch(
        self, submissions: Sequence[Submission], behind: PreparedBatch | None = None
    ) -> PreparedBatch:
        batch = super().prepare_batch(submissions, behind)
        self.prepared_on_top.append(behind is not None)
        if behind is not None:
            self.decided_behind.set()
        return batch

    def write_batch(self, batch: PreparedBatch) -> None:
        self.writing.set()
        assert self.may_write.wait(_WAIT_S)
        super().write_batch(batch)

    def commit_written(self, batch: PreparedBatch) -> list[Outcome]:
        assert self.may_commit.wait(_WAIT_S)
        if self.fail_commit:
            self.fail_commit = False
            self._rollback(sqlite3.OperationalError("database or disk is full"))
        return super().commit_written(batch)


def _note(view: StateView) -> Decision:
    """Writes one event; its result is what it saw of the streamed item."""
    item: Any = view.get("turn_item", ITEM)
    seen = None if item is None else item.text
    items = [i.text for i in view.select("turn_item", thread_id="thr_0001")]
    running = [i.text for i in view.select_by_status("turn_item", ["running"])]
    draft = EventDraft(
        payload=ProviderDiagnostic(provider_session_id=None, level="info", code="c", message="m")
    )
    return Decision([draft], {"get": seen, "select": items, "running": running})


async def _behind_a_gated_batch(
    tmp_path: Path, *, fail_commit: bool
) -> tuple[GatedStore, list[Outcome | BaseException]]:
    """Batch A (an item and its streamed text) is written; X and B, queued behind it,
    are decided while A waits to commit; then A commits (or fails) and they follow."""
    store = GatedStore(tmp_path / "e.db")
    store.fail_commit = fail_commit
    # Batches of two: the third submission is a backlog, which the writer pipelines.
    writer = EventWriter(store, max_batch=2, commit_loop=store.commit_loop)
    results: list[Outcome | BaseException] = []
    try:
        with trio.fail_after(_WAIT_S * 3):
            await _drive(store, writer, results)
    finally:
        store.close()
    return store, results


async def _drive(
    store: GatedStore, writer: EventWriter, results: list[Outcome | BaseException]
) -> None:
    async def outcome_of(ticket: Any) -> None:
        try:
            results.append(await ticket.outcome())
        except StoreFull as exc:
            results.append(exc)

    # All queued before the writer starts: it takes A (two), and X and B queue behind.
    a1 = await writer.enqueue(put_item("hel").decide)
    a2 = await writer.enqueue(stream("lo").decide)
    x = await writer.enqueue(diag(1).decide)
    b = await writer.enqueue(_note)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        # A is being written (or committed) while X and B are decided on top of it.
        await trio.to_thread.run_sync(store.writing.wait, _WAIT_S)
        store.may_write.set()
        assert await trio.to_thread.run_sync(store.decided_behind.wait, _WAIT_S)
        store.may_commit.set()
        for ticket in (a1, a2, x, b):
            await outcome_of(ticket)
        writer.close()


async def test_a_batch_decided_behind_an_uncommitted_one_sees_its_rows_and_text(
    tmp_path: Path,
) -> None:
    store, (a1, a2, x, b) = await _behind_a_gated_batch(tmp_path, fail_commit=False)
    assert store.prepared_on_top == [False, True]
    assert isinstance(b, Outcome)
    assert b.result == {"get": "hello", "select": ["hello"], "running": ["hello"]}
    assert isinstance(a1, Outcome) and isinstance(a2, Outcome) and isinstance(x, Outcome)
    assert [e.sequence for o in (a1, a2, x, b) for e in o.events] == [1, 2, 3, 4]
    reopened = SQLiteStore(tmp_path / "e.db")
    try:
        rebuilt, _, gaps = rebuild(reopened.iter_events())
        assert not gaps
        assert compare(reopened.all_rows(), rebuilt) == []
        assert reopened.projection_sequence() == 4
    finally:
        reopened.close()


async def test_a_batch_decided_behind_one_that_failed_to_commit_is_decided_again(
    tmp_path: Path,
) -> None:
    store, (a1, a2, x, b) = await _behind_a_gated_batch(tmp_path, fail_commit=True)
    assert isinstance(a1, StoreFull) and isinstance(a2, StoreFull)
    assert "full" in str(a1)
    # Decided on top of A, thrown away with it, then decided again on its own.
    assert store.prepared_on_top == [False, True, False]
    assert isinstance(b, Outcome)
    assert b.result == {"get": None, "select": [], "running": []}
    # A's sequences were never committed: the batch behind it takes them.
    assert isinstance(x, Outcome)
    assert [e.sequence for o in (x, b) for e in o.events] == [1, 2]
    reopened = SQLiteStore(tmp_path / "e.db")
    try:
        assert [e.sequence for e in reopened.iter_events()] == [1, 2]
        assert reopened.all_rows() == []
    finally:
        reopened.close()


def test_only_a_store_with_a_second_connection_is_pipelined(tmp_path: Path) -> None:
    for path, pipelined in ((":memory:", False), (str(tmp_path / "e.db"), True)):
        store = SQLiteStore(path)
        try:
            assert store.pipelined is pipelined
        finally:
            store.close()


async def test_what_queues_while_a_batch_is_written_is_decided_while_it_commits(
    tmp_path: Path,
) -> None:
    store = GatedStore(tmp_path / "w.db")
    writer = EventWriter(store, commit_loop=store.commit_loop)
    try:
        with trio.fail_after(_WAIT_S * 3):
            a = await writer.enqueue(put_item("hel").decide)
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                await trio.to_thread.run_sync(store.writing.wait, _WAIT_S)
                # Queued once A is taken and being written: A's commit waits for it
                # to be decided on top of A, not for A's turn to end.
                b = await writer.enqueue(_note)
                store.may_write.set()
                assert await trio.to_thread.run_sync(store.decided_behind.wait, _WAIT_S)
                store.may_commit.set()
                first, second = await a.outcome(), await b.outcome()
                writer.close()
    finally:
        store.close()
    assert store.prepared_on_top == [False, True]
    assert second.result == {"get": "hel", "select": ["hel"], "running": ["hel"]}
    assert [e.sequence for o in (first, second) for e in o.events] == [1, 2]
