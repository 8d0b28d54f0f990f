"""A resume fallback's summary survives the daemon's death before the turn is sent.

The stored provider thread cannot be resumed (the provider answers ``thread/resume``
with "no rollout found"): a replacement is started, seeded with a full summary of the
thread's history (a ``full_thread_summary`` handoff aimed at the run). The daemon dies
before the run's turn reaches the provider (before the turn is begun in the log, or
after it was begun but before ``turn/start`` was written); the provider stays with its
holder. The next daemon reattaches and sends the turn: with the summary, exactly once,
on the replacement thread.

The stand-in plays the Codex transcript recorded for the resume failure
(``fixtures/lineage``), one segment a launch, under a real holder; the seams are where
the daemon stops (it never writes the turn's input, or never begins the turn).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from adapters.codex.runtime import CodexRuntime
from adapters.ownership import this_process
from supervisor.holder.client import holder_launchers
from supervisor.holder.layout import held_root
from supervisor.holder.wire import Kind, iter_file
from supervisor.providers import ProviderSettings
from supervisor.reattach import find_held
from supervisor.session import SessionRunner
from supervisor.startup import settle_previous_run
from tests.holder.support import holders_stopped
from tests.lineage.support import FrameLog, send_completed
from tests.supervisor.standin_plan import plan_settings
from tests.supervisor.support import Rig, rig

OWNER = this_process().token()
REPO = Path(__file__).resolve().parents[2]
#: Segment 0: thread/start and a turn; segment 1: a failing thread/resume, a thread/start
#: and a turn.
RESUME_FAILS = (
    REPO / "fixtures/lineage/resume_failure_on_return_falls_back_to_a_full_summary.codex.ndjson"
)
#: What the replacement's summary opens with (``t3orch.commands.handoff``).
SUMMARY = b"could not be resumed"


def _options(tmp_path: Path) -> dict[str, Any]:
    state = tmp_path / "state"
    settings = plan_settings(
        tmp_path / "plan.json",
        [str(RESUME_FAILS), "--segment", "0", "--loop-turns", "--speed", "0"],
        [str(RESUME_FAILS), "--segment", "1", "--loop-turns", "--speed", "0"],
    )
    return {
        "providers": {"standin": settings},
        "launcher_factory": holder_launchers(held_root(state), 30, OWNER),
        "state_dir": state,
    }


def _turn_inputs(state: Path) -> list[bytes]:
    """Every ``turn/start`` the daemons wrote to a provider, in the journals of the holders
    still there (a holder whose provider exited takes its directory with it)."""
    return [
        record.payload
        for journal in sorted(held_root(state).glob("*/journal"))
        for _, record in iter_file(str(journal))
        if record.kind is Kind.IN and b'"turn/start"' in record.payload
    ]


def _dies_before_the_turn(seam: pytest.MonkeyPatch, begun: bool) -> trio.Event:
    """The daemon stops before the next turn's ``turn/start`` is written (``begun``: after
    the turn was begun in the log; else before it was). Set once it got there."""
    there = trio.Event()

    async def stuck(*args: Any, **kwargs: Any) -> Any:
        there.set()
        await trio.sleep_forever()

    if begun:
        seam.setattr(CodexRuntime, "start_turn", stuck)
    else:
        seam.setattr(SessionRunner, "start_turn", stuck)
    return there


async def _reattached(r: Rig, state: Path, held: list[tuple[str, bool]]) -> None:
    """The next daemon finds the runtimes left held (their provider threads, and whether
    their turn is unsent), settles the previous run and reattaches to them all."""
    found = find_held(r.core.reader, state)
    assert [(h.binding.provider_thread_id, h.unsent) for h in found] == held
    await settle_previous_run(r.core.service, r.core.reader, state_dir=state, held=found)
    assert await r.manager.reattach_all(found) == []


@pytest.mark.parametrize("begun", [False, True], ids=["not_begun", "begun"])
async def test_a_resume_fallback_summary_is_sent_by_the_next_daemon_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, begun: bool
) -> None:
    state = tmp_path / "state"
    options = _options(tmp_path)
    async with holders_stopped(state):
        async with rig(tmp_path / "e.db", **options) as r:
            tid = await r.thread("standin")
            first = (await r.manager.send_message(tid, "remember the word PAPAYA")).result
            old_pt = (await r.wait_run(first["runId"])).provider_thread_id
            # The runtime goes (as after an idle reap): the next run resumes its thread,
            # which the provider no longer has.
            await r.manager.retire(r.manager.runners[tid], "idle")
            with monkeypatch.context() as seam:
                there = _dies_before_the_turn(seam, begun)
                second = (await r.manager.send_message(tid, "two")).result["runId"]
                with trio.fail_after(20):
                    await there.wait()
                new_pt = r.row("thread", tid).active_provider_thread_id
                assert new_pt != old_pt
                assert r.row("provider_thread", old_pt).status == "error"
                # The replacement's ref is in the log before the daemon goes.
                await r.wait_for(lambda: r.row("provider_thread", new_pt).native_thread_ref)
                status = r.row("run", second).status
                assert status == ("starting" if begun else "queued")
                assert r.manager.leave_held() == 1
                await r.wait_for(lambda: not r.manager.runners)
        # Only the held runtime's journal is left (its holder's); nothing was sent on it.
        assert len(list(held_root(state).glob("*/journal"))) == 1
        assert _turn_inputs(state) == []

        async with rig(tmp_path / "e.db", **options) as r2:
            await _reattached(r2, state, [(new_pt, begun)])
            run = await r2.wait_run(second, within=30)
            assert run.provider_thread_id == new_pt
            handoff = r2.row("context_handoff", run.context_handoff_id)
            assert (handoff.strategy, handoff.status) == ("full_thread_summary", "ready")
            assert r2.row("provider_thread", new_pt).handoff_ids == [handoff.id]
            # Once, with the summary of the earlier history before the run's own text.
            (sent,) = _turn_inputs(state)
            assert SUMMARY in sent and b"remember the word PAPAYA" in sent
            assert sent.count(SUMMARY) == 1 and sent.index(b"PAPAYA") < sent.index(b"two")


async def test_a_replacement_whose_first_turn_died_unsent_is_told_the_history_once(
    tmp_path: Path,
) -> None:
    """The replacement's process dies reading its first ``turn/start`` (no holder, one
    daemon): that run fails, its summary is given back; the next run starts the
    replacement afresh and must carry the history once — not the given-back summary and
    a full summary of the replacement's own beside it."""
    frames = FrameLog()
    settings = plan_settings(
        tmp_path / "plan.json",
        [str(RESUME_FAILS), "--segment", "0", "--loop-turns", "--speed", "0"],
        [
            *(str(RESUME_FAILS), "--segment", "1", "--loop-turns", "--speed", "0"),
            *("--crash-on-request", "turn/start"),
        ],
        [str(RESUME_FAILS), "--segment", "0", "--loop-turns", "--speed", "0"],
    )
    async with rig(tmp_path / "e.db", providers={"standin": settings}, raw_factory=frames) as r:
        tid = await r.thread("standin")
        await send_completed(r, tid, "remember the word PAPAYA")
        await r.manager.retire(r.manager.runners[tid], "idle")

        second = str((await r.manager.send_message(tid, "two")).result["runId"])
        failed = await r.wait_run(second, ("completed", "failed", "interrupted", "cancelled"))
        assert failed.status == "failed", failed
        (died,) = frames.turn_texts()[1:]  # what the replacement died reading
        assert "could not be resumed" in died and "PAPAYA" in died

        third = await send_completed(r, tid, "three")
        sent = frames.turn_texts()[-1]
        assert r.row("run", third).provider_thread_id == failed.provider_thread_id
        assert sent.count("User: remember the word PAPAYA") == 1, sent
        assert "User: two" in sent and sent.endswith("three")
        pt = r.row("provider_thread", failed.provider_thread_id)
        given = [r.row("context_handoff", h) for h in pt.handoff_ids]
        assert [h.status for h in given] == ["ready"], "one summary given, the other superseded"
        assert given[0].covered_run_ordinals.to == 2
        waiting = [h for h in r.rows("context_handoff") if h.status == "pending"]
        assert waiting == [], "nothing left to send twice later"


