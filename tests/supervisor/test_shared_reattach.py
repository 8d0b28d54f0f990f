"""A shared process under one holder across a daemon restart, on the stand-in in its
``--threads`` mode (issue 21): the daemon's manager leaves it to its holder mid-stream, the
next one replays the shared journal once and both threads' runs complete, every word once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import trio

from adapters.ownership import this_process
from supervisor.holder.client import holder_launchers, stop_all_holders
from supervisor.holder.layout import describe_held, held_root
from supervisor.providers import standin_settings
from supervisor.reattach import find_held
from supervisor.shared_codex import HolderSettings, held_with_threads
from t3orch.cli.drill import long_reply
from t3orch.store.open import open_reader
from t3orch.store.sqlite.backend import SQLiteStore
from tests.holder.support import holders_stopped
from tests.supervisor.support import Rig, rig

WORDS = [f"w{i} " for i in range(80)]
OWNER = this_process().token()


def _rig(tmp_path: Path, grace_s: float = 30) -> Any:
    state = tmp_path / "state"
    root = held_root(state)
    transcript = long_reply(tmp_path, WORDS, every_ms=30)
    return rig(
        tmp_path / "e.db",
        providers={"standin": standin_settings(transcript, "--threads")},
        codex_threads_per_process=4,
        shared_kinds=frozenset({"standin"}),
        launcher_factory=holder_launchers(root, grace_s, OWNER),
        codex_holders=HolderSettings(root, grace_s, OWNER),
        state_dir=state,
    )


def _text(r: Rig, tid: str) -> str:
    store = SQLiteStore(r.core.location, readonly=True)
    try:
        return "".join(
            e.payload.text
            for e in store.iter_events()
            if e.type == "turn_item.delta" and e.payload.thread_id == tid
        )
    finally:
        store.close()


async def test_two_threads_on_a_held_shared_standin_process_survive_a_restart(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with holders_stopped(state):
        async with _rig(tmp_path) as r:
            a, b = await r.thread(), await r.thread()
            ra = (await r.manager.send_message(a, "one")).result["runId"]
            rb = (await r.manager.send_message(b, "two")).result["runId"]
            await r.wait_for(lambda: len(_text(r, a)) > 10 and len(_text(r, b)) > 10)
            (shared,) = r.manager.status()["sharedProcesses"]
            assert shared["threads"] == 2 and shared["holder"] is not None
            # The daemon goes away mid-stream: the process stays with its holder.
            assert r.manager.leave_held() == 2
            await r.wait_for(lambda: not r.manager.runners)
        # `t3orch held` (no daemon) shows the one holder with both its threads.
        store = open_reader(tmp_path / "e.db")
        try:
            with store.snapshot():
                (held,) = held_with_threads(describe_held(state), store)
        finally:
            store.close()
        assert held["holderId"] == shared["holder"]
        assert held["threads"] == sorted((a, b))
        async with _rig(tmp_path) as r2:
            found = find_held(r2.core.reader, state)
            assert {h.thread_id for h in found} == {a, b}
            assert {h.paths.holder_id for h in found} == {shared["holder"]}
            assert await r2.manager.reattach_all(found) == []
            for run_id in (ra, rb):
                assert (await r2.wait_run(run_id, within=30)).status == "completed"
            assert _text(r2, a) == "".join(WORDS)
            assert _text(r2, b) == "".join(WORDS)
            # Both on the one process, reattached once.
            (again,) = r2.manager.status()["sharedProcesses"]
            assert again["holder"] == shared["holder"] and again["threads"] == 2
            # A next turn goes to the same process, to its own thread.
            rc = (await r2.manager.send_message(a, "three")).result["runId"]
            assert (await r2.wait_run(rc, within=30)).status == "completed"


async def test_a_shared_holder_whose_daemon_never_returns_stops_after_its_grace(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    try:
        async with _rig(tmp_path, grace_s=1) as r:
            a, b = await r.thread(), await r.thread()
            await r.manager.send_message(a, "one")
            await r.manager.send_message(b, "two")
            await r.wait_for(lambda: len(_text(r, a)) > 10 and len(_text(r, b)) > 10)
            (shared,) = r.manager.status()["sharedProcesses"]
            assert r.manager.leave_held() == 2
            await r.wait_for(lambda: not r.manager.runners)
        (held,) = describe_held(state)
        provider = psutil.Process(int(str(held["providerPid"])))
        assert provider.pid == shared["pid"]
        # No daemon reattaches: the grace ends, the holder stops the one process of both.
        with trio.fail_after(20):
            while describe_held(state):  # noqa: ASYNC110 - the holder exits by itself
                await trio.sleep(0.05)
        assert not provider.is_running() or provider.status() == psutil.STATUS_ZOMBIE
    finally:
        stop_all_holders(state)
