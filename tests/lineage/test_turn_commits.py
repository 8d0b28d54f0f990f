"""The commits on a turn's critical path (issue 17: a plain turn within 1.05x direct).

Each commit is an fsync under ``synchronous = FULL``. At a completed turn's end the
seed's order is items committed, then the checkpoint, then the terminal event; the
checkpoint's record and the terminal event commit in one transaction (record first),
so a turn's end costs the items' commit and that one, not three. Observed with the
broadcast's listener: it is called once per committed batch.
"""

from __future__ import annotations

import io
import threading
import traceback
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from adapters.transcript import load_transcript
from fixtures.fakes.codex_home import make_work_dir
from fixtures.record.supervised import TranscriptLaunchers
from t3orch import timeline
from t3orch.domain.run import Run
from t3orch.domain.turn_items import AssistantMessage, CheckpointItem, UserMessage
from t3orch.store.errors import StoreClosed, StoreNotDurable
from tests.lineage.test_barrier_burst import PROVIDERS, _one_turn
from tests.store.fsync import FsyncGate
from tests.supervisor.support import Rig, rig


async def _after_runs(r: Rig, *texts: str) -> str:
    """A new thread that ran a turn per text: its runtime live and idle."""
    tid = await r.thread()
    for text in texts:
        sent = await r.manager.send_message(tid, text)
        await r.wait_run(sent.result["runId"])
    # Seen committed, the run's dispatcher may not have heard its end yet (the thread
    # is still dispatching: a send would be queued behind it).
    await wait_all_tasks_blocked()
    return tid


def _where(batches: list[list[Any]], match: Any) -> list[tuple[int, int]]:
    """(batch index, sequence) of each committed event ``match`` takes."""
    return [(i, e.sequence) for i, batch in enumerate(batches) for e in batch if match(e)]


async def _played_turn(tmp_path: Path, speed: float) -> tuple[Any, list[list[Any]]]:
    """The recorded Codex turn, played at ``speed``: its run, and every committed batch."""
    transcript = load_transcript(_one_turn(tmp_path))
    launchers = TranscriptLaunchers({"codex": transcript}, speed=speed)
    async with rig(tmp_path / "e.db", providers=PROVIDERS, launcher_factory=launchers) as r:
        batches: list[list[Any]] = []
        r.core.service.writer.broadcast.listen(lambda events: batches.append(list(events)))
        tid = await r.thread("codex", cwd=str(make_work_dir(tmp_path / "work")))
        sent = await r.manager.send_message(tid, "remember the word PAPAYA")
        run = await r.wait_run(sent.result["runId"], ("completed", "failed", "interrupted"))
        assert run.status == "completed" and run.checkpoint_id is not None
    return run, batches


def _completed(run: Any) -> Any:
    return lambda e: (
        e.type == "run.upserted"
        and e.payload.run.id == run.id
        and e.payload.run.status == "completed"
    )


async def test_the_checkpoint_record_and_the_turn_end_commit_together(tmp_path: Path) -> None:
    run, batches = await _played_turn(tmp_path, speed=0)
    checkpoint = _where(
        batches,
        lambda e: e.type == "checkpoint.upserted" and e.payload.checkpoint.id == run.checkpoint_id,
    )
    end = _where(batches, _completed(run))
    items = _where(
        batches,
        lambda e: (
            e.type == "turn_item.upserted"
            and e.payload.item.run_id == run.id
            and not isinstance(e.payload.item, CheckpointItem)
        ),
    )
    # One transaction for the record and the end (the items in it or before it), and
    # in sequence order items, checkpoint, end.
    assert [b for b, _ in checkpoint] == [b for b, _ in end], (checkpoint, end)
    assert max(b for b, _ in items) <= checkpoint[0][0]
    assert max(s for _, s in items) < checkpoint[0][1] < end[0][1]


async def test_a_turns_last_frames_commit_with_its_end(tmp_path: Path) -> None:
    """Played at the recorded pace: Codex's last item completes, then ``thread/tokenUsage
    /updated``, ``account/rateLimits/updated`` and ``thread/status/changed`` come 3.5-12 ms
    later, ``turn/completed`` 0.2 ms after the last. Queued as they came, each was a
    transaction of its own, and the turn's end waited for the last one's fsync: what
    follows the last item commits with the end, and nothing commits between them."""
    run, batches = await _played_turn(tmp_path, speed=1)
    (end,) = _where(batches, _completed(run))
    last_item = max(
        _where(
            batches,
            lambda e: (
                e.type == "turn_item.upserted"
                and e.payload.item.run_id == run.id
                and isinstance(e.payload.item, AssistantMessage)
                and e.payload.item.status == "completed"
            ),
        )
    )
    usage = _where(batches, lambda e: e.type == "provider.usage")
    assert usage and {b for b, _ in usage} == {end[0]}, (usage, end)
    between = [[e.type for e in batch] for batch in batches[last_item[0] + 1 : end[0]]]
    assert between == [], between


async def test_a_turns_opening_commits_with_the_providers_first_output(tmp_path: Path) -> None:
    """The recorded turn at its own pace: the turn's start and the user's message come
    while Codex builds its model request; a transaction of their own then took CPU from
    it. They commit with the first item the provider makes."""
    run, batches = await _played_turn(tmp_path, speed=1)

    def item(e: Any) -> bool:
        return e.type == "turn_item.upserted" and e.payload.item.run_id == run.id

    user = _where(batches, lambda e: item(e) and isinstance(e.payload.item, UserMessage))
    made = _where(batches, lambda e: item(e) and not isinstance(e.payload.item, UserMessage))
    started = _where(batches, lambda e: e.type == "provider_turn.upserted")
    # The send's own message commits with the run; the provider's echo of it after.
    echoed = [(b, n) for b, n in user if b >= started[0][0]]
    assert echoed and {b for b, _ in echoed} == {min(made)[0]}, (user, made)


