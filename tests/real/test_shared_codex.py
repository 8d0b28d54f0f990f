"""Codex threads sharing one ``codex app-server`` process (issue 21), real binary.

Each test runs the daemon with ``providers.codex.max_threads_per_process = 4``
against the loopback fake model; every thread's runtime joins the same process.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest
import trio

from fixtures.fakes.responses_api import STREAM_DELTAS
from t3orch.cli.environment import provider_environment
from t3orch.commands.specs import CreateThread
from t3orch.config import DaemonConfig, discover_codex
from t3orch.daemon import Daemon, run_daemon
from tests.real.support import stored_row, until

pytestmark = pytest.mark.real_codex

TERMINAL = ("completed", "failed", "interrupted", "cancelled")


def _items(daemon: Daemon, thread_id: str) -> list[Any]:
    with daemon.core.reader.snapshot():
        return [i.decode() for i in daemon.core.reader.rows("turn_item", thread_id=thread_id)]


def _texts(daemon: Daemon, thread_id: str) -> list[str]:
    return [i.text for i in _items(daemon, thread_id) if type(i).__name__ == "AssistantMessage"]


async def _ended(daemon: Daemon, run_id: str) -> Any:
    return await until(
        lambda: (r := stored_row(daemon, "run", run_id)) and r.status in TERMINAL and r
    )


def _codex_processes() -> list[int]:
    me = psutil.Process(os.getpid())
    out = []
    for p in me.children(recursive=True):
        try:
            if p.cmdline()[-1:] == ["app-server"] and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


@attrs.define
class Shared:
    daemon: Daemon
    work: Path

    async def thread(self) -> str:
        created = await self.daemon.core.service.create_thread(
            CreateThread(provider="codex", cwd=str(self.work))
        )
        tid: str = created.result["threadId"]
        return tid

    async def send(self, tid: str, text: str) -> str:
        sent = await self.daemon.manager.send_message(tid, text)
        run_id: str = sent.result["runId"]
        return run_id

    def pids(self, *tids: str) -> set[int | None]:
        return {self.daemon.manager.runners[t].describe()["pid"] for t in tids}


@asynccontextmanager
async def shared_daemon(tmp_path: Path, threads: int = 4) -> AsyncIterator[Shared]:
    if discover_codex() is None:
        pytest.skip("the codex binary is not installed (./scripts/test installs it)")
    work = tmp_path / "work"
    work.mkdir()
    await trio.run_process(["git", "init", "-q", str(work)])
    daemon_cfg = DaemonConfig(synchronous="FULL", reattach_grace_s=0)
    with provider_environment(work, tmp_path, ["codex"], daemon=daemon_cfg) as (config, kinds):
        assert kinds == ["codex"]
        providers = config.providers
        codex = attrs.evolve(providers.codex, max_threads_per_process=threads)
        config = attrs.evolve(config, providers=attrs.evolve(providers, codex=codex))
        async with trio.open_nursery() as nursery:
            daemon: Daemon = await nursery.start(run_daemon, config, tmp_path / "state")
            try:
                yield Shared(daemon, work)
            finally:
                await daemon.shutdown()
                nursery.cancel_scope.cancel()
    assert _codex_processes() == []


async def test_two_threads_stream_at_once_on_one_process_apart(tmp_path: Path) -> None:
    async with shared_daemon(tmp_path) as s:
        a, b = await s.thread(), await s.thread()
        ra, rb = await s.send(a, "STREAM: alpha"), await s.send(b, "STREAM: beta")
        # Both are streaming at the same time, on one process.
        await until(lambda: _texts(s.daemon, a) and _texts(s.daemon, b))
        assert len(s.pids(a, b)) == 1
        assert len(_codex_processes()) == 1
        for run in (await _ended(s.daemon, ra), await _ended(s.daemon, rb)):
            assert run.status == "completed"
        alpha = "".join(f"alpha-{i} " for i in range(STREAM_DELTAS))
        beta = "".join(f"beta-{i} " for i in range(STREAM_DELTAS))
        assert [t.strip() for t in _texts(s.daemon, a)] == [alpha.strip()]
        assert [t.strip() for t in _texts(s.daemon, b)] == [beta.strip()]
        users_a = [
            i.text
            for i in _items(s.daemon, a)
            if type(i).__name__ == "UserMessage" and not i.hidden
        ]
        assert users_a == ["STREAM: alpha"]
        # A second turn on each still goes to its own provider thread.
        ra2, rb2 = await s.send(a, "RECALL"), await s.send(b, "RECALL")
        await _ended(s.daemon, ra2)
        await _ended(s.daemon, rb2)
        assert _texts(s.daemon, a)[-1] == 'recall: ["STREAM: alpha"]'
        assert _texts(s.daemon, b)[-1] == 'recall: ["STREAM: beta"]'


async def test_an_approval_on_one_thread_while_the_other_streams(tmp_path: Path) -> None:
    async with shared_daemon(tmp_path) as s:
        a, b = await s.thread(), await s.thread()
        ra = await s.send(a, "RUN_SHELL: touch approved.txt ESCALATE")
        rb = await s.send(b, "STREAM: beta")
        req = await until(lambda: s.daemon.core.reader.pending_requests(a))
        assert s.daemon.core.reader.pending_requests(b) == []
        assert len(s.pids(a, b)) == 1
        # The other thread streams on while the request waits.
        await until(lambda: _texts(s.daemon, b))
        await s.daemon.manager.respond(req[0].id, "accept")
        assert (await _ended(s.daemon, ra)).status == "completed"
        assert (await _ended(s.daemon, rb)).status == "completed"
        assert (s.work / "approved.txt").exists()
        assert _texts(s.daemon, b)[-1].startswith("beta-0 ")
        assert all("beta" not in t for t in _texts(s.daemon, a))


async def test_interrupting_one_thread_leaves_the_other_running(tmp_path: Path) -> None:
    async with shared_daemon(tmp_path) as s:
        a, b = await s.thread(), await s.thread()
        ra, rb = await s.send(a, "SLOW"), await s.send(b, "STREAM: beta")
        await until(lambda: _texts(s.daemon, a) and _texts(s.daemon, b))
        await s.daemon.manager.interrupt_run(ra)
        assert (await _ended(s.daemon, ra)).status == "interrupted"
        run_b = await _ended(s.daemon, rb)
        assert run_b.status == "completed"
        beta = "".join(f"beta-{i} " for i in range(STREAM_DELTAS))
        assert _texts(s.daemon, b)[-1].strip() == beta.strip()
        # The process and both threads' runtimes live on.
        assert len(s.pids(a, b)) == 1 and len(_codex_processes()) == 1
        ra2 = await s.send(a, "RECALL")
        assert (await _ended(s.daemon, ra2)).status == "completed"


async def test_sigkill_of_the_shared_process_settles_both_and_each_resumes(
    tmp_path: Path,
) -> None:
    async with shared_daemon(tmp_path) as s:
        a, b = await s.thread(), await s.thread()
        first_a, first_b = await s.send(a, "hello from a"), await s.send(b, "hello from b")
        await _ended(s.daemon, first_a)
        await _ended(s.daemon, first_b)
        ra, rb = await s.send(a, "SLOW"), await s.send(b, "SLOW")
        await until(lambda: len(_texts(s.daemon, a)) > 1 and len(_texts(s.daemon, b)) > 1)
        (pid,) = s.pids(a, b)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        for run_id in (ra, rb):
            assert (await _ended(s.daemon, run_id)).status == "failed"
        # Each next send resumes its own provider thread, on a new shared process.
        na, nb = await s.send(a, "RECALL"), await s.send(b, "RECALL")
        assert (await _ended(s.daemon, na)).status == "completed"
        assert (await _ended(s.daemon, nb)).status == "completed"
        assert _texts(s.daemon, a)[-1] == 'recall: ["hello from a", "SLOW"]'
        assert _texts(s.daemon, b)[-1] == 'recall: ["hello from b", "SLOW"]'
        (new_pid,) = s.pids(a, b)
        assert new_pid != pid


async def test_reaping_one_thread_keeps_the_process_for_the_other(tmp_path: Path) -> None:
    async with shared_daemon(tmp_path) as s:
        a, b = await s.thread(), await s.thread()
        await _ended(s.daemon, await s.send(a, "hello from a"))
        await _ended(s.daemon, await s.send(b, "hello from b"))
        (pid,) = s.pids(a, b)
        manager = s.daemon.manager
        runner_a = manager.runners[a]
        runner_a.last_activity = -1e9  # idle past any timeout; b has just worked
        manager.runners[b].last_activity = trio.current_time()
        assert manager.reap_idle() == [a]
        await until(lambda: a not in manager.runners)
        assert manager.runners[b].describe()["pid"] == pid
        assert psutil.pid_exists(pid) and _codex_processes() == [pid]
        # The other thread goes on; the reaped one comes back on the same process.
        rb = await s.send(b, "STREAM: beta")
        assert (await _ended(s.daemon, rb)).status == "completed"
        ra = await s.send(a, "RECALL")
        assert (await _ended(s.daemon, ra)).status == "completed"
        assert _texts(s.daemon, a)[-1] == 'recall: ["hello from a"]'
        assert s.pids(a, b) == {pid}


async def test_a_thread_that_left_a_full_process_comes_back_to_it(tmp_path: Path) -> None:
    """0.169.0 keeps a thread loaded after ``thread/unsubscribe`` (another process resuming
    it is refused: "already has an active writer"), so its next runtime joins the process
    that has it, full or not, and resumes its history there."""
    async with shared_daemon(tmp_path, threads=2) as s:
        a, b = await s.thread(), await s.thread()
        await _ended(s.daemon, await s.send(a, "hello from a"))
        await _ended(s.daemon, await s.send(b, "hello from b"))
        (first,) = s.pids(a, b)
        manager = s.daemon.manager
        manager.runners[a].last_activity = -1e9
        manager.runners[b].last_activity = trio.current_time()
        assert manager.reap_idle() == [a]
        await until(lambda: a not in manager.runners)
        c = await s.thread()
        await _ended(s.daemon, await s.send(c, "hello from c"))
        assert s.pids(b, c) == {first}  # c took a's place: the process is full
        ra = await s.send(a, "RECALL")
        assert (await _ended(s.daemon, ra)).status == "completed"
        assert _texts(s.daemon, a)[-1] == 'recall: ["hello from a"]'
        assert s.pids(a, b, c) == {first}
        (shared,) = manager.status()["sharedProcesses"]
        assert shared["threads"] == 3


async def test_a_subagent_on_a_shared_process_is_its_parents(tmp_path: Path) -> None:
    """The spawned agent's thread (named only by its spawn item) works for its parent's
    thread, while another thread streams on the same process."""
    async with shared_daemon(tmp_path) as s:
        a, b = await s.thread(), await s.thread()
        ra = await s.send(a, "SPAWN_AGENT: say hi from the child")
        rb = await s.send(b, "STREAM: beta")
        assert (await _ended(s.daemon, ra)).status == "completed"
        assert (await _ended(s.daemon, rb)).status == "completed"
        assert len(s.pids(a, b)) == 1
        with s.daemon.core.reader.snapshot():
            nodes = {
                n.id: n
                for n in (r.decode() for r in s.daemon.core.reader.rows("node", thread_id=a))
            }
        (sub,) = [n for n in nodes.values() if n.kind == "subagent"]
        child = await until(
            lambda: (
                (p := stored_row(s.daemon, "provider_thread", sub.provider_thread_id))
                and p.native_thread_ref
                and p
            )
        )
        # The child's own reply is on a, under the child's provider thread; none on b.
        replies = [
            i for i in _items(s.daemon, a) if type(i).__name__ == "AssistantMessage" and i.hidden
        ]
        assert [nodes[i.node_id].provider_thread_id for i in replies] == [child.id]
        assert _texts(s.daemon, a)[-1] == "subagent finished"
        on_b = [type(i).__name__ for i in _items(s.daemon, b) if i.hidden]
        assert "AssistantMessage" not in on_b and "Subagent" not in on_b
        with s.daemon.core.reader.snapshot():
            kinds_b = {r.decode().kind for r in s.daemon.core.reader.rows("node", thread_id=b)}
        assert "subagent" not in kinds_b


async def test_a_thread_whose_cwd_is_gone_is_refused_on_a_shared_process(
    tmp_path: Path,
) -> None:
    async with shared_daemon(tmp_path) as s:
        a = await s.thread()
        assert (await _ended(s.daemon, await s.send(a, "hello from a"))).status == "completed"
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        created = await s.daemon.core.service.create_thread(
            CreateThread(provider="codex", cwd=str(elsewhere))
        )
        b: str = created.result["threadId"]
        elsewhere.rmdir()
        # The process is up: b would join it without a spawn, and the app-server opens a
        # thread in a directory that is gone without a word. Refused, naming the cwd.
        failed = await _ended(s.daemon, await s.send(b, "hello from b"))
        assert failed.status == "failed"
        why = f"the thread's cwd {elsewhere} cannot be entered: No such file or directory"
        assert why in (failed.last_error or ""), failed.last_error
        assert _texts(s.daemon, b) == []
        # a is untouched, and b runs once its directory is back.
        assert (await _ended(s.daemon, await s.send(a, "RECALL"))).status == "completed"
        elsewhere.mkdir()
        assert (await _ended(s.daemon, await s.send(b, "hello again"))).status == "completed"
