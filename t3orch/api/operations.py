"""What the API needs from the daemon beyond the core.

The supervisor implements :class:`Operations` (it owns the live provider
runtimes: steering, interrupts, delivering answers). The core must not import
the supervisor, so the API is written against this protocol, and
:class:`CoreOperations` is the stand-alone implementation over the core alone:
whatever needs a live runtime is refused with ``no_supervisor`` instead of being
recorded and then never carried out.
"""

from __future__ import annotations

import os
import time
from typing import Any, Literal, Protocol

import attrs

from t3orch.core import Core
from t3orch.domain.vocab import RUN_TERMINAL, ProviderKind, RuntimeMode
from t3orch.ids import CommandId
from t3orch.projections import views
from t3orch.service import CommandResult
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import ReadModel

SendMode = Literal["queue", "steer"]


class Operations(Protocol):
    async def send_message(
        self, thread_id: str, text: str, *, command_id: str, mode: SendMode
    ) -> CommandResult:
        """Start a run; with a run active, queue after it or steer it."""

    async def interrupt_run(self, run_id: str, *, command_id: str) -> CommandResult: ...

    async def respond(
        self,
        request_id: str,
        decision: str,
        *,
        message: str | None,
        answers: dict[str, str] | None,
        command_id: str,
    ) -> CommandResult:
        """Answer a pending runtime request: exactly one answer wins."""

    async def switch_provider(
        self, thread_id: str, provider: ProviderKind, *, command_id: str
    ) -> CommandResult: ...

    async def configure_thread(
        self,
        thread_id: str,
        *,
        cwd: str | None,
        model: str | None,
        runtime_mode: RuntimeMode | None,
        command_id: str,
    ) -> CommandResult:
        """The settings of the thread's next runs (cwd, model, runtime mode)."""

    async def rollback(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        command_id: str,
        dry_run: bool,
        allow_shared_work_tree: bool,
        expect_work_tree: str | None,
    ) -> CommandResult:
        """Files back to the checkpoint, the provider thread rolled back, later runs marked.

        ``dry_run``: only what it would change; the real one records the work tree
        it found as an undo checkpoint first (docs/lineage.md, Rollback)."""

    async def delete_thread(self, thread_id: str, *, command_id: str) -> CommandResult:
        """The thread becomes a tombstone; its live runtime is stopped and released."""

    def status(self) -> dict[str, Any]:
        """pid, uptime, provider sessions by status, writer stats."""


def _no_supervisor(what: str) -> CommandRejected:
    return CommandRejected(
        "no_supervisor", f"{what} needs a live provider runtime, and no supervisor is running"
    )


@attrs.define
class CoreOperations:
    """Operations over ``CoreService`` only: used by tests and before the supervisor."""

    core: Core
    started_monotonic: float = attrs.field(factory=time.monotonic)

    def _seen(self, command_id: str) -> bool:
        # A repeated command id returns its first result, whatever the state is now.
        return self.core.reader.receipt(CommandId(command_id)) is not None

    def _live_runs(self, thread_id: str) -> list[str]:
        with self.core.reader.snapshot():
            runs = self.core.reader.rows("run", thread_id=thread_id)
        return [r.id for r in runs if r.status not in RUN_TERMINAL]

    async def send_message(
        self, thread_id: str, text: str, *, command_id: str, mode: SendMode = "queue"
    ) -> CommandResult:
        if mode == "steer" and not self._seen(command_id) and self._live_runs(thread_id):
            raise _no_supervisor("steering a working run")
        return await self.core.service.send_message(thread_id, text, command_id=command_id)

    async def interrupt_run(self, run_id: str, *, command_id: str) -> CommandResult:
        row = self.core.reader.row("run", run_id)
        if row is None:
            raise CommandRejected("unknown_run", f"no run {run_id!r}")
        if row.status in RUN_TERMINAL:
            raise CommandRejected("run_finished", f"run {run_id} already ended {row.status}")
        raise _no_supervisor(f"interrupting run {run_id}")

    async def respond(
        self,
        request_id: str,
        decision: str,
        *,
        message: str | None = None,
        answers: dict[str, str] | None = None,
        command_id: str,
    ) -> CommandResult:
        # The claim is recorded by the core (exactly once); delivering it to the
        # provider is the supervisor's job once it runs.
        return await self.core.service.claim_request(request_id, decision, command_id=command_id)

    async def switch_provider(
        self, thread_id: str, provider: ProviderKind, *, command_id: str
    ) -> CommandResult:
        # Only a record: the handoff is materialized when a supervisor starts the next run.
        return await self.core.service.switch_provider(thread_id, provider, command_id=command_id)

    async def configure_thread(
        self,
        thread_id: str,
        *,
        cwd: str | None,
        model: str | None,
        runtime_mode: RuntimeMode | None,
        command_id: str,
    ) -> CommandResult:
        # Only a record: no runtime runs here to be retired.
        return await self.core.service.configure_thread(
            thread_id, cwd=cwd, model=model, runtime_mode=runtime_mode, command_id=command_id
        )

    async def rollback(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        command_id: str,
        dry_run: bool = False,
        allow_shared_work_tree: bool = False,
        expect_work_tree: str | None = None,
    ) -> CommandResult:
        if self.core.reader.row("thread", thread_id) is None:
            raise CommandRejected("unknown_thread", f"no thread {thread_id!r}")
        raise _no_supervisor("rolling back a thread (its provider thread too)")

    async def delete_thread(self, thread_id: str, *, command_id: str) -> CommandResult:
        # Only a record: no runtime runs here to be stopped.
        return await self.core.service.delete_thread(thread_id, command_id=command_id)

    def status(self) -> dict[str, Any]:
        with self.core.reader.snapshot():
            facts = store_facts(self.core.reader)
        return {
            "pid": os.getpid(),
            "uptimeS": round(time.monotonic() - self.started_monotonic, 3),
            "supervisor": False,
            **facts,
            "writer": writer_facts(self.core),
        }


def store_facts(store: ReadModel) -> dict[str, Any]:
    """Provider sessions by status, the log's head and token usage (total and per thread);
    call inside a read snapshot."""
    by_status: dict[str, int] = {}
    for s in store.rows("provider_session"):
        key = s.status or "unknown"
        by_status[key] = by_status.get(key, 0) + 1
    return {
        "sessions": by_status,
        "headSequence": store.last_sequence(),
        "usage": views.usage_totals(store),
    }


def writer_facts(core: Core) -> dict[str, int]:
    stats = core.writer.stats
    return {"batches": stats.batches, "submissions": stats.submissions, "events": stats.events}
