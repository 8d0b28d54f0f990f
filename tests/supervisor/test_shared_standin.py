"""Shared processes, supervised, without the real binary (issue 21): the stand-in in its
``--threads`` mode hosts many threads the way a shared ``codex app-server`` does."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import trio

from supervisor.manager import RestartPolicy
from supervisor.providers import STANDIN_TRANSCRIPT, standin_settings
from t3orch.cli.clientcmds import shared_lines
from tests.supervisor.support import Rig, rig

ENDED = ("completed", "failed", "interrupted", "cancelled")


def _shared(tmp_path: Path, threads_per_process: int = 4, **options: Any) -> Any:
    return rig(
        tmp_path / "e.db",
        providers={"standin": standin_settings(STANDIN_TRANSCRIPT, "--threads")},
        codex_threads_per_process=threads_per_process,
        shared_kinds=frozenset({"standin"}),
        **options,
    )


def _pids(r: Rig, *tids: str) -> set[int | None]:
    return {r.manager.runners[t].describe()["pid"] for t in tids}


def _refs(r: Rig) -> dict[str, str]:
    return {pt.app_thread_id: pt.native_thread_ref for pt in r.rows("provider_thread")}


async def _turn(r: Rig, tid: str, text: str) -> Any:
    sent = await r.manager.send_message(tid, text)
    return await r.wait_run(sent.result["runId"], ENDED)


async def test_two_threads_share_one_standin_process_and_stay_apart(tmp_path: Path) -> None:
    async with _shared(tmp_path) as r:
        a, b = await r.thread(), await r.thread()
        async with trio.open_nursery() as nursery:
            for tid in (a, b):
                nursery.start_soon(_turn, r, tid, "hello")
        assert [run.status for run in r.rows("run")] == ["completed", "completed"]
        assert len(_pids(r, a, b)) == 1
        refs = _refs(r)
        assert refs[a] != refs[b]
        (shared,) = r.manager.status()["sharedProcesses"]
        assert shared["threads"] == 2
        assert {x["process"] for x in r.manager.status()["runners"]} == {shared["process"]}
        # `t3orch status` says which threads share it.
        status = r.manager.status()
        (line,) = shared_lines(status["sharedProcesses"], status["runners"])
        assert line.startswith(f"{shared['process']} pid {shared['pid']}: 2 thread(s): ")
        assert a in line and b in line


async def test_a_killed_shared_process_settles_both_and_each_resumes_its_own(
    tmp_path: Path,
) -> None:
    async with _shared(tmp_path) as r:
        a, b = await r.thread(), await r.thread()
        await _turn(r, a, "hello")
        await _turn(r, b, "hello")
        refs = _refs(r)
        (pid,) = _pids(r, a, b)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await r.wait_for(lambda: a not in r.manager.runners and b not in r.manager.runners)
        # Each next send resumes its own provider thread (on one new shared process).
        for tid in (a, b):
            assert (await _turn(r, tid, "again")).status == "completed"
        assert _refs(r) == refs
        (new_pid,) = _pids(r, a, b)
        assert new_pid != pid
        # One crash of the process is one restart, in the ledger both threads count in.
        assert r.manager.crashes_of(a) is r.manager.crashes_of(b)
        assert len(r.manager.crashes_of(a).times) == 1


async def test_a_crash_of_a_process_with_five_threads_is_one_restart(tmp_path: Path) -> None:
    async with _shared(tmp_path, threads_per_process=5) as r:
        tids = [await r.thread() for _ in range(5)]
        async with trio.open_nursery() as nursery:
            for tid in tids:
                nursery.start_soon(_turn, r, tid, "hello")
        (pid,) = _pids(r, *tids)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await r.wait_for(lambda: not any(t in r.manager.runners for t in tids))
        assert list(r.manager.status()["restarts"].values()) == [1]
        assert r.manager.status()["heldThreads"] == []


async def test_restart_intensity_counts_processes_not_threads(tmp_path: Path) -> None:
    """Intensity 2, two processes (two threads on one, one on the other): two process
    crashes hold the lineage back, though no thread was in more than one."""
    async with _shared(tmp_path, threads_per_process=2, restart=RestartPolicy(intensity=2)) as r:
        a, b, c = await r.thread(), await r.thread(), await r.thread()
        for tid in (a, b, c):
            await _turn(r, tid, "hello")
        (first,) = _pids(r, a, b)
        (second,) = _pids(r, c)
        assert first != second
        for pid, gone in ((first, (a, b)), (second, (c,))):
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await r.wait_for(lambda gone=gone: not any(t in r.manager.runners for t in gone))
        assert list(r.manager.status()["restarts"].values()) == [2]
        assert r.manager.status()["heldThreads"] == sorted((a, b, c))
        # A user sending again is the user acting: the count starts over.
        assert (await _turn(r, a, "again")).status == "completed"


async def test_reaping_one_thread_keeps_the_shared_process_for_the_other(tmp_path: Path) -> None:
    async with _shared(tmp_path) as r:
        a, b = await r.thread(), await r.thread()
        await _turn(r, a, "hello")
        await _turn(r, b, "hello")
        (pid,) = _pids(r, a, b)
        r.manager.runners[a].last_activity = -1e9
        r.manager.runners[b].last_activity = trio.current_time()
        assert r.manager.reap_idle() == [a]
        await r.wait_for(lambda: a not in r.manager.runners)
        assert _pids(r, b) == {pid}
        assert (await _turn(r, b, "still here")).status == "completed"
        assert r.manager.status()["heldThreads"] == []  # a reap is not a crash
