"""A turn start's handoff and attempt: one transaction, same outcome as two."""

from __future__ import annotations

from pathlib import Path

from t3orch.core import open_core
from tests.store.support import new_thread, reply_events, started_turn


async def test_handoff_and_attempt_commit_together(tmp_path: Path) -> None:
    async with open_core(tmp_path / "t.db", synchronous="NORMAL") as core:
        svc = core.service
        tid = await new_thread(svc)
        first = await started_turn(svc, tid, "hello there")
        await svc.ingest(first, reply_events("turn-1", "hi back"))
        await svc.switch_provider(tid, "claude")
        run = str((await svc.send_message(tid, "second")).result["runId"])
        session = await svc.open_session(tid, provider="claude")
        assert session.provider_thread_id is not None

        batches = core.writer.stats.batches
        handoff, turn = await svc.begin_attempt_with_handoff(run, session.provider_thread_id)
        assert core.writer.stats.batches == batches + 1

        # What the claude thread missed is told once, and the attempt was decided after it.
        assert handoff is not None and "User: hello there" in handoff and "hi back" in handoff
        assert turn.run_id == run
        with core.reader.snapshot():
            stored = core.reader.row("run", run)
            attempt = core.reader.row("run_attempt", turn.attempt_id)
            provider_turn = core.reader.row("provider_turn", turn.provider_turn_id)
        assert stored is not None and stored.decode().context_handoff_id is not None
        assert attempt is not None and attempt.decode().run_id == run
        assert provider_turn is not None
        assert provider_turn.decode().provider_thread_id == session.provider_thread_id
