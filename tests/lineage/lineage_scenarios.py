"""The lineage scenarios of issue #7, for the real binaries and their recorded transcripts.

``tests/real/test_lineage_real.py`` runs them against the real binaries (and records
them); ``tests/lineage/test_recorded_lineage.py`` replays the recordings. Both take the
same steps, so a replay plays exactly what was recorded, and check the same records
here; each adds what only it can see (what the model received, or the frames we sent)
in the hooks and after the call. The subagent scenario is ``subagent_scenario.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tests.supervisor.support import Rig


class Driver(Protocol):
    r: Rig
    work: Path

    async def send(self, tid: str, text: str) -> Any:
        """Send ``text``; the run once it completed."""

    async def checkpointed(self, tid: str, text: str) -> Any:
        """Send ``text``; the run once it completed and has its checkpoint."""


def _nothing() -> None:
    pass


def _runs(d: Driver, tid: str) -> list[Any]:
    return sorted(d.r.rows("run", tid), key=lambda x: x.ordinal)


async def delta_handoff(d: Driver) -> Any:
    """Codex, Claude twice, back to Codex: its old thread resumed with a delta of runs 2-3.

    The last run.
    """
    tid = await d.r.thread("codex", cwd=str(d.work))
    await d.send(tid, "remember the word PAPAYA")
    await d.r.manager.switch_provider(tid, "claude")
    await d.send(tid, "claude hears BANANA")
    await d.send(tid, "claude hears KIWI")
    await d.r.manager.switch_provider(tid, "codex")
    last = await d.send(tid, "RECALL")

    handoff = d.r.row("context_handoff", last.context_handoff_id)
    assert handoff.strategy == "delta_since_target_last_seen"
    assert (handoff.covered_run_ordinals.from_, handoff.covered_run_ordinals.to) == (2, 3)
    runs = _runs(d, tid)
    assert [x.provider for x in runs] == ["codex", "claude", "claude", "codex"]
    assert runs[0].provider_thread_id == runs[3].provider_thread_id
    assert runs[1].provider_thread_id == runs[2].provider_thread_id != runs[0].provider_thread_id
    # The Codex thread is resumed by its native id, confirmed by run 1's turn.
    pt = d.r.row("provider_thread", runs[0].provider_thread_id)
    assert pt.native_thread_ref and pt.resume_ref_confirmed
    return last


async def resume_failure(d: Driver, break_resume: Callable[[], None] = _nothing) -> None:
    """Back to Codex, whose ``thread/resume`` fails: a new thread with a full summary.

    ``break_resume`` makes it fail (the real test deletes the rollout files; a replay
    plays the recorded failure).
    """
    tid = await d.r.thread("codex", cwd=str(d.work))
    await d.send(tid, "remember the word PAPAYA")
    await d.r.manager.switch_provider(tid, "claude")
    await d.send(tid, "claude hears BANANA")
    break_resume()
    await d.r.manager.switch_provider(tid, "codex")
    last = await d.send(tid, "back on codex")

    handoff = d.r.row("context_handoff", last.context_handoff_id)
    assert handoff.strategy == "full_thread_summary"
    assert (handoff.covered_run_ordinals.from_, handoff.covered_run_ordinals.to) == (1, 2)
    assert "claude hears BANANA" in handoff.summary_text
    runs = _runs(d, tid)
    assert runs[2].provider_thread_id != runs[0].provider_thread_id
    assert d.r.row("provider_thread", runs[0].provider_thread_id).status == "error"


async def codex_fork(d: Driver, after_fork: Callable[[], None] = _nothing) -> Any:
    """A Codex fork at run 1 of 2 (native ``thread/fork``), then the parent diverges.

    ``after_fork`` runs after the fork's run. The fork's ``fork`` transfer.
    """
    tid = await d.r.thread("codex", cwd=str(d.work))
    first = await d.send(tid, "remember the word PAPAYA")
    await d.send(tid, "remember the word MANGO")
    fork = (await d.r.core.service.fork_thread(tid, first.id)).result["threadId"]
    await d.send(fork, "RECALL")
    after_fork()
    [transfer] = d.r.rows("context_transfer", fork)
    assert transfer.status == "resolved_native"
    assert d.r.rows("context_handoff", fork) == []
    [run] = d.r.rows("run", fork)
    pt = d.r.row("provider_thread", run.provider_thread_id)
    assert pt.forked_from.provider_thread_id == first.provider_thread_id
    assert pt.native_thread_ref != transfer.source_point.provider_thread_ref
    assert transfer.resolution.provider_thread_ref == pt.native_thread_ref
    # The parent goes on on its own native thread.
    last = await d.send(tid, "RECALL")
    assert last.provider_thread_id == first.provider_thread_id
    return transfer


async def claude_fork(d: Driver, after_fork: Callable[[], None] = _nothing) -> None:
    """A Claude fork at its latest run (``--fork-session``), then the parent diverges."""
    tid = await d.r.thread("claude", cwd=str(d.work))
    await d.send(tid, "remember the word PAPAYA")
    fork = (await d.r.core.service.fork_thread(tid)).result["threadId"]
    await d.send(fork, "fork hears MANGO")
    after_fork()
    [transfer] = d.r.rows("context_transfer", fork)
    assert transfer.status == "resolved_native"
    [run] = d.r.rows("run", fork)
    pt = d.r.row("provider_thread", run.provider_thread_id)
    assert pt.native_thread_ref != transfer.source_point.provider_thread_ref
    await d.send(tid, "RECALL")


async def _two_checkpointed_runs_then_rollback(d: Driver, provider: str) -> tuple[str, Any, Any]:
    tid = await d.r.thread(provider, cwd=str(d.work))
    first = await d.checkpointed(tid, "remember the word PAPAYA")
    (d.work / "later.txt").write_text("written by run 2\n")
    await d.checkpointed(tid, "remember the word MANGO")
    res = await d.r.manager.rollback(tid, first.checkpoint_id)
    assert res.result["rolledBackRuns"] == [2]
    assert not (d.work / "later.txt").exists()
    return tid, first, res


async def codex_rollback(d: Driver) -> None:
    """Rollback to run 1: files restored, the Codex thread reverted and resumed as is."""
    tid, first, res = await _two_checkpointed_runs_then_rollback(d, "codex")
    assert res.result["revertedProviderThreads"] == [first.provider_thread_id]
    last = await d.send(tid, "RECALL")
    assert last.provider_thread_id == first.provider_thread_id
    assert last.context_handoff_id is None


async def claude_rollback(d: Driver, told: Callable[[], str]) -> None:
    """Rollback to run 1: the Claude thread closed, a new one told what is left.

    ``told``: the user text the provider last received.
    """
    tid, first, res = await _two_checkpointed_runs_then_rollback(d, "claude")
    assert res.result["closedProviderThreads"] == [first.provider_thread_id]
    last = await d.send(tid, "what is left")
    assert last.provider_thread_id != first.provider_thread_id
    text = told()
    assert "User: remember the word PAPAYA" in text and "MANGO" not in text
