"""One session's bad input or bug is that session's error, never the daemon's.

Real stand-in processes serve the healthy thread while another thread's runtime
fails to start: with a NUL byte in its cwd (the OS refuses it; the API refuses it
too, but the store may hold one from before that check), or with an exception
injected into its adapter's start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec

from adapters.protocol import ProviderAdapter, RawFrameSink, RuntimeConfig
from adapters.transport import ProcessLauncher
from supervisor.providers import StandinAdapter, standin_settings
from t3orch.domain.thread import AppThread
from t3orch.domain.vocab import ProviderKind
from t3orch.events import EventDraft, ProviderDiagnostic, ThreadUpserted
from t3orch.ingest.queue import EventQueue
from t3orch.store.interface import Decision, StateView
from tests.supervisor.standin_plan import ECHO_RESUME
from tests.supervisor.support import Rig, rig

ENDED = ("completed", "failed", "interrupted", "cancelled")


class _Injected(Exception):
    pass


class _BrokenStart(StandinAdapter):
    """The stand-in adapter whose runtime start raises a bug of ours (not an adapter error)."""

    @asynccontextmanager
    async def open_runtime(
        self,
        config: RuntimeConfig,
        launcher: ProcessLauncher,
        events: EventQueue,
        raw: RawFrameSink,
    ) -> AsyncIterator[Any]:
        raise _Injected("injected into the runtime start")
        yield


def _diagnostics(r: Rig, code: str) -> list[ProviderDiagnostic]:
    with r.core.reader.snapshot():
        return [
            e.payload
            for e in r.core.reader.iter_events()
            if isinstance(e.payload, ProviderDiagnostic) and e.payload.code == code
        ]


async def _store_cwd(r: Rig, thread_id: str, cwd: str) -> None:
    """The thread's cwd as a store written before cwd was checked may hold it."""

    def decide(view: StateView) -> Decision:
        thread = msgspec.structs.replace(view.get(AppThread, thread_id), cwd=cwd)
        return Decision([EventDraft(payload=ThreadUpserted(thread=thread))])

    await r.core.writer.submit(decide)


async def _in_flight_elsewhere(r: Rig) -> tuple[str, str]:
    """A healthy thread with a slow turn running (its provider writes a frame every 150 ms)."""
    tid = await r.thread()
    run_id = (await r.manager.send_message(tid, "slow")).result["runId"]
    await r.wait_run(run_id, ("running",))
    return tid, run_id


async def test_a_nul_byte_in_a_stored_cwd_fails_that_run_only(tmp_path: Path) -> None:
    slow = standin_settings(ECHO_RESUME, "--slow-ms", "150")
    async with rig(tmp_path / "e.db", providers={"standin": slow}) as r:
        good, in_flight = await _in_flight_elsewhere(r)
        bad = await r.thread()
        await _store_cwd(r, bad, "/tmp/a\x00b")
        for attempt in range(2):  # each later send fails again, and only that send
            sent = await r.manager.send_message(bad, f"hello {attempt}")
            run = await r.wait_run(sent.result["runId"], ENDED)
            assert run.status == "failed"
            assert "embedded null byte" in run.last_error, run.last_error
        assert bad not in r.manager.runners
        notes = _diagnostics(r, "runner_failed")
        assert len(notes) == 2 and all("embedded null byte" in n.message for n in notes)
        # The other thread's turn was never interrupted, and the daemon still serves it.
        assert (await r.wait_run(in_flight, ENDED)).status == "completed"
        again = await r.manager.send_message(good, "again")
        assert (await r.wait_run(again.result["runId"], ENDED)).status == "completed"


async def test_an_exception_in_a_runtime_start_is_that_sessions_error(tmp_path: Path) -> None:
    def adapters(kind: ProviderKind) -> ProviderAdapter:
        return _BrokenStart() if kind == "codex" else StandinAdapter()

    slow = standin_settings(ECHO_RESUME, "--slow-ms", "150")
    async with rig(
        tmp_path / "e.db",
        providers={"standin": slow, "codex": slow},
        adapter_factory=adapters,
    ) as r:
        good, in_flight = await _in_flight_elsewhere(r)
        broken = await r.thread(provider="codex")
        sent = await r.manager.send_message(broken, "hello")
        run = await r.wait_run(sent.result["runId"], ENDED)
        assert run.status == "failed"
        assert "_Injected: injected into the runtime start" in run.last_error, run.last_error
        (note,) = _diagnostics(r, "runner_failed")
        session = r.row("provider_session", note.provider_session_id)
        assert session is not None and session.status != "running" and session.pid is None
        assert (await r.wait_run(in_flight, ENDED)).status == "completed"
        again = await r.manager.send_message(good, "again")
        assert (await r.wait_run(again.result["runId"], ENDED)).status == "completed"
