"""Waiting for a condition of a running daemon, polled: the drills, the demo, the
benchmarks and the tests read its state (rows, runners, processes) until it holds.

:func:`wait_until` blocks (a daemon served in a child process, read from its state dir);
:func:`until` is the trio version (a daemon run in this process).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio


def wait_until(
    predicate: Callable[[], Any], within: float, what: str = "condition", *, every: float = 0.02
) -> Any:
    """The first true value of ``predicate`` (polled every ``every`` s), or a TimeoutError
    naming ``what`` after ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"{what} not met within {within}s")


async def until(predicate: Callable[[], Any], within: float = 30.0, *, every: float = 0.01) -> Any:
    """The first true value of ``predicate`` (polled every ``every`` s), or
    trio.TooSlowError after ``within`` s."""
    with trio.fail_after(within):
        while not (value := predicate()):  # noqa: ASYNC110 - polling rows and processes
            await trio.sleep(every)
        return value


__all__ = ["until", "wait_until"]
