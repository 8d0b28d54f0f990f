"""A writer process on a PostgreSQL log: commits ``COUNT`` batches through the core.

``python -m tests.store.pg_writer URL COUNT TAG`` prints ``ack <first> <last>`` per
committed batch (its events' sequences), then ``done``. Several run at once in
the concurrent-writers test: each is a daemon's writer on the shared log. Each
says ``ready`` once its log is open and starts when a line arrives on stdin, so
the writers really overlap.
"""

from __future__ import annotations

import sys

import trio

from t3orch.core import open_core
from t3orch.events import EventDraft, ProviderDiagnostic
from t3orch.store.interface import Decision


def _decide(tag: str, n: int) -> Decision:
    return Decision(
        [
            EventDraft(
                payload=ProviderDiagnostic(
                    provider_session_id=None, level="info", code=tag, message=str(k)
                )
            )
            for k in range(n)
        ]
    )


async def main(url: str, count: int, tag: str) -> None:
    async with open_core(url) as core:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await trio.to_thread.run_sync(sys.stdin.readline)

        async def one(i: int) -> None:
            out = await core.writer.submit(lambda view: _decide(tag, 1 + i % 5))
            seqs = [e.sequence for e in out.events]
            sys.stdout.write(f"ack {seqs[0]} {seqs[-1]} {len(seqs)}\n")

        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(one, i)
    sys.stdout.write("done\n")
    sys.stdout.flush()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3])
