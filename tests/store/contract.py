"""The event-store contract: any backend that passes this suite is a store.

A backend under test is a factory ``open() -> Store`` (``t3orch.store.interface``:
the ``EventStore`` write side and the ``ReadModel`` reads of one store); calling
it again returns a store on the same data where the backend is durable. Every
value read here is typed (no ``Any``): the next backend is written against
this file and the interface alone (see test_sqlite_contract.py for SQLite's).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from t3orch.domain.base import ProviderRef
from t3orch.domain.request import LiveCapability, RuntimeRequest
from t3orch.domain.thread import AppThread, ModelSelection
from t3orch.domain.turn_items import AssistantMessage, TurnItemBase, UserMessage
from t3orch.domain.vocab import RuntimeRequestStatus, TurnItemStatus
from t3orch.events import (
    EventDraft,
    ProviderDiagnostic,
    RuntimeRequestUpserted,
    ThreadUpserted,
    TurnItemDelta,
    TurnItemUpserted,
)
from t3orch.ids import (
    CommandId,
    DaemonId,
    MessageId,
    NodeId,
    ProjectId,
    ProviderSessionId,
    ProviderTurnId,
    RunId,
    RuntimeRequestId,
    ThreadId,
    TurnItemId,
)
from t3orch.projections.check import compare, rebuild
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import (
    DaemonRecord,
    DaemonRegistry,
    Decision,
    StateView,
    Store,
    Submission,
)

OpenStore = Callable[[], Store]


def thread(i: int, now: str = "2026-11-30T00:00:00.000Z", title: str = "t") -> AppThread:
    return AppThread(
        id=ThreadId(f"thr_{i:04d}"),
        project_id=ProjectId("prj_x"),
        title=title,
        default_provider="standin",
        model_selection=ModelSelection(provider="standin"),
        runtime_mode="approval-required",
        interaction_mode="default",
        cwd="/tmp",
        branch=None,
        worktree_path=None,
        active_provider_thread_id=None,
        lineage=None,
        created_at=now,
        updated_at=now,
    )


def upsert(i: int, title: str = "t") -> Submission:
    return Submission(
        lambda view: Decision(
            [EventDraft(payload=ThreadUpserted(thread=thread(i, title=title)))], i
        )
    )


def diag(n: int) -> Submission:
    drafts = [
        EventDraft(
            payload=ProviderDiagnostic(
                provider_session_id=None, level="info", code="c", message=str(k)
            )
        )
        for k in range(n)
    ]
    return Submission(lambda view: Decision(drafts, n))


def reject(view: StateView) -> Decision:
    raise CommandRejected("nope", "refused on purpose")


ITEM = TurnItemId("itm_0001")


def item(text: str = "", status: TurnItemStatus = "running") -> AssistantMessage:
    now = "2026-11-30T00:00:00.000Z"
    return AssistantMessage(
        message_id=MessageId("msg_0001"),
        text=text,
        id=ITEM,
        thread_id=ThreadId("thr_0001"),
        run_id=RunId("run_0001"),
        node_id=NodeId("nod_0001"),
        provider_turn_id=ProviderTurnId("ptn_0001"),
        native_item_ref=ProviderRef(value="m1", strength="scoped"),
        status=status,
        created_at=now,
        updated_at=now,
    )


def put_item(text: str = "", status: TurnItemStatus = "running") -> Submission:
    drafts = [EventDraft(payload=TurnItemUpserted(item=item(text, status)))]
    return Submission(lambda view: Decision(drafts))


def stream(*texts: str) -> Submission:
    drafts = [
        EventDraft(payload=TurnItemDelta(item_id=ITEM, thread_id=ThreadId("thr_0001"), text=t))
        for t in texts
    ]
    return Submission(lambda view: Decision(drafts))


def request(i: int, status: RuntimeRequestStatus, thread: int = 1) -> Submission:
    req = RuntimeRequest(
        id=RuntimeRequestId(f"req_{i:04d}"),
        node_id=NodeId("nod_0001"),
        thread_id=ThreadId(f"thr_{thread:04d}"),
        provider_turn_id=None,
        native_request_ref=str(i),
        kind="command",
        status=status,
        response_capability=LiveCapability(provider_session_id=ProviderSessionId("pss_1")),
        created_at="2026-11-30T00:00:00.000Z",
    )
    drafts = [EventDraft(payload=RuntimeRequestUpserted(request=req))]
    return Submission(lambda view: Decision(drafts))


def read_text(view: StateView) -> Decision:
    """Returns the item's text as this submission's decider sees it."""
    seen = view.get(AssistantMessage, ITEM)
    return Decision([], None if seen is None else seen.text)


def read_then_reject(view: StateView) -> Decision:
    view.get(AssistantMessage, ITEM)
    raise CommandRejected("nope", "refused after reading")


class StoreContract:
    """Subclasses provide the ``open_store`` fixture."""

    @pytest.fixture
    def open_store(self) -> OpenStore:
        raise NotImplementedError

    def test_fresh_store_is_empty(self, open_store: OpenStore) -> None:
        store = open_store()
        assert store.last_sequence() == 0
        assert store.projection_sequence() == 0
        assert store.read_events() == []

    def test_sequences_start_at_one_and_increase_without_gaps(self, open_store: OpenStore) -> None:
        store = open_store()
        out = store.commit_batch([diag(3), upsert(1), diag(2)])
        seqs = [e.sequence for o in out for e in o.events]
        assert seqs == [1, 2, 3, 4, 5, 6]
        assert [e.sequence for e in store.read_events()] == seqs
        assert store.last_sequence() == 6 == store.projection_sequence()

    def test_a_visible_commit_is_read_back_and_then_made_durable(
        self, open_store: OpenStore
    ) -> None:
        """``commit_visible`` commits as ``commit_batch`` does (every reader sees it);
        ``make_durable`` then syncs it (the writer's two stages)."""
        store = open_store()
        out = store.commit_visible([diag(2), upsert(1)])
        assert [e.sequence for o in out for e in o.events] == [1, 2, 3]
        assert [e.sequence for e in store.read_events()] == [1, 2, 3]
        store.make_durable()
        store.make_durable()  # nothing new committed: nothing to do
        assert store.last_sequence() == 3 == store.projection_sequence()
        reopened = open_store()
        assert reopened.last_sequence() in (0, 3)  # 3 where the backend is durable

    def test_envelope_names_type_and_app_ids(self, open_store: OpenStore) -> None:
        store = open_store()
        (o,) = store.commit_batch([upsert(7)])
        (env,) = store.read_events()
        assert env == o.events[0]
        assert env.type == "thread.upserted"
        assert env.thread_id == "thr_0007"
        assert env.occurred_at.endswith("Z")

    def test_every_row_shape_reads_back_as_committed_in_order(self, open_store: OpenStore) -> None:
        # Deltas (thread only), item upserts (thread, run, node), a diagnostic naming
        # a session, one without ids, a command's event; a rejected submission between.
        named = ProviderDiagnostic(
            provider_session_id=ProviderSessionId("pss_1"), level="info", code="c", message="m"
        )
        store = open_store()
        out = store.commit_batch(
            [
                upsert(1),
                put_item(),
                stream("a", "b"),
                Submission(lambda view: Decision([EventDraft(payload=named)])),
                diag(1),
                Submission(reject),
                Submission(upsert(2).decide, CommandId("c2")),
                stream("c"),
                put_item("abc", "completed"),
            ]
        )
        committed = [e for o in out for e in o.events]
        assert [e.sequence for e in committed] == list(range(1, 10))
        assert store.read_events() == committed
        assert [e.type for e in committed][2:5] == [
            "turn_item.delta",
            "turn_item.delta",
            "provider.diagnostic",
        ]
        assert committed[6].command_id == "c2"
        assert committed[4].provider_session_id == "pss_1"

    def test_rejected_submission_rolls_back_alone(self, open_store: OpenStore) -> None:
        store = open_store()
        out = store.commit_batch([upsert(1), Submission(reject), upsert(2)])
        assert out[1].error is not None and out[1].error.code == "nope"
        assert [e.sequence for e in store.read_events()] == [1, 2]
        assert {t.id for t in store.select(AppThread)} == {"thr_0001", "thr_0002"}

    def test_later_submission_sees_earlier_one_in_the_same_batch(
        self, open_store: OpenStore
    ) -> None:
        store = open_store()

        def check(view: StateView) -> Decision:
            assert view.get(AppThread, "thr_0001") is not None
            return Decision([], "seen")

        out = store.commit_batch([upsert(1), Submission(check)])
        assert out[1].result == "seen"

    def test_a_decide_counts_stored_and_staged_rows_once_each(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch([upsert(1)])

        def counted(view: StateView) -> Decision:
            return Decision([], [view.count(AppThread, thread_id=f"thr_000{i}") for i in (1, 2, 3)])

        # thr_0001 stored and staged again, thr_0002 staged only, thr_0003 neither.
        out = store.commit_batch([upsert(1, "again"), upsert(2), Submission(counted)])
        assert out[2].result == [1, 1, 0]
        assert store.commit_batch([Submission(counted)])[0].result == [1, 1, 0]

    def test_a_decide_reads_entities_by_type(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch([upsert(1), put_item("hel"), stream("lo")])

        def check(view: StateView) -> Decision:
            assert view.exists(AppThread, "thr_0001")
            assert not view.exists(AppThread, "thr_0009")
            folded = view.get(AssistantMessage, ITEM)
            unfolded = view.get_unfolded(AssistantMessage, ITEM)
            assert folded is not None and folded.text == "hello"
            assert unfolded is not None and unfolded.text == "hel"
            # Another variant of the same kind is not that item.
            assert view.get(UserMessage, ITEM) is None
            assert [i.id for i in view.select(TurnItemBase, thread_id="thr_0001")] == [ITEM]
            running = view.select_by_status(TurnItemBase, ["running"], thread_id="thr_0001")
            assert [i.id for i in running] == [ITEM]
            assert view.select_by_status(AssistantMessage, ["completed"]) == []
            return Decision([], "read")

        (out,) = store.commit_batch([Submission(check)])
        assert out.error is None, out.error
        assert out.result == "read"

    def test_duplicate_command_id_returns_first_result_and_writes_nothing(
        self, open_store: OpenStore
    ) -> None:
        store = open_store()
        first = Submission(upsert(1).decide, CommandId("cmd-1"), "t")
        second = Submission(upsert(2).decide, CommandId("cmd-1"), "t")
        (a,) = store.commit_batch([first])
        (b,) = store.commit_batch([second])
        assert b.duplicate and not a.duplicate
        assert b.result == a.result == 1
        assert b.result_sequence == a.result_sequence == 1
        assert store.last_sequence() == 1
        receipt = store.receipt(CommandId("cmd-1"))
        assert receipt is not None and receipt.result_sequence == 1

    def test_duplicate_within_one_batch(self, open_store: OpenStore) -> None:
        store = open_store()
        out = store.commit_batch(
            [
                Submission(upsert(1).decide, CommandId("c")),
                Submission(upsert(2).decide, CommandId("c")),
            ]
        )
        assert out[1].duplicate and out[1].result == 1
        assert store.last_sequence() == 1

    def test_paging_and_iteration(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch([diag(25)])
        assert [e.sequence for e in store.read_events(10, 5)] == [11, 12, 13, 14, 15]
        assert [e.sequence for e in store.iter_events(20)] == [21, 22, 23, 24, 25]

    def test_upsert_keeps_first_position(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch([upsert(1), upsert(2)])
        store.commit_batch([upsert(1, title="renamed")])
        threads = store.select(AppThread)
        assert [t.id for t in threads] == ["thr_0001", "thr_0002"]
        assert threads[0].title == "renamed"
        renamed = store.get(AppThread, "thr_0001")
        assert renamed is not None and renamed.title == "renamed"
        assert store.get(AppThread, "thr_9999") is None

    def test_a_row_updated_unread_keeps_its_place_for_later_submissions(
        self, open_store: OpenStore
    ) -> None:
        store = open_store()
        store.commit_batch([upsert(1), upsert(2)])

        def listed(view: StateView) -> Decision:
            return Decision([], [(t.id, t.title) for t in view.select(AppThread)])

        # thr_0001 is rewritten without being read first, then listed in the same batch.
        _, seen = store.commit_batch([upsert(1, title="renamed"), Submission(listed)])
        assert seen.result == [("thr_0001", "renamed"), ("thr_0002", "t")]
        assert [t.id for t in store.select(AppThread)] == ["thr_0001", "thr_0002"]

    def test_streamed_text_is_seen_by_later_submissions_and_batches(
        self, open_store: OpenStore
    ) -> None:
        store = open_store()
        outcomes = store.commit_batch(
            [
                upsert(1),
                put_item(),
                stream("hel", "lo"),
                Submission(read_text),
                Submission(read_then_reject),
                stream(" wor"),
                Submission(read_text),
            ]
        )
        assert [o.result for o in outcomes[3:4] + outcomes[6:]] == ["hello", "hello wor"]
        assert outcomes[4].error is not None and outcomes[4].error.code == "nope"
        store.commit_batch([stream("ld")])
        (seen,) = store.commit_batch([Submission(read_text)])
        assert seen.result == "hello world"
        assert store.last_sequence() == store.projection_sequence() == 6

    def test_an_upsert_folds_the_streamed_text_away(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch([upsert(1), put_item(), stream("draft")])
        store.commit_batch([put_item("final", "completed"), stream(" late")])
        (seen,) = store.commit_batch([Submission(read_text)])
        # A terminal item ignores deltas that arrive after it completed.
        assert seen.result == "final"
        store.commit_batch([put_item("again"), stream("+1")])
        (seen,) = store.commit_batch([Submission(read_text)])
        assert seen.result == "again+1"

    def test_select_by_status_of_one_thread(self, open_store: OpenStore) -> None:
        store = open_store()
        other = msgspec.structs.replace(item("b"), id=TurnItemId("itm_0002"), thread_id="thr_0002")
        done = msgspec.structs.replace(item("c", "completed"), id=TurnItemId("itm_0003"))
        drafts = [EventDraft(payload=TurnItemUpserted(item=i)) for i in (item("a"), other, done)]
        store.commit_batch([Submission(lambda view: Decision(drafts))])

        def live(thread_id: str | None) -> Submission:
            return Submission(
                lambda view: Decision(
                    [],
                    [
                        i.id
                        for i in view.select_by_status(
                            TurnItemBase, ("pending", "running"), thread_id=thread_id
                        )
                    ],
                )
            )

        mine, everyone = store.commit_batch([live("thr_0001"), live(None)])
        assert mine.result == ["itm_0001"]
        assert everyone.result == ["itm_0001", "itm_0002"]

    def test_rows_equal_a_rebuild(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch([upsert(1), diag(2), upsert(2), upsert(1, title="x")])
        rebuilt, count, gaps = rebuild(store.iter_events())
        assert count == 5 and not gaps
        assert compare(store.all_rows(), rebuilt) == []

    def test_typed_reads_see_entities_as_committed_with_their_streamed_text(
        self, open_store: OpenStore
    ) -> None:
        store = open_store()
        store.commit_batch([upsert(1), put_item(), stream("hel", "lo")])
        with store.snapshot():
            seen = store.get(AssistantMessage, ITEM)
            assert seen is not None and seen.text == "hello"
            # Another variant of the same kind is not this item.
            assert store.get(UserMessage, ITEM) is None
            assert [(i.id, i.status) for i in store.turn_items("thr_0001")] == [(ITEM, "running")]
            assert store.turn_items("thr_0002") == []
            running = store.select_by_status(AssistantMessage, ("running",), thread_id="thr_0001")
            assert [i.text for i in running] == ["hello"]
            assert store.select(AssistantMessage, thread_id="thr_0002") == []
        rows, total = store.rows_window("turn_item", "thr_0001", limit=10)
        assert total == 1 and [r.id for r in rows] == [ITEM]
        # Rows are as stored (the text still streaming); folded, they hold it.
        assert store.folded(rows[0]).body != rows[0].body
        assert [e.type for e in store.read_thread_events("thr_0001", after=1)] == [
            "turn_item.upserted",
            "turn_item.delta",
            "turn_item.delta",
        ]

    def test_pending_requests_of_one_thread_or_all(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch(
            [request(1, "pending"), request(2, "resolved"), request(3, "pending", thread=2)]
        )
        assert [r.id for r in store.pending_requests()] == ["req_0001", "req_0003"]
        assert [r.id for r in store.pending_requests("thr_0002")] == ["req_0003"]
        store.commit_batch([request(1, "resolved")])
        assert [r.id for r in store.pending_requests()] == ["req_0003"]

    def test_recent_reads_a_threads_entities_newest_first_as_iterated(
        self, open_store: OpenStore
    ) -> None:
        store = open_store()
        # 30 of thread 1, one event each (several pages), and others' between them.
        store.commit_batch([request(i, "pending", thread=1 + (i % 7 == 0)) for i in range(1, 43)])
        mine = [f"req_{i:04d}" for i in range(42, 0, -1) if i % 7]
        newest = store.recent(RuntimeRequest, thread_id="thr_0001")
        assert [r.id for r in newest] == mine
        assert [r.id for r in store.recent(RuntimeRequest, thread_id="thr_0009")] == []
        # Another entity of the kind's thread is not read as this one.
        assert list(store.recent(AppThread, thread_id="thr_0001")) == []
        # Created at or after a row's position only.
        rows = {r.id: r for r in store.rows("runtime_request", thread_id="thr_0001")}
        since = rows["req_0030"].position
        recent = store.recent(RuntimeRequest, thread_id="thr_0001", since_position=since)
        assert [r.id for r in recent] == mine[: mine.index("req_0030") + 1]

        # Iterated lazily, holding nothing between items: the store commits while one
        # is held, and the rest never includes the rows created since.
        held = store.recent(RuntimeRequest, thread_id="thr_0001")
        assert next(held).id == "req_0041"
        store.commit_batch([request(43, "pending"), request(2, "resolved")])
        assert [r.id for r in held] == mine[1:]
        with store.snapshot():
            now = list(store.recent(RuntimeRequest, thread_id="thr_0001"))
        assert [r.id for r in now] == ["req_0043", *mine]
        assert [r.status for r in now if r.id == "req_0002"] == ["resolved"]

    def test_recent_turn_items_carry_their_streamed_text(self, open_store: OpenStore) -> None:
        store = open_store()
        store.commit_batch([upsert(1), put_item(), stream("hel", "lo")])
        (seen,) = store.recent(AssistantMessage, thread_id="thr_0001")
        assert seen.text == "hello"
        assert list(store.recent(UserMessage, thread_id="thr_0001")) == []


class DurableStoreContract(StoreContract):
    """For backends whose data outlives the connection."""

    def test_reopen_keeps_everything_and_never_reuses_sequences(
        self, open_store: OpenStore
    ) -> None:
        store = open_store()
        store.commit_batch([Submission(upsert(1).decide, CommandId("c1")), diag(2)])
        store.close()
        store = open_store()
        assert store.last_sequence() == 3
        (o,) = store.commit_batch([diag(1)])
        assert o.events[0].sequence == 4
        assert store.receipt(CommandId("c1")) is not None


# -- the fleet registry (a table beside the log) -------------------------------------

OpenRegistry = Callable[[], DaemonRegistry]


def daemon(n: int, *, beat: float = 100.0, host: str = "h") -> DaemonRecord:
    return DaemonRecord(
        daemon_id=DaemonId(f"dmn_{n:04d}"),
        host=host,
        version="0",
        pid=1000 + n,
        api_url=f"ws://127.0.0.1:{9000 + n}",
        token="t" * 64,
        started_at=1.0,
        heartbeat_at=beat,
        expires_at=beat + 10.0,
    )


class RegistryContract:
    """Subclasses provide ``open_registry`` (two calls: two connections to one store)."""

    def test_an_upsert_is_read_back_and_a_heartbeat_replaces_the_row(
        self, open_registry: OpenRegistry
    ) -> None:
        reg = open_registry()
        assert reg.daemons() == []
        reg.upsert_daemon(daemon(1))
        reg.upsert_daemon(daemon(2, host="other"))
        reg.upsert_daemon(daemon(1, beat=200.0))
        assert reg.daemons() == [daemon(1, beat=200.0), daemon(2, host="other")]
        reg.close()

    def test_every_connection_sees_every_daemon(self, open_registry: OpenRegistry) -> None:
        a, b = open_registry(), open_registry()
        a.upsert_daemon(daemon(1))
        b.upsert_daemon(daemon(2))
        assert [d.daemon_id for d in a.daemons()] == ["dmn_0001", "dmn_0002"]
        assert b.daemons() == a.daemons()
        a.close()
        b.close()

    def test_online_until_the_heartbeat_expires(self, open_registry: OpenRegistry) -> None:
        reg = open_registry()
        reg.upsert_daemon(daemon(1, beat=100.0))
        (d,) = reg.daemons()
        assert d.online(109.0) and not d.online(110.0)
        reg.close()
