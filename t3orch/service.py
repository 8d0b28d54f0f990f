"""The command surface of the core: what the API, the CLI and the supervisor call."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from t3orch import timeline
from t3orch.commands import (
    checkpoints,
    delivery,
    handoff,
    lineage,
    mergeback,
    regenerate,
    requests,
    runs,
    sessions,
    threads,
)
from t3orch.commands import reconcile as reconcile_mod
from t3orch.commands.specs import CreateThread
from t3orch.domain.provider import HolderRef, JournalPosition, ProcessOwner
from t3orch.domain.vocab import (
    ContextHandoffStrategy,
    ProviderKind,
    RunAttemptReason,
    RuntimeMode,
)
from t3orch.gitstore import FileStat
from t3orch.ids import (
    CheckpointId,
    CommandId,
    ContextTransferId,
    DaemonId,
    IdFactory,
    ProviderSessionId,
    ProviderThreadId,
    ProviderTurnId,
    RunId,
    ThreadId,
    TurnItemId,
)
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.translate import IngestBatch, ingest_many
from t3orch.live import LiveHub
from t3orch.provider_events import ProviderEvent
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Outcome
from t3orch.store.writer import EventWriter, Pile, Ticket

log = logging.getLogger(__name__)


@attrs.frozen
class CommandResult:
    result: Any
    #: The sequence at which the command's effects are committed.
    sequence: int
    duplicate: bool = False


@attrs.frozen
class BegunSend:
    """A send committed with its run's first attempt (``send_and_begin``), visible."""

    result: CommandResult
    #: The handoff's text for the turn's input, and the turn to start; None for the
    #: turn when no attempt was begun (then it is durable already).
    handoff: str | None
    turn: TurnBinding | None
    _tickets: tuple[Ticket, ...]

    async def durable(self) -> None:
        """Until the commit is durable; raises the store's error when it is not."""
        await _durable(self._tickets)
        timeline.stamp("send.committed")


async def _durable(tickets: Sequence[Ticket]) -> None:
    for ticket in tickets:
        await ticket.outcome()


