"""A store that takes no more (a full disk): a turn in flight waits for room, whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from supervisor.providers import standin_settings
from t3orch.domain.turn_items import AssistantMessage
from t3orch.store import writer as writer_module
from tests.supervisor.standin_plan import ECHO_RESUME
from tests.supervisor.support import Rig, rig


def _replies(r: Rig, thread_id: str, run_id: str) -> list[str]:
    return [
        i.text
        for i in r.rows("turn_item", thread_id)
        if isinstance(i, AssistantMessage) and i.run_id == run_id
    ]


async def test_a_turn_the_store_has_no_room_for_waits_and_ends_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "FULL_RETRY_S", 0.05)
    slow = standin_settings(ECHO_RESUME, "--slow-ms", "150")
    async with rig(tmp_path / "e.db", providers={"standin": slow}) as r:
        tid = await r.thread()
        first = (await r.manager.send_message(tid, "slow")).result["runId"]
        await r.wait_run(first)
        run_id = (await r.manager.send_message(tid, "slow")).result["runId"]
        await r.wait_run(run_id, ("running",))
        # A real SQLITE_FULL: the database may not grow past its size now.
        conn = r.core.store._conn  # type: ignore[attr-defined]
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages}")
        await trio.sleep(2)  # the provider goes on; its frames wait for room
        assert r.row("run", run_id).status == "running"
        conn.execute("PRAGMA max_page_count = 1073741823")
        run = await r.wait_run(run_id, ("completed", "failed", "interrupted"))
        assert run.status == "completed", run.last_error
        # The reply is the same as the turn's before it, which had room all along.
        assert _replies(r, tid, run_id) == _replies(r, tid, first) != []
        assert r.manager.runners[tid].describe()["pid"] is not None
