"""Property tests: random command sequences through the real core keep the log's invariants."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from t3orch.core import open_core
from t3orch.domain.turn_items import CommandExecution
from t3orch.ingest.binding import SessionBinding
from t3orch.projections.check import compare, compare_chunks, rebuild
from t3orch.provider_events import (
    ItemStarted,
    RequestOpened,
    RuntimeExited,
)
from t3orch.store.errors import CommandRejected
from tests.store.support import new_thread, reply_events, started_turn

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["thread", "send", "turn", "request", "claim", "dup", "bad", "exit", "reconcile"]
        ),
        st.integers(0, 7),
    ),
    min_size=1,
    max_size=25,
)


async def _run(ops: list[tuple[str, int]], db: Path) -> None:
    async with open_core(db, synchronous="NORMAL") as core:
        svc = core.service
        threads: list[str] = []
        sessions: list[SessionBinding] = []
        receipts: dict[str, Any] = {}
        requests: list[str] = []
        for counter, (op, n) in enumerate(ops, 1):
            try:
                if op == "thread" or not threads:
                    threads.append(await new_thread(svc))
                elif op == "send":
                    cid = f"send-{n}"
                    res = await svc.send_message(threads[n % len(threads)], f"m{n}", command_id=cid)
                    if cid in receipts:
                        # A repeated command id: same result, nothing new written.
                        assert res.duplicate and res.result == receipts[cid].result
                        assert res.sequence == receipts[cid].sequence
                    else:
                        receipts[cid] = res
                elif op == "turn":
                    b = await started_turn(svc, threads[n % len(threads)])
                    sessions.append(b)
                    await svc.ingest(b, reply_events(f"t{counter}", "x" * (n * 37 + 1))[:-1])
                    if n % 2:
                        await svc.ingest(b, reply_events(f"t{counter}", "")[-1:])
                elif op == "request" and sessions:
                    b = sessions[n % len(sessions)]
                    await svc.ingest(
                        b,
                        [
                            ItemStarted(
                                native_item_ref=f"c{counter}", content=CommandExecution(input="ls")
                            ),
                            RequestOpened(
                                native_request_ref=str(counter),
                                kind="command",
                                native_item_ref=f"c{counter}",
                            ),
                        ],
                    )
                    with core.reader.snapshot():
                        requests = [
                            r.id
                            for r in core.reader.rows_by_status("runtime_request", ("pending",))
                        ]
                elif op == "claim" and requests:
                    await svc.claim_request(requests[n % len(requests)], "accept")
                elif op == "dup" and receipts:
                    cid = sorted(receipts)[n % len(receipts)]
                    res = await svc.send_message(threads[0], "again", command_id=cid)
                    assert res.duplicate and res.result == receipts[cid].result
                elif op == "bad":
                    await svc.send_message("thr_missing", "x")
                elif op == "exit" and sessions:
                    await svc.ingest(
                        sessions[n % len(sessions)],
                        [RuntimeExited(code=None, signal=9, stderr_tail="boom")],
                    )
                elif op == "reconcile":
                    await svc.reconcile("test")
            except CommandRejected:
                pass
        with core.reader.snapshot():
            events = list(core.reader.iter_events())
            seqs = [e.sequence for e in events]
            assert seqs == list(range(1, len(seqs) + 1)), "sequences strictly increasing, no gaps"
            assert core.reader.projection_sequence() == core.reader.last_sequence()
            rebuilt, _, gaps = rebuild(events)
            assert not gaps
            assert compare(core.reader.all_rows(), rebuilt) == []
            assert compare_chunks(core.reader.all_chunks(), rebuilt) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_command_sequences_keep_the_log_invariants(ops: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(_run, ops, Path(tmp) / "events.sqlite3")