def _dies_mid_turn(tmp_path: Path) -> ProviderSettings:
    """Run 1's process; a replacement's that dies once its first turn has started (after
    ``turn/started``: the provider had the summary); then a process that starts afresh."""
    return plan_settings(
        tmp_path / "plan.json",
        [str(RESUME_FAILS), "--segment", "0", "--loop-turns", "--speed", "0"],
        [
            *(str(RESUME_FAILS), "--segment", "1", "--loop-turns", "--speed", "0"),
            *("--crash-after-frames", "9"),
        ],
        [str(RESUME_FAILS), "--segment", "0", "--loop-turns", "--speed", "0"],
    )


@pytest.mark.parametrize("recover", [False, True], ids=["next_run", "recovered_attempt"])
async def test_a_replacement_that_died_mid_turn_starts_afresh_and_is_told_again(
    tmp_path: Path, recover: bool
) -> None:
    """The replacement took its summary and died before its first turn completed: its
    conversation is not resumed (no turn confirmed it) but started afresh on the same
    provider thread, which had been told everything — so the fresh one was told nothing
    and the history was lost to the provider. What starts afresh is told again: the
    run's own summary with its recovered attempt, or a full summary with the next run."""
    frames = FrameLog()
    providers = {"standin": _dies_mid_turn(tmp_path)}
    async with rig(
        tmp_path / "e.db", providers=providers, raw_factory=frames, recover_runs=recover
    ) as r:
        tid = await r.thread("standin")
        await send_completed(r, tid, "remember the word PAPAYA")
        await r.manager.retire(r.manager.runners[tid], "idle")
        second = str((await r.manager.send_message(tid, "two")).result["runId"])
        run = await r.wait_run(second, ("completed", "failed", "interrupted", "cancelled"))
        assert run.status == ("completed" if recover else "failed"), run
        told, *later = frames.turn_texts()[1:]
        assert "could not be resumed" in told and told.endswith("two")

        if recover:
            (sent,) = later  # the recovered attempt, on the fresh conversation
            assert sent == told, "the run's own summary again, with its message"
        else:
            assert later == []
            await send_completed(r, tid, "three")
            sent = frames.turn_texts()[-1]
            assert "User: two" in sent and sent.endswith("three")
            assert sent.startswith("Context handoff: this conversation was held in an earlier")
        assert sent.count("User: remember the word PAPAYA") == 1, sent
        pt = r.row("provider_thread", run.provider_thread_id)
        assert r.row("run", second).provider_thread_id == pt.id
        assert pt.resume_ref_confirmed and len(pt.handoff_ids) == 1


