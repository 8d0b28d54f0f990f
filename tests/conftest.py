"""Shared fixtures. The leak check runs for every test: none may leave a child behind."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from adapters.ownership import OwnerMark
from supervisor.holder.layout import HeldPaths

#: The real PostgreSQL server fixtures (`pg_server`, `pg_url`), for any test that asks.
pytest_plugins = ("tests.pg",)


def _children() -> dict[int, psutil.Process]:
    try:
        return {p.pid: p for p in psutil.Process(os.getpid()).children(recursive=True)}
    except psutil.Error:
        return {}


def _live_holders(tmp: Path) -> list[psutil.Process]:
    """Holders (supervisor/holder) under ``tmp``: not our children (they double-fork)."""
    out = []
    for state in tmp.glob("**/held/*/holder.json"):
        paths = HeldPaths(state.parent)
        found = paths.read_state()
        if found is None:
            continue
        if OwnerMark(found.holder_pid, found.holder_started_at).alive():
            with contextlib.suppress(psutil.Error):
                out.append(psutil.Process(found.holder_pid))
    return out


@pytest.fixture(autouse=True)
def no_leaked_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    before = set(_children())
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        holders = _live_holders(tmp)
        _, alive = psutil.wait_procs(holders, timeout=3.0)
        if alive:
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.terminate()  # it stops its provider through the ladder
            psutil.wait_procs(alive, timeout=10.0)
            pytest.fail(f"test left {len(alive)} holder(s) running: {[p.pid for p in alive]}")
    leaked = {pid: p for pid, p in _children().items() if pid not in before}
    if not leaked:
        return
    _, alive = psutil.wait_procs(list(leaked.values()), timeout=2.0)
    if not alive:
        return
    names = []
    for p in alive:
        try:
            names.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.kill()
        except psutil.Error:
            continue
    pytest.fail("test left child processes running: " + "; ".join(names))


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir()
    return d
