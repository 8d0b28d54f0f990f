"""Configured run recovery: a provider crash mid-turn becomes a provider_recovery attempt."""

from __future__ import annotations

from pathlib import Path

from tests.supervisor.standin_plan import launch_count, plan_settings
from tests.supervisor.support import rig
from tests.supervisor.test_faults import FRAMES_BEFORE_TURN, echo

MID_TURN = FRAMES_BEFORE_TURN + 5


def _echo(*extra: str) -> list[str]:
    return echo(*extra)


async def test_a_crash_mid_turn_is_recovered_as_a_new_attempt(tmp_path: Path) -> None:
    settings = plan_settings(
        tmp_path / "plan.json", _echo("--crash-after-frames", str(MID_TURN)), _echo()
    )
    async with rig(tmp_path / "e.db", providers={"standin": settings}, recover_runs=True) as r:
        tid = await r.thread()
        run_id = (await r.manager.send_message(tid, "one")).result["runId"]
        run = await r.wait_run(run_id, ("completed", "failed"))
        assert run.status == "completed"
        attempts = r.rows("run_attempt", tid)
        assert [(a.reason, a.status) for a in attempts] == [
            ("initial", "failed"),
            ("provider_recovery", "completed"),
        ]
        assert run.active_attempt_id == attempts[1].id
        sessions = r.rows("provider_session")
        assert sorted(s.status for s in sessions) == ["error", "ready"]
        assert launch_count(tmp_path / "plan.json") == 2


async def test_without_recovery_the_crashed_run_fails(tmp_path: Path) -> None:
    settings = plan_settings(
        tmp_path / "plan.json", _echo("--crash-after-frames", str(MID_TURN)), _echo()
    )
    async with rig(tmp_path / "e.db", providers={"standin": settings}) as r:
        tid = await r.thread()
        run_id = (await r.manager.send_message(tid, "one")).result["runId"]
        run = await r.wait_run(run_id, ("completed", "failed"))
        assert run.status == "failed"
        assert [a.status for a in r.rows("run_attempt", tid)] == ["failed"]
