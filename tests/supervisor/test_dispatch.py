from __future__ import annotations

from pathlib import Path

from tests.supervisor.support import rig


async def test_a_message_runs_on_the_standin_and_completes(tmp_path: Path) -> None:
    async with rig(tmp_path / "e.db") as r:
        tid = await r.thread()
        sent = await r.manager.send_message(tid, "hello")
        run = await r.wait_run(sent.result["runId"])
        assert run.status == "completed"
        visible = [type(i).__name__ for i in r.rows("turn_item", tid) if not i.hidden]
        assert visible == ["UserMessage", "AssistantMessage"]
        second = await r.manager.send_message(tid, "again")
        await r.wait_run(second.result["runId"])
        sessions = r.rows("provider_session")
        assert len(sessions) == 1  # the same runtime served both runs
