"""Shared fixtures. The leak check runs for every test: none may leave a child behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

#: The real PostgreSQL server fixtures (`pg_server`, `pg_url`), for any test that asks.
pytest_plugins = ("tests.pg",)


def _children() -> dict[int, psutil.Process]:
    try:
        return {p.pid: p for p in psutil.Process(os.getpid()).children(recursive=True)}
    except psutil.Error:
        return {}


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    before = set(_children())
    yield
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