async def test_a_recovered_attempt_on_a_fresh_conversation_sent_by_the_next_daemon_is_told_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, the recovered attempt: its conversation started afresh and was given the
    run's summary again (the attempt is the run's second on that provider thread, begun
    before the conversation was forgotten), then the daemon died before its
    ``turn/start``. The next daemon sends it with that summary, once."""
    state = tmp_path / "state"
    options: dict[str, Any] = {
        "providers": {"standin": _dies_mid_turn(tmp_path)},
        "launcher_factory": holder_launchers(held_root(state), 30, OWNER),
        "state_dir": state,
        "recover_runs": True,
    }
    starts = 0
    start_turn = CodexRuntime.start_turn
    there = trio.Event()

    async def recovered_stuck(self: CodexRuntime, text: str) -> None:
        nonlocal starts
        starts += 1
        if starts == 1:  # run 2's first attempt; its recovered one is stuck
            return await start_turn(self, text)
        there.set()
        await trio.sleep_forever()

    async with holders_stopped(state):
        async with rig(tmp_path / "e.db", **options) as r:
            tid = await r.thread("standin")
            await send_completed(r, tid, "remember the word PAPAYA")
            await r.manager.retire(r.manager.runners[tid], "idle")
            with monkeypatch.context() as seam:
                seam.setattr(CodexRuntime, "start_turn", recovered_stuck)
                second = str((await r.manager.send_message(tid, "two")).result["runId"])
                with trio.fail_after(30):
                    await there.wait()
                attempts = [a for a in r.rows("run_attempt") if a.run_id == second]
                assert [a.reason for a in attempts] == ["initial", "provider_recovery"]
                pt = attempts[1].provider_thread_id
                assert attempts[0].provider_thread_id == pt
                assert r.manager.leave_held() == 1
                await r.wait_for(lambda: not r.manager.runners)

        async with rig(tmp_path / "e.db", **options) as r2:
            await _reattached(r2, state, [(pt, True)])
            run = await r2.wait_run(second, within=30)
            assert run.status == "completed", run
            (sent,) = _turn_inputs(state)  # the recovered attempt's, on the fresh conversation
            assert sent.count(SUMMARY) == 1, sent
            assert sent.count(b"User: remember the word PAPAYA") == 1, sent


async def test_a_recovered_attempt_whose_thread_cannot_be_resumed_goes_on_a_replacement(
    tmp_path: Path,
) -> None:
    """The provider crashed mid-turn and the recovery's runtime cannot resume the thread
    (no rollout): the run goes on as a recovery attempt of the replacement's own, with its
    summary; the attempt begun on the crashed thread, never sent, is superseded. The run,
    its attempt and its provider turn name the thread the turn ran on."""
    frames = FrameLog()
    settings = plan_settings(
        tmp_path / "plan.json",
        # Setup (5 frames), run 1's turn (15), run 2's first 3: turn/started, then the crash.
        [
            *(str(RESUME_FAILS), "--segment", "0", "--loop-turns", "--speed", "0"),
            "--crash-after-frames",
            "23",
        ],
        [str(RESUME_FAILS), "--segment", "1", "--loop-turns", "--speed", "0"],
    )
    async with rig(
        tmp_path / "e.db", providers={"standin": settings}, raw_factory=frames, recover_runs=True
    ) as r:
        tid = await r.thread("standin")
        first = await send_completed(r, tid, "remember the word PAPAYA")
        crashed = r.row("run", first).provider_thread_id
        second = str((await r.manager.send_message(tid, "two")).result["runId"])
        run = await r.wait_run(second, ("completed", "failed", "interrupted", "cancelled"))
        assert run.status == "completed", run
        replacement = r.row("thread", tid).active_provider_thread_id
        assert replacement != crashed and run.provider_thread_id == replacement
        attempts = [a for a in r.rows("run_attempt") if a.run_id == second]
        assert [(a.reason, a.status, a.provider_thread_id) for a in attempts] == [
            ("initial", "failed", crashed),
            ("provider_recovery", "superseded", crashed),
            ("provider_recovery", "completed", replacement),
        ]
        turn = r.row("provider_turn", attempts[-1].provider_turn_id)
        assert (turn.provider_thread_id, turn.status) == (replacement, "completed")
        sent = frames.turn_texts()[-1]
        assert SUMMARY.decode() in sent and sent.count("User: remember the word PAPAYA") == 1
        assert sent.endswith("two")
        await send_completed(r, tid, "three")
        assert frames.turn_texts()[-1] == "three", "the replacement was told, and confirmed"