async def test_a_send_to_an_idle_runtime_commits_with_its_attempt(tmp_path: Path) -> None:
    """Before ``turn/start``: the run's send and its attempt in one transaction."""
    async with rig(tmp_path / "e.db") as r:
        tid = await _after_runs(r, "hello")
        batches: list[list[Any]] = []
        r.core.service.writer.broadcast.listen(lambda events: batches.append(list(events)))
        # The runtime that served the first run is live and idle.
        sent = await r.manager.send_message(tid, "again")
        run = await r.wait_run(sent.result["runId"])
        assert run.status == "completed"
        sessions = r.rows("provider_session")
        assert len(sessions) == 1

    queued = _where(
        batches,
        lambda e: (
            e.type == "run.upserted"
            and e.payload.run.id == run.id
            and e.payload.run.status == "queued"
        ),
    )
    attempt = _where(
        batches, lambda e: e.type == "run_attempt.upserted" and e.payload.attempt.run_id == run.id
    )
    assert queued and attempt and queued[0][0] == attempt[0][0], (queued, attempt)
    # The API's answer names the send's own sequence: the run, as queued.
    assert queued[0][1] <= sent.sequence < attempt[0][1]


async def test_a_turn_reads_the_threads_open_runs_not_its_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send to an idle runtime and the dispatch after its turn read the thread's open
    runs (an indexed read), never all its runs: a turn must not cost more as the
    thread's history grows."""
    async with rig(tmp_path / "e.db") as r:
        tid = await _after_runs(r, "one", "two")
        whole: list[str] = []
        for reader in {
            id(x): x for x in (r.manager.reader, r.manager.checkpointer.reader)
        }.values():
            real = reader.select

            def spy(entity: Any, *, thread_id: str | None = None, _real: Any = real) -> Any:
                if entity is Run and thread_id == tid:
                    whole.append("".join(traceback.format_stack(limit=4)))
                return _real(entity, thread_id=thread_id)

            monkeypatch.setattr(reader, "select", spy)
        sent = await r.manager.send_message(tid, "three")
        run = await r.wait_run(sent.result["runId"])
        assert run.status == "completed"
    assert whole == []


async def test_a_sends_turn_start_is_written_during_its_fsync_and_answered_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``synchronous = FULL``: the send's commit is visible (a daemon crash keeps it)
    when COMMIT returns; its ``turn/start`` goes to the provider then, while the
    store fsyncs the ``-wal``. Nobody is told before the fsync: no subscriber has the
    run, and the send's caller is answered after it."""
    stamps = io.StringIO()
    monkeypatch.setattr(timeline, "_out", stamps)
    gate = FsyncGate()
    async with rig(tmp_path / "e.db", synchronous="FULL", fsync=gate) as r:
        tid = await _after_runs(r, "hello")
        published: list[Any] = []
        r.core.service.writer.broadcast.listen(published.extend)
        answered = threading.Event()
        at_fsync: list[tuple[list[Any], bool]] = []

        def turn_started() -> bool:
            # The provider answered this turn's turn/start (stamped after it did).
            if "provider.started" not in stamps.getvalue():
                return False
            at_fsync.append((list(published), answered.is_set()))
            return True

        # Whatever the first turn's end still commits is committed first: the fsync
        # held is the send's (its batch is the first taken after it is queued).
        batches = -1
        while batches != r.core.writer.stats.batches:
            batches = r.core.writer.stats.batches
            await trio.sleep(0.3)
        stamps.seek(0)
        stamps.truncate()
        gate.hold_until(turn_started, only_if=lambda: "send.queue" in stamps.getvalue())
        sent = await r.manager.send_message(tid, "again")
        answered.set()
        run = await r.wait_run(sent.result["runId"])
        assert run.status == "completed"
    assert gate.held is True, "turn/start was not written while the send's fsync ran"
    ((told, acked),) = at_fsync
    # Nothing of the send (another runtime's diagnostic may be published meanwhile).
    assert [e.type for e in told if e.run_id == run.id] == [] and not acked


async def test_a_failed_fsync_of_a_send_fails_the_core_and_answers_no_one(
    tmp_path: Path,
) -> None:
    """EIO from the send's fsync: its caller gets StoreNotDurable, not the run, and the
    writer's failure ends the core and the manager (the daemon exits; its restart
    reads what the disk kept), within a bound and with the runtime reaped."""
    gate = FsyncGate()
    failures: list[BaseException] = []
    pids: list[int] = []
    leaves: list[BaseException] = []
    try:
        with trio.fail_after(30):
            async with rig(tmp_path / "e.db", synchronous="FULL", fsync=gate) as r:
                tid = await _after_runs(r, "hello")
                runtime = r.manager.runners[tid].runtime
                assert runtime is not None and runtime.pid is not None
                pids.append(runtime.pid)
                gate.fail_next()
                try:
                    await r.manager.send_message(tid, "again")
                except StoreNotDurable as exc:
                    failures.append(exc)
                await trio.sleep_forever()  # the writer's failure ends the core
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
    assert len(failures) == 1
    # The writer's own failure, and what could not be recorded after it (the
    # runtime's exit: StoreClosed); nothing else.
    assert any(isinstance(e, StoreNotDurable) for e in leaves), leaves
    assert all(isinstance(e, StoreNotDurable | StoreClosed) for e in leaves), leaves
    (pid,) = pids
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    return [
        leaf
        for e in group.exceptions
        for leaf in (_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    ]
