"""What an interrupted turn left running, on real processes: commands stopped, the rest said."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import trio

from supervisor.leftovers import process_clock, stop_turn_leftovers


def _provider(script: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    pids = [int(proc.stdout.readline()), int(proc.stdout.readline())]
    return proc, pids


def _leads_session(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid and psutil.Process(pid).name() == "sleep"
    except (OSError, psutil.Error):
        return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def test_commands_in_their_own_session_are_stopped_others_reported() -> None:
    before = _provider("sleep 60 & echo $!; echo 0; sleep 60")  # a helper from before the turn
    since = process_clock()
    # During the turn: a command in a session of its own (as Codex runs them), and a
    # process left in the provider's group.
    provider, (command, helper) = _provider(
        "setsid sleep 61 & echo $!; sleep 62 & echo $!; sleep 60"
    )
    try:
        deadline = time.monotonic() + 5
        while not _leads_session(command) and time.monotonic() < deadline:  # noqa: ASYNC110
            await trio.sleep(0.01)  # `setsid` has forked, not yet exec'd the command
        until = process_clock()
        left = await stop_turn_leftovers(provider.pid, since, until, grace_s=2.0)
        assert [c.pid for c in left.stopped] == [command]
        assert not _alive(command)
        assert helper in [c.pid for c in left.still_running] and _alive(helper)
        message = left.describe("run_1")
        assert message is not None and "sleep 61" in message and "run_1" in message
        # Nothing from before the turn, and nothing at all under another provider.
        assert _alive(before[1][0])
        assert (await stop_turn_leftovers(before[0].pid, since, until)).stopped == []
    finally:
        for p in (provider, before[0]):
            os.killpg(p.pid, signal.SIGKILL)  # the shell and what it runs in its group
            p.wait(timeout=5)
            assert p.stdout is not None
            p.stdout.close()
        for pid in (command, helper, before[1][0]):
            if _alive(pid):
                psutil.Process(pid).kill()


async def test_on_a_shared_process_only_commands_in_the_threads_cwd_are_stopped(
    tmp_path: os.PathLike[str],
) -> None:
    mine, other = os.path.join(tmp_path, "mine"), os.path.join(tmp_path, "other")
    os.makedirs(mine)
    os.makedirs(other)
    since = process_clock()
    # Two threads' commands on one provider: one in each thread's cwd.
    provider, (in_mine, in_other) = _provider(
        f"cd {mine}; setsid sleep 63 & echo $!; cd {other}; setsid sleep 64 & echo $!; sleep 60"
    )
    try:
        deadline = time.monotonic() + 5
        while not (_leads_session(in_mine) and _leads_session(in_other)):
            assert time.monotonic() < deadline
            await trio.sleep(0.01)
        left = await stop_turn_leftovers(
            provider.pid, since, process_clock(), grace_s=2.0, within=mine
        )
        assert [c.pid for c in left.stopped] == [in_mine]
        assert not _alive(in_mine) and _alive(in_other)
    finally:
        os.killpg(provider.pid, signal.SIGKILL)
        provider.wait(timeout=5)
        assert provider.stdout is not None
        provider.stdout.close()
        for pid in (in_mine, in_other):
            if _alive(pid):
                psutil.Process(pid).kill()
