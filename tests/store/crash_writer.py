"""A writer process for the crash test: appends until killed, acknowledging each commit.

Prints ``ack <sequence> <event_id>`` for every event whose submission returned,
flushed at once, so the parent knows exactly what was reported committed.
"""

from __future__ import annotations

import sys

import trio

from t3orch.core import open_core
from t3orch.events import EventDraft, ProviderDiagnostic
from t3orch.store.interface import Decision


def _decide(task: int, n: int, size: int) -> Decision:
    drafts = [
        EventDraft(
            payload=ProviderDiagnostic(
                provider_session_id=None, level="info", code=f"t{task}", message="x" * size
            )
        )
        for _ in range(n)
    ]
    return Decision(drafts)


async def _task(core, task: int) -> None:  # type: ignore[no-untyped-def]
    i = 0
    while True:
        i += 1
        n, size = 1 + (i % 7), 100 + 900 * (i % 5)
        out = await core.writer.submit(lambda view, n=n, size=size: _decide(task, n, size))
        sys.stdout.write("".join(f"ack {e.sequence} {e.event_id}\n" for e in out.events))
        sys.stdout.flush()


async def main(db: str) -> None:
    async with open_core(db) as core, trio.open_nursery() as nursery:
        for task in range(4):
            nursery.start_soon(_task, core, task)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
