"""What a turn's checkpoint reads of its thread (issue 17: ckpt17).

The checkpoint at each turn's end asks for the previous run's checkpoint (its
parent) and for the run's subagent scopes. Both read the thread newest first and
stop at the answer, so a turn's checkpoint decodes as many rows at turn 150 as at
turn 5: before, each barrier decoded every Checkpoint and CheckpointScope of the
thread, and its CPU grew with the thread's history.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from fixtures.fakes.codex_home import make_work_dir
from supervisor import checkpointing
from t3orch.store.kinds import Row
from tests.supervisor.support import Rig, rig

#: The kinds a thread gains one or more of with each checkpointed turn.
GROWING = ("run", "checkpoint", "checkpoint_scope")


async def _turns(r: Rig, tid: str, n: int) -> None:
    """``n`` turns, queued at once (the thread runs them one after another)."""
    run_ids = [(await r.manager.send_message(tid, f"turn {i}")).result["runId"] for i in range(n)]
    await r.wait_run(run_ids[-1], within=120)
    await r.wait_for(lambda: r.row("run", run_ids[-1]).checkpoint_id)


def _in_checkpointer() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == checkpointing.__file__:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


async def _decodes_of_one_turn(r: Rig, tid: str, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The rows of the thread's growing kinds the checkpointer decoded in one turn."""
    seen: Counter[str] = Counter()
    real = Row.decode

    def counting(self: Row) -> object:
        if self.kind in GROWING and self.thread_id == tid and _in_checkpointer():
            seen[self.kind] += 1
        return real(self)

    with monkeypatch.context() as m:
        m.setattr(Row, "decode", counting)
        await _turns(r, tid, 1)
    return seen


async def test_a_turns_checkpoint_reads_the_same_at_turn_150_as_at_turn_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with rig(tmp_path / "e.db") as r:
        short = await r.thread(cwd=str(make_work_dir(tmp_path / "short")))
        long = await r.thread(cwd=str(make_work_dir(tmp_path / "long")))
        await _turns(r, short, 5)
        await _turns(r, long, 150)
        at_5 = await _decodes_of_one_turn(r, short, monkeypatch)
        at_150 = await _decodes_of_one_turn(r, long, monkeypatch)
        assert at_5["checkpoint"] > 0  # the count sees the checkpointer's reads
        assert at_150 == at_5, f"at turn 5: {dict(at_5)}; at turn 150: {dict(at_150)}"
        cps = {c.app_run_ordinal: c for c in r.rows("checkpoint", long)}
        assert sorted(cps) == list(range(1, 152))
        # Each turn's checkpoint is parented on the previous turn's.
        assert all(cps[n].parent_checkpoint_id == cps[n - 1].id for n in range(2, 152))
