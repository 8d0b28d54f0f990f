"""What the reattach tests share: their holders stopped at the end, a seam on a held
process's socket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from supervisor.holder.client import HeldProcess, stop_all_holders
from supervisor.holder.layout import describe_held
from supervisor.holder.wire import Kind, Record


@asynccontextmanager
async def holders_stopped(state: Path) -> AsyncIterator[None]:
    """On leaving, every holder of ``state`` is stopped and gone (as ``stop-agents``)."""
    try:
        yield
    finally:
        stop_all_holders(state)
    with trio.fail_after(20):
        while describe_held(state):  # noqa: ASYNC110 - the holders exit by themselves
            await trio.sleep(0.05)


def stderr_a_moment_later(held: HeldProcess, delay_s: float = 0.3) -> None:
    """The holder's socket brings the stderr records that end a read a moment later, in a
    read of their own (before ``held`` serves): the reader has handed out the lines before
    them by then, as when the holder sent them in another write."""
    receive = held._reader.receive
    later: list[Record] = []

    async def split() -> list[Record]:
        nonlocal later
        if later:
            await trio.sleep(delay_s)
            records, later = later, []
            return records
        records = await receive()
        cut = len(records)
        while cut and records[cut - 1].kind is Kind.ERR:
            cut -= 1
        if 0 < cut < len(records):
            records, later = records[:cut], records[cut:]
        return records

    held._reader.receive = split  # type: ignore[method-assign]
