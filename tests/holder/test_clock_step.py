"""A holder is still known after the wall clock steps.

``psutil.Process.create_time()`` is the kernel's boot time plus the process's time since
boot, and the kernel's boot time is the wall clock minus the time since boot, in whole
seconds: it moves when the wall clock is stepped (NTP's first sync, a VM resumed,
``date -s``). A holder's start recorded before a step then no longer matched its
process: ``stop-agents`` skipped it (seen in CI: the holder ran on to its grace),
``status`` did not list it, and ``prune_held`` removed the directory of a live holder,
its journal with it. Start times are on the boot clock now (``adapters.ownership``);
the test steps the clock psutil reads.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from adapters.ownership import OwnerMark, this_process
from supervisor.holder.client import start_holder, stop_all_holders
from supervisor.holder.layout import describe_held, held_root, prune_held
from tests.holder.test_holder import alive, gone, standin


def _step_wall_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The wall clock is stepped by ``seconds``: so is the boot time psutil adds."""
    booted = psutil.boot_time() + seconds
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: booted)


async def test_a_holder_started_before_a_clock_step_is_listed_kept_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = await start_holder(
        held_root(tmp_path), standin(), grace_s=30, owner=this_process().token()
    )
    state = paths.read_state()
    assert state is not None
    try:
        before = psutil.Process(state.holder_pid).create_time()
        _step_wall_clock(monkeypatch, 1.0)
        moved = psutil.Process(state.holder_pid).create_time()
        assert moved == pytest.approx(before + 1.0), "the step moves what psutil reports"

        assert [h["holderId"] for h in describe_held(tmp_path)] == [paths.holder_id]
        assert prune_held(tmp_path, frozenset()) == []
        assert paths.journal.exists(), "a live holder's journal stays"
        assert stop_all_holders(tmp_path) == [state.holder_pid]
        await gone(state.provider_pid)
        await gone(state.holder_pid)
    finally:
        if alive(state.holder_pid):
            monkeypatch.undo()
            stop_all_holders(tmp_path)
            await gone(state.holder_pid)


def test_a_mark_of_an_earlier_version_on_the_wall_clock_is_still_understood() -> None:
    """Marks and records written before start times were on the boot clock (a daemon
    upgraded while its holders run) still name their process, to the second."""
    me = psutil.Process()
    legacy = OwnerMark(me.pid, me.create_time())
    assert legacy.alive()
    assert not OwnerMark(me.pid, me.create_time() - 5).alive()
    assert this_process().alive()
    assert not OwnerMark(me.pid, this_process().started_at - 1).alive()
