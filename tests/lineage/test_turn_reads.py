"""What a turn reads of its thread (issue 17: the daemon's CPU per plain turn).

A thread's runs, attempts and messages grow by one each turn; a turn that decodes all
of them costs more the longer the thread is (at 120 turns, ~1.5 ms of the writer's
CPU per whole-thread read, several per turn). The send's decide counts the runs, the
attempt reads its run's attempts by id, the handoff reads earlier runs only when the
provider thread missed some, the dispatch reads the run's message by id, and the
checkpoint's record finds the run's subagent scopes from the thread's provider threads.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest

from fixtures.fakes.codex_home import make_work_dir
from t3orch.domain.checkpoint import Checkpoint, CheckpointScope
from t3orch.domain.run import Run, RunAttempt
from t3orch.domain.turn_items import UserMessage
from t3orch.store.staging import OverlayView
from tests.supervisor.support import rig

#: The entities a thread gains one of with each turn (the checkpointer reads its
#: scopes and checkpoints newest first: tests/lineage/test_checkpoint_reads.py).
GROWING = (Run, RunAttempt, UserMessage, Checkpoint, CheckpointScope)
#: ... and those the writer's decides must not read whole either.
GROWING_IN_DECIDES = (Run, RunAttempt, UserMessage, CheckpointScope)


async def test_a_turn_decodes_none_of_its_threads_runs_attempts_or_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with rig(tmp_path / "e.db") as r:
        # In a work tree: each turn ends with its checkpoint (and its record's decide).
        tid = await r.thread(cwd=str(make_work_dir(tmp_path / "work")))
        for text in ("one", "two"):
            sent = await r.manager.send_message(tid, text)
            await r.wait_run(sent.result["runId"])
        whole: list[str] = []

        def spying(real: Any, growing: tuple[type, ...]) -> Any:
            def spy(self: Any, entity: Any, *, thread_id: str | None = None) -> Any:
                if entity in growing and thread_id == tid:
                    whole.append(f"{entity.__name__}:\n" + "".join(traceback.format_stack(limit=5)))
                return real(self, entity, thread_id=thread_id)

            return spy

        # The writer's decides (every backend's view) and the daemon's reads.
        monkeypatch.setattr(OverlayView, "select", spying(OverlayView.select, GROWING_IN_DECIDES))
        for reader in {id(x): x for x in (r.manager.reader, r.core.reader)}.values():
            monkeypatch.setattr(type(reader), "select", spying(type(reader).select, GROWING))
        sent = await r.manager.send_message(tid, "three")
        run = await r.wait_run(sent.result["runId"])
        assert run.status == "completed"
        assert run.ordinal == 3  # counted, not decoded
        attempts = r.rows("run_attempt", tid)
        assert [a.id for a in attempts if a.run_id == run.id] == [run.active_attempt_id]
        assert run.checkpoint_id is not None
    assert whole == [], "\n".join(whole)
