"""An interrupted Codex turn's shell command does not go on running unbeknown.

Codex (0.169) ends the turn ``interrupted`` at once but keeps the command it
started (in a session of its own) running until Codex exits.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import trio

from t3orch.cli.environment import provider_environment
from t3orch.commands.specs import CreateThread
from t3orch.config import discover_codex
from t3orch.daemon import Daemon, run_daemon
from tests.real.support import stored_row, until

pytestmark = pytest.mark.real_codex


def _sleeps(provider_pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(provider_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in children:
        try:
            # Codex's wrapper shell execs the command: wait for the command itself.
            if p.status() != psutil.STATUS_ZOMBIE and p.cmdline() == ["sleep", "47"]:
                out.append(p)
        except psutil.Error:
            continue
    return out


async def test_an_interrupted_turns_command_is_stopped_and_said(tmp_path: Path) -> None:
    if discover_codex() is None:
        pytest.skip("the codex binary is not installed (./scripts/test installs it)")
    work = tmp_path / "work"
    work.mkdir()
    await trio.run_process(["git", "init", "-q", str(work)])
    with provider_environment(work, tmp_path, ["codex"]) as (config, kinds):
        assert kinds == ["codex"]
        async with trio.open_nursery() as nursery:
            daemon: Daemon = await nursery.start(run_daemon, config, tmp_path / "state")
            created = await daemon.core.service.create_thread(
                CreateThread(provider="codex", cwd=str(work), runtime_mode="full-access")
            )
            tid = created.result["threadId"]
            sent = await daemon.manager.send_message(tid, "RUN_SHELL: sleep 47")
            run_id = sent.result["runId"]
            runner = await until(lambda: daemon.manager.runners.get(tid))
            pid = await until(lambda: runner.runtime and runner.runtime.pid)
            (command,) = await until(lambda: _sleeps(pid))
            # Well into the command (an interrupt before Codex ran it would cancel it).
            await trio.sleep(1)
            await daemon.manager.interrupt_run(run_id)
            run = await until(
                lambda: (r := stored_row(daemon, "run", run_id)) and r.status == "interrupted" and r
            )
            assert run.status == "interrupted"
            _, alive = await trio.to_thread.run_sync(lambda: psutil.wait_procs([command], 5))
            assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], (
                "the interrupted turn's command still runs"
            )
            notes = await until(
                lambda: [
                    e.payload.message
                    for e in daemon.core.reader.iter_events()
                    if e.type == "provider.diagnostic"
                    and e.payload.code == "interrupted_turn_commands"
                ]
            )
            assert run_id in notes[0] and "sleep 47" in notes[0]
            # And Codex goes on: the next run completes on the same runtime.
            again = await daemon.manager.send_message(tid, "hello again")
            done = await until(
                lambda: (
                    (r := stored_row(daemon, "run", again.result["runId"]))
                    and r.status in ("completed", "failed", "interrupted")
                    and r
                )
            )
            assert done.status == "completed"
            assert daemon.manager.runners[tid].runtime.pid == pid
            await daemon.shutdown()
            nursery.cancel_scope.cancel()
