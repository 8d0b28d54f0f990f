"""The core's plan for a thread's next runtime, read from the real store's entities."""

from __future__ import annotations

from pathlib import Path

from t3orch.core import open_core
from t3orch.runtime_plan import ForkThread, ResumeThread, StartFresh, next_runtime
from tests.store.support import new_thread, reply_events, started_turn


async def test_a_fresh_thread_starts_fresh_and_a_completed_turn_makes_it_resumable(
    tmp_path: Path,
) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        binding = await started_turn(core.service, tid)
        assert binding.provider_thread_id is not None

        def plan() -> object:
            assert binding.provider_thread_id is not None
            return next_runtime(
                core.reader,
                thread_id=tid,
                provider_thread_id=binding.provider_thread_id,
                provider="standin",
                cwd="/tmp",
                first_run_id=None,
                forks_natively=False,
            )

        assert plan() == StartFresh()
        await core.service.ingest(binding, reply_events("t1", "done"))
        assert plan() == ResumeThread("native-1", None)


async def test_a_fork_is_resolved_portably_where_the_provider_cannot_fork(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        binding = await started_turn(core.service, tid)
        await core.service.ingest(binding, reply_events("t1", "done"))
        forked = await core.service.fork_thread(tid)
        fork_id = str(forked.result["threadId"])
        sent = await core.service.send_message(fork_id, "go on")
        session = await core.service.open_session(fork_id)
        assert session.provider_thread_id is not None
        plan = next_runtime(
            core.reader,
            thread_id=fork_id,
            provider_thread_id=session.provider_thread_id,
            provider="standin",
            cwd="/tmp",
            first_run_id=str(sent.result["runId"]),
            forks_natively=False,
        )
        assert isinstance(plan, ForkThread) and plan.source is None
        # Without the run that resolves it, a fork is not this runtime's to resolve.
        unbound = next_runtime(
            core.reader,
            thread_id=fork_id,
            provider_thread_id=session.provider_thread_id,
            provider="standin",
            cwd="/tmp",
            first_run_id=None,
            forks_natively=False,
        )
        assert unbound == StartFresh()