@attrs.define
class CoreService:
    writer: EventWriter
    ids: IdFactory = attrs.field(factory=IdFactory)
    #: Stamped on every recorded provider process (the daemon sets it; None in tests).
    process_owner: ProcessOwner | None = None
    #: The fleet daemon this service writes for: it owns the threads and provider
    #: sessions it creates (the daemon sets it; None in tests: the local daemon).
    daemon_id: DaemonId | None = None
    #: Streamed text before it is committed (the ingest streams publish, the API reads).
    live: LiveHub = attrs.field(factory=LiveHub)

    def __attrs_post_init__(self) -> None:
        self.writer.broadcast.listen(self.live.observe)

    async def _run(self, decide: Decide, command_id: str | None, kind: str) -> CommandResult:
        outcome: Outcome = await self.writer.submit(
            decide, command_id=CommandId(command_id) if command_id else None, command_type=kind
        )
        if outcome.error is not None:
            raise outcome.error
        return CommandResult(outcome.result, outcome.result_sequence, outcome.duplicate)

    async def create_thread(
        self, spec: CreateThread, *, command_id: str | None = None
    ) -> CommandResult:
        decide = threads.create_thread(spec, self.ids.new(ThreadId), self.daemon_id)
        return await self._run(decide, command_id, "thread.create")

    async def archive_thread(
        self, thread_id: str, *, command_id: str | None = None
    ) -> CommandResult:
        return await self._run(threads.archive_thread(thread_id), command_id, "thread.archive")

    async def unarchive_thread(
        self, thread_id: str, *, command_id: str | None = None
    ) -> CommandResult:
        decide = threads.unarchive_thread(thread_id)
        return await self._run(decide, command_id, "thread.unarchive")

    async def delete_thread(
        self, thread_id: str, *, command_id: str | None = None
    ) -> CommandResult:
        """The thread becomes a tombstone (``commands.threads.delete_thread``)."""
        return await self._run(threads.delete_thread(thread_id), command_id, "thread.delete")

    async def configure_thread(
        self,
        thread_id: str,
        *,
        cwd: str | None = None,
        model: str | None = None,
        runtime_mode: RuntimeMode | None = None,
        command_id: str | None = None,
    ) -> CommandResult:
        """The settings of the thread's next runs (``commands.threads.configure_thread``)."""
        decide = threads.configure_thread(
            thread_id, cwd=cwd, model=model, runtime_mode=runtime_mode
        )
        return await self._run(decide, command_id, "thread.configure")

    async def send_message(
        self, thread_id: str, text: str, *, command_id: str | None = None
    ) -> CommandResult:
        decide = runs.send_message(thread_id, text, self.ids.new(RunId))
        return await self._run(decide, command_id, "run.send")

    async def send_and_begin(
        self,
        thread_id: str,
        text: str,
        provider_thread_id: ProviderThreadId,
        *,
        command_id: str | None = None,
        begun_after: JournalPosition | None = None,
    ) -> BegunSend:
        """:meth:`send_message`, then the run's handoff and first attempt on
        ``provider_thread_id`` (a live idle runtime's), in one transaction.

        One commit (one fsync) before ``turn/start`` where the send and then the
        dispatcher's attempt took two; a crash leaves both or neither. Each stays its
        own submission, decided in order. Returns once the commit is *visible*
        (``Ticket.visible``): with a turn to start, the caller writes its
        ``turn/start`` then, during the commit's fsync, and awaits
        ``BegunSend.durable()`` before telling anyone. Without one (a repeated
        command id, a refusal: the run is then queued as any other) it returns
        once durable; a rejected send raises then.
        """
        run_id = self.ids.new(RunId)
        timeline.stamp("send.queue")
        sent = await self.writer.enqueue(
            runs.send_message(thread_id, text, run_id),
            command_id=CommandId(command_id) if command_id else None,
            command_type="run.send",
            with_next=True,
            early=True,
        )
        handoff = await self.writer.enqueue(
            delivery.prepare_handoff(run_id, provider_thread_id),
            command_type="handoff.prepare",
            with_next=True,
            early=True,
        )
        attempt = await self.writer.enqueue(
            runs.begin_attempt(run_id, provider_thread_id, begun_after=begun_after),
            command_type="run.begin_attempt",
            early=True,
        )
        # One batch (a with_next chain): visible, and later durable, together.
        queued, prepared, begun = (
            await sent.visible(),
            await handoff.visible(),
            await attempt.visible(),
        )
        timeline.stamp("send.visible")
        tickets = (sent, handoff, attempt)
        result = CommandResult(queued.result, queued.result_sequence, queued.duplicate)
        if queued.error is not None or queued.duplicate or begun.error is not None:
            await _durable(tickets)
            if queued.error is not None:
                raise queued.error
            return BegunSend(result, None, None, tickets)
        assert isinstance(begun.result, TurnBinding)
        if prepared.error is not None:
            # It rejects nothing; were it to fail, the begun attempt still starts (a
            # run left ``starting`` with nobody to start it would be lost).
            log.error("the handoff of run %s failed: %s", run_id, prepared.error)
        text_handoff = prepared.result if isinstance(prepared.result, str) else None
        return BegunSend(result, text_handoff, begun.result, tickets)

    async def add_run_input(
        self, run_id: str, text: str, *, command_id: str | None = None
    ) -> CommandResult:
        decide = runs.add_run_input(run_id, text, self.ids.new(TurnItemId))
        return await self._run(decide, command_id, "run.steer")

    async def fail_queued_run(self, run_id: str, reason: str) -> None:
        await self._run(runs.fail_queued_run(run_id, reason), None, "run.fail")

    async def claim_request(
        self, request_id: str, decision: str, *, command_id: str | None = None
    ) -> CommandResult:
        return await self._run(
            requests.claim_request(request_id, decision), command_id, "request.respond"
        )

    async def open_session(
        self, thread_id: str, *, provider: ProviderKind | None = None
    ) -> SessionBinding:
        decide = sessions.open_session(
            self.ids.new(ProviderSessionId),
            thread_id,
            self.ids.new(ProviderThreadId),
            provider=provider,
            owner=self.daemon_id,
        )
        result = await self._run(decide, None, "session.open")
        assert isinstance(result.result, SessionBinding)
        return result.result

    async def begin_attempt(
        self,
        run_id: str,
        provider_thread_id: ProviderThreadId,
        reason: RunAttemptReason = "initial",
        begun_after: JournalPosition | None = None,
    ) -> TurnBinding:
        result = await self._run(
            runs.begin_attempt(run_id, provider_thread_id, reason, begun_after),
            None,
            "run.begin_attempt",
        )
        assert isinstance(result.result, TurnBinding)
        return result.result

    async def record_process(
        self,
        session_id: str,
        pid: int | None,
        started_at: float | None,
        holder: HolderRef | None = None,
    ) -> None:
        await self._run(
            sessions.record_process(session_id, pid, started_at, self.process_owner, holder),
            None,
            "session.process",
        )

    async def replace_provider_thread(
        self, thread_id: str, session_id: ProviderSessionId, run_id: str, reason: str
    ) -> SessionBinding:
        """Resume failed: a new provider thread seeded with a full-thread summary (a
        handoff the run's first attempt on it sends, ``prepare_handoff``)."""
        decide = handoff.replace_provider_thread(
            thread_id, session_id, self.ids.new(ProviderThreadId), run_id, reason
        )
        result = await self._run(decide, None, "provider_thread.replace")
        binding, _, _ = result.result
        assert isinstance(binding, SessionBinding)
        return binding

    async def replace_if_unusable(
        self, thread_id: str, session_id: ProviderSessionId, run_id: str, limit: int | None
    ) -> tuple[SessionBinding, str, str] | None:
        """Before resuming: a fresh provider thread when the thread's one is not to be resumed.

        Its settings conflict with the thread's, or its delta handoffs would pass
        ``limit``. Returns the new binding, why and the reason's tag (``settings_changed``,
        ``handoff_overflow``); None when resuming is fine. The full summary is a handoff
        the run's first attempt on the new thread sends (``prepare_handoff``).
        """
        decide = handoff.replace_provider_thread(
            thread_id,
            session_id,
            self.ids.new(ProviderThreadId),
            run_id,
            "not resumable",
            unusable_only=True,
            delta_limit=limit,
        )
        result = await self._run(decide, None, "provider_thread.replace")
        if result.result is None:
            return None
        binding, why, tag = result.result
        return binding, why, tag

    async def switch_provider(
        self, thread_id: str, provider: ProviderKind, *, command_id: str | None = None
    ) -> CommandResult:
        """Future runs of the thread go to ``provider`` (see ``commands.lineage``)."""
        return await self._run(
            lineage.switch_provider(thread_id, provider), command_id, "thread.switchProvider"
        )

    async def forget_conversation(self, provider_thread_id: str) -> None:
        """The provider thread's conversation starts afresh (``delivery.forget_conversation``)."""
        await self._run(
            delivery.forget_conversation(provider_thread_id), None, "provider_thread.start_afresh"
        )

    async def prepare_handoff(
        self, run_id: str, provider_thread_id: str, turn_id: ProviderTurnId | None = None
    ) -> str | None:
        """The context ``run_id``'s provider thread missed, recorded as a handoff going with
        ``turn_id``'s input (default: the run's next attempt's); or None."""
        result = await self._run(
            delivery.prepare_handoff(run_id, provider_thread_id, turn_id), None, "handoff.prepare"
        )
        return result.result if isinstance(result.result, str) else None

    async def begin_attempt_with_handoff(
        self,
        run_id: str,
        provider_thread_id: ProviderThreadId,
        begun_after: JournalPosition | None = None,
        reason: RunAttemptReason = "initial",
    ) -> tuple[str | None, TurnBinding]:
        """:meth:`prepare_handoff` then :meth:`begin_attempt`, committed together.

        Both are queued before either is awaited, so the writer commits them in
        one transaction (one fsync where a turn start took two). Each stays its
        own submission, decided in this order: the attempt sees the handoff's
        rows. The handoff rejects nothing; were it to fail, its error is raised
        as before, though the attempt has then begun.
        """
        handoff = await self.writer.enqueue(
            delivery.prepare_handoff(run_id, provider_thread_id), command_type="handoff.prepare"
        )
        attempt = await self.writer.enqueue(
            runs.begin_attempt(run_id, provider_thread_id, reason, begun_after),
            command_type="run.begin_attempt",
        )
        prepared, begun = await handoff.outcome(), await attempt.outcome()
        for outcome in (prepared, begun):
            if outcome.error is not None:
                raise outcome.error
        assert isinstance(begun.result, TurnBinding)
        return (prepared.result if isinstance(prepared.result, str) else None), begun.result

    async def fork_thread(
        self,
        thread_id: str,
        run_id: str | None = None,
        *,
        title: str | None = None,
        provider: ProviderKind | None = None,
        new_thread_id: ThreadId | None = None,
        worktree: tuple[str, str] | None = None,
        command_id: str | None = None,
    ) -> CommandResult:
        decide = lineage.fork_thread(
            thread_id,
            run_id,
            new_thread_id or self.ids.new(ThreadId),
            title=title,
            provider=provider,
            worktree=worktree,
            owner=self.daemon_id,
        )
        return await self._run(decide, command_id, "thread.fork")

    async def regenerate_handoff(
        self,
        handoff_id: str,
        strategy: ContextHandoffStrategy | None = None,
        *,
        command_id: str | None = None,
    ) -> CommandResult:
        """A new handoff from today's history supersedes ``handoff_id`` (commands.regenerate)."""
        decide = regenerate.regenerate_handoff(handoff_id, strategy)
        return await self._run(decide, command_id, "handoff.regenerate")

    async def merge_back(
        self,
        thread_id: str,
        run_id: str | None = None,
        *,
        target_thread_id: str | None = None,
        command_id: str | None = None,
    ) -> CommandResult:
        """A pending ``merge_back`` of a fork into its parent (``commands.mergeback``)."""
        decide = mergeback.merge_back(
            thread_id, run_id, target_thread_id, self.ids.new(ContextTransferId)
        )
        return await self._run(decide, command_id, "thread.mergeBack")

    async def resolve_fork_native(
        self, transfer_id: str, provider_thread_id: str, native_ref: str
    ) -> None:
        decide = lineage.resolve_fork_native(transfer_id, provider_thread_id, native_ref)
        await self._run(decide, None, "fork.resolve")

    async def resolve_fork_portable(
        self, transfer_id: str, provider_thread_id: str, run_id: str, reason: str
    ) -> None:
        """Seed the fork's first run with the source history (a handoff its first
        attempt sends, ``prepare_handoff``)."""
        decide = lineage.resolve_fork_portable(transfer_id, provider_thread_id, run_id, reason)
        await self._run(decide, None, "fork.resolve")

    async def record_checkpoint(
        self,
        run_id: str,
        cwd: str,
        ref: str,
        files: Sequence[FileStat],
        parent_id: str | None,
    ) -> CommandResult:
        decide = checkpoints.record_checkpoint(run_id, cwd, ref, files, parent_id)
        return await self._run(decide, None, "checkpoint.record")

    async def commit_decision(self, decide: Decide, kind: str) -> CommandResult:
        """Commit a decision made elsewhere (a checkpoint's record, built after git ran)."""
        return await self._run(decide, None, kind)

    async def record_child_checkpoint(
        self, scope_id: str, ref: str, files: Sequence[FileStat], parent_id: str | None
    ) -> CommandResult:
        decide = checkpoints.record_child_checkpoint(scope_id, ref, files, parent_id)
        return await self._run(decide, None, "checkpoint.record_child")

    async def checkpoints_disabled(self, thread_id: str, cwd: str, reason: str) -> None:
        await self._run(
            checkpoints.checkpoints_disabled(thread_id, cwd, reason), None, "checkpoint.disabled"
        )

    async def rollback(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        reverted: dict[str, int | None],
        closed: Sequence[str],
        undo_checkpoint_id: str | None = None,
        restored: Sequence[str] = (),
        deleted: Sequence[str] = (),
        command_id: str | None = None,
    ) -> CommandResult:
        decide = checkpoints.rollback(
            thread_id,
            checkpoint_id,
            reverted=reverted,
            closed=closed,
            undo_checkpoint_id=undo_checkpoint_id,
            restored=restored,
            deleted=deleted,
        )
        return await self._run(decide, command_id, "thread.rollback")

    async def record_undo_checkpoint(
        self,
        thread_id: str,
        checkpoint_id: CheckpointId,
        cwd: str,
        ref: str,
        files: Sequence[FileStat],
        parent_id: str | None,
    ) -> CommandResult:
        """The work tree as a rollback found it (``commands.checkpoints``)."""
        decide = checkpoints.record_undo_checkpoint(
            thread_id, checkpoint_id, cwd, ref, files, parent_id
        )
        return await self._run(decide, None, "checkpoint.undo")

    async def note(
        self,
        session_id: str | None,
        level: Literal["info", "warning", "error"],
        code: str,
        message: str,
    ) -> None:
        await self._run(sessions.note(session_id, level, code, message), None, "diagnostic")

    async def ingest(self, binding: SessionBinding, events: Sequence[ProviderEvent]) -> int:
        """Append what a batch of adapter events means; returns the last sequence."""
        if not events:
            return 0
        batch = list(events)
        result = await self._run(lambda view: ingest_many(view, binding, batch), None, "ingest")
        return result.sequence

    async def ingest_queued(
        self, binding: SessionBinding, events: Sequence[ProviderEvent]
    ) -> Ticket:
        """Queue what a batch of adapter events means; the ticket says when it committed."""
        batch = IngestBatch(binding, list(events))
        # The pile is the batch's own list: a batch of the session queued behind it
        # may be added to it (see EventWriter.enqueue).
        return await self.writer.enqueue(
            batch, command_type="ingest", size=len(batch.events), pile=Pile(binding, batch.events)
        )

    async def end_turn_queued(
        self,
        binding: SessionBinding,
        events: Sequence[ProviderEvent],
        checkpoint: Decide | None,
        items: Sequence[ProviderEvent] = (),
    ) -> Ticket:
        """Queue a turn's end (``events``), after its last ``items`` and its
        checkpoint's record.

        All commit in one transaction (``with_next``), in that order: the record's
        sequences after the items' and before the end's, and no commit holds the one
        without the other.
        """
        timeline.stamp("end.queue")
        if checkpoint is None:
            return await self.ingest_queued(binding, [*items, *events])
        if items:
            batch = IngestBatch(binding, list(items))
            await self.writer.enqueue(
                batch, command_type="ingest", size=len(batch.events), with_next=True
            )
        await self.writer.enqueue(checkpoint, command_type="checkpoint.record", with_next=True)
        return await self.ingest_queued(binding, events)

    async def reconcile(
        self,
        reason: str = "daemon_restart",
        swept: Mapping[str, int] | None = None,
        held: reconcile_mod.Held = reconcile_mod.NOTHING_HELD,
    ) -> dict[str, int]:
        decide = reconcile_mod.reconcile(reason, swept, self.daemon_id, held)
        result = await self._run(decide, None, "runtime.reconcile")
        assert isinstance(result.result, dict)
        return result.result


__all__ = ["CommandRejected", "CommandResult", "CoreService"]
