"""What one SQLite transaction of the writer costs: the statements and encodes it makes.

The writer thread decides, projects and writes a batch inside its transaction while
the event loop waits for the GIL (a plain turn's transactions are on its critical
path: docs/performance.md, "Live streaming"): work repeated per row or per event
shows here as a count, not as noise in a timing.
"""

from __future__ import annotations

from pathlib import Path

from t3orch.domain.thread import AppThread
from t3orch.store.interface import Decision, StateView, Submission
from t3orch.store.kinds import Row
from t3orch.store.sqlite.backend import SQLiteStore
from t3orch.store.sqlite.staging import DecideView
from tests.store.contract import upsert


def statements(store: SQLiteStore, batch: list[Submission]) -> list[str]:
    """The SQL ``commit_batch(batch)`` runs."""
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        store.commit_batch(batch)
    finally:
        store._conn.set_trace_callback(None)
    return seen


def test_rows_written_unread_are_not_read_back_for_their_position(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "events.sqlite3")
    store.commit_batch([upsert(1), upsert(2)])
    # Two stored rows rewritten and a new one, none read by its decision: the upsert
    # keeps a stored position by itself, so nothing needs reading.
    run = statements(store, [upsert(1, "a"), upsert(2, "b"), upsert(3)])
    assert [s for s in run if s.lstrip().upper().startswith("SELECT")] == []
    assert [t.id for t in store.select(AppThread)] == ["thr_0001", "thr_0002", "thr_0003"]


def test_a_select_after_unread_writes_reads_their_positions_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "events.sqlite3")
    store.commit_batch([upsert(1), upsert(2), upsert(3)])

    def listed(view: StateView) -> Decision:
        return Decision([], [t.id for t in view.select(AppThread)])

    # The select of the kind reads its stored rows (and so their positions): the
    # rows staged before it need no read of their own.
    run = statements(store, [upsert(3, "c"), upsert(1, "a"), Submission(listed)])
    selects = [s for s in run if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1, selects
    assert store.commit_batch([Submission(listed)])[0].result == [
        "thr_0001",
        "thr_0002",
        "thr_0003",
    ]


def test_a_projected_row_is_staged_as_it_was_made(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "events.sqlite3")
    store.commit_batch([upsert(1)])
    view = DecideView(store._conn, "2026-12-02T00:00:00.000Z", {}, next_sequence=2)
    view.begin()
    new = Row("thread", "thr_0002", "thr_0002", 2, "active", b"{}", 2)
    again = Row("thread", "thr_0001", "thr_0001", 3, "active", b"{}", 3)
    view.put_row(new)
    view.put_row(again)
    view.keep(None)
    # A new row, or one whose stored position was never read, needs no copy of its own.
    assert view.batch.rows[("thread", "thr_0002")] is new
    assert view.batch.rows[("thread", "thr_0001")] is again


def test_a_stored_row_is_read_once_per_batch(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "events.sqlite3")
    store.commit_batch([upsert(1)])

    def title(view: StateView) -> Decision:
        found = view.get(AppThread, "thr_0001")
        return Decision([], None if found is None else found.title)

    # Three submissions of one batch read the same stored row: nothing stored changes
    # inside the batch's transaction, so one read serves them all.
    run = statements(store, [Submission(title), Submission(title), Submission(title)])
    reads = [s for s in run if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1, reads
    assert [o.result for o in store.commit_batch([Submission(title)] * 2)] == ["t", "t"]


def test_a_count_reads_no_rows(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "events.sqlite3")
    store.commit_batch([upsert(1)])

    def counted(view: StateView) -> Decision:
        return Decision([], view.count(AppThread, thread_id="thr_0001"))

    # A send counts its thread's runs: a thread's history must not be read for it.
    run = statements(store, [Submission(counted)])
    assert [s for s in run if "body" in s] == []
