"""Ownership on one SQLite log: who owns a thread and its sessions, and who settles them.

Two daemons' services on one store (as two daemons on one shared log would write):
each records itself as the owner of what it creates, and reconciliation at a
daemon's start settles only its own runs — never another daemon's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import msgspec

from t3orch.core import open_core
from t3orch.domain.provider import ProviderSession
from t3orch.domain.run import Run
from t3orch.domain.thread import AppThread
from t3orch.ids import DaemonId
from t3orch.store.interface import ReadModel
from tests.api.writes import open_request
from tests.store.support import new_thread, started_turn

A, B = DaemonId("dmn_a"), DaemonId("dmn_b")
E = TypeVar("E")


def _get(reads: ReadModel, kind: type[E], id: str) -> E:
    with reads.snapshot():
        found = reads.get(kind, id)
    assert found is not None
    return found


async def test_threads_and_sessions_record_the_daemon_that_made_them(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        core.service.daemon_id = A
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        assert _get(core.reader, AppThread, tid).owner_daemon_id == A
        assert _get(core.reader, ProviderSession, b.provider_session_id).owner_daemon_id == A
        fork = (await core.service.fork_thread(tid, None)).result
        # The log says it too (the payload is the entity), in the seed's field style.
        with core.reader.snapshot():
            payloads = [msgspec.to_builtins(e.payload) for e in core.reader.read_events()]
        owners = {p["thread"]["ownerDaemonId"] for p in payloads if "thread" in p}
        assert owners == {A}
        assert fork is not None


def _sessions_of(reads: ReadModel, owner: DaemonId) -> list[ProviderSession]:
    with reads.snapshot():
        return [s for s in reads.select(ProviderSession) if s.owner_daemon_id == owner]


async def test_a_daemon_settles_only_its_own_runs_at_start(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    async with open_core(db) as core:
        core.service.daemon_id = A
        mine = await open_request(core, await new_thread(core.service))
        core.service.daemon_id = B
        theirs = await open_request(core, await new_thread(core.service))
        core.service.daemon_id = None  # a row from before owners: the local daemon's
        legacy = await open_request(core, await new_thread(core.service))
    async with open_core(db) as core:  # daemon A restarts on the shared log
        core.service.daemon_id = A
        counts = await core.service.reconcile()
        assert counts["run"] == 2 and counts["runtime_request"] == 2
        assert counts["provider_session"] == 2
        assert _get(core.reader, Run, mine["runId"]).status == "interrupted"
        assert _get(core.reader, Run, legacy["runId"]).status == "interrupted"
        # B's run, session and request are B's to settle when B returns.
        assert _get(core.reader, Run, theirs["runId"]).status == "waiting"
        assert [s.status for s in _sessions_of(core.reader, B)] != ["stopped"]
        with core.reader.snapshot():
            assert [r.id for r in core.reader.pending_requests()] == [theirs["id"]]
        core.service.daemon_id = B  # B returns: now its run is settled
        counts = await core.service.reconcile()
        assert counts["run"] == 1 and counts["runtime_request"] == 1
        assert _get(core.reader, Run, theirs["runId"]).status == "interrupted"
        assert [s.status for s in _sessions_of(core.reader, B)] == ["stopped"]
