"""Steering a run on a provider without native steering: interrupt, then a new attempt."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from t3orch.cli.environment import provider_environment
from t3orch.commands.specs import CreateThread
from t3orch.config import discover_claude
from t3orch.daemon import Daemon, run_daemon
from tests.real.support import stored_row, until

pytestmark = pytest.mark.real_claude


async def test_claude_steer_restarts_the_run_as_a_new_attempt(tmp_path: Path) -> None:
    if discover_claude() is None:
        pytest.skip("the claude binary is not installed (./scripts/test installs it)")
    work = tmp_path / "work"
    work.mkdir()
    await trio.run_process(["git", "init", "-q", str(work)])
    with provider_environment(work, tmp_path, ["claude"]) as (config, kinds):
        assert kinds == ["claude"]
        async with trio.open_nursery() as nursery:
            daemon: Daemon = await nursery.start(run_daemon, config, tmp_path / "state")
            created = await daemon.core.service.create_thread(
                CreateThread(provider="claude", cwd=str(work))
            )
            tid = created.result["threadId"]
            sent = await daemon.manager.send_message(tid, "SLOW")
            run_id = sent.result["runId"]
            await until(lambda: (r := stored_row(daemon, "run", run_id)) and r.status == "running")
            steered = await daemon.manager.send_message(tid, "and then wrap up", mode="steer")
            assert steered.result["steered"] == "restart"
            run = await until(
                lambda: (
                    (r := stored_row(daemon, "run", run_id))
                    and r.status in ("completed", "failed", "interrupted")
                    and r
                )
            )
            assert run.status == "completed"
            with daemon.core.reader.snapshot():
                attempts = [
                    a.decode() for a in daemon.core.reader.rows("run_attempt", thread_id=tid)
                ]
                items = [i.decode() for i in daemon.core.reader.rows("turn_item", thread_id=tid)]
            assert [(a.reason, a.status) for a in attempts] == [
                ("initial", "superseded"),
                ("steering_restart", "completed"),
            ]
            assert run.active_attempt_id == attempts[1].id
            users = [i.text for i in items if type(i).__name__ == "UserMessage" and not i.hidden]
            assert users == ["SLOW", "and then wrap up"]
            await daemon.shutdown()
            nursery.cancel_scope.cancel()
