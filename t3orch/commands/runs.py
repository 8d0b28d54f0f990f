from __future__ import annotations

import msgspec

from t3orch.commands.items import orchestration_refs
from t3orch.commands.threads import require_thread
from t3orch.domain.node import ExecutionNode
from t3orch.domain.provider import JournalPosition, ProviderThread, ProviderTurn
from t3orch.domain.run import Run, RunAttempt
from t3orch.domain.turn_items import UserMessage
from t3orch.domain.vocab import RUN_TERMINAL, RunAttemptReason
from t3orch.ids import (
    MessageId,
    NodeId,
    ProviderThreadId,
    ProviderTurnId,
    RunAttemptId,
    RunId,
    TurnItemId,
    derived_id,
)
from t3orch.ingest.binding import TurnBinding
from t3orch.ingest.changes import Changes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, ReadModel, StateView


def send_message(thread_id: str, text: str, run_id: RunId) -> Decide:
    """Queue a run: the user's message, the run and its root node. Dispatch starts it."""
    if not text.strip():
        raise CommandRejected("empty_message", "a message needs some text")

    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        if thread.archived_at is not None:
            raise CommandRejected("thread_archived", f"thread {thread_id} is archived")
        ch = Changes(view)
        ordinal = view.count(Run, thread_id=thread_id) + 1
        root = derived_id(NodeId, run_id, "root")
        message_id = derived_id(MessageId, run_id, "user")
        now = view.now()
        ch.put(
            "node",
            ExecutionNode(
                id=root,
                thread_id=thread.id,
                run_id=run_id,
                parent_node_id=None,
                root_node_id=root,
                kind="root_turn",
                status="pending",
                counts_for_run=True,
                provider_thread_id=None,
                provider_turn_id=None,
                native_item_ref=None,
                runtime_request_id=None,
                checkpoint_scope_id=None,
            ),
        )
        ch.put(
            "run",
            Run(
                id=run_id,
                thread_id=thread.id,
                ordinal=ordinal,
                provider=thread.default_provider,
                provider_thread_id=None,
                user_message_id=message_id,
                root_node_id=root,
                active_attempt_id=None,
                status="queued",
                requested_at=now,
            ),
        )
        ch.put(
            "turn_item",
            UserMessage(
                id=derived_id(TurnItemId, run_id, "user"),
                **orchestration_refs(thread.id, run_id, root, now),
                message_id=message_id,
                text=text,
            ),
        )
        return Decision(ch.drafts, {"runId": run_id, "ordinal": ordinal})

    return decide


def run_attempts(view: StateView | ReadModel, run_id: str) -> list[RunAttempt]:
    """The run's attempts in order. Their ids are derived from the run and the ordinal
    (``begin_attempt`` alone makes them, 1, 2, …): a run's few, read by id, not its
    thread's every attempt, which grows with each turn."""
    attempts: list[RunAttempt] = []
    while (
        a := view.get(RunAttempt, derived_id(RunAttemptId, run_id, str(len(attempts) + 1)))
    ) is not None:
        attempts.append(a)
    return attempts


def attempt_turn_id(provider_thread_id: str, run_id: str, ordinal: int) -> ProviderTurnId:
    """The provider turn of the run's ``ordinal``-th attempt (derived, as the attempt is)."""
    return derived_id(ProviderTurnId, provider_thread_id, run_id, str(ordinal))


def next_turn_id(view: StateView, run_id: str, provider_thread_id: str) -> ProviderTurnId:
    """The provider turn the run's next attempt on that thread begins (``begin_attempt``)."""
    return attempt_turn_id(provider_thread_id, run_id, len(run_attempts(view, run_id)) + 1)


def begin_attempt(
    run_id: str,
    provider_thread_id: ProviderThreadId,
    reason: RunAttemptReason = "initial",
    begun_after: JournalPosition | None = None,
) -> Decide:
    """Bind a queued run to a provider thread: a new attempt and provider turn.

    The result is the :class:`TurnBinding` the session feeds ingest with; its ids
    are derived from the run and the attempt ordinal, never from process memory.
    ``begun_after``: how far the daemon had read a held runtime's journal (the turn's).
    """

    def decide(view: StateView) -> Decision:
        run = view.get(Run, run_id)
        if run is None:
            raise CommandRejected("unknown_run", f"no run {run_id!r}")
        if run.status in RUN_TERMINAL:
            raise CommandRejected("run_finished", f"run {run_id} already ended {run.status}")
        pt = view.get(ProviderThread, provider_thread_id)
        if pt is None:
            raise CommandRejected(
                "unknown_provider_thread", f"no provider thread {provider_thread_id}"
            )
        ch = Changes(view)
        attempts = run_attempts(view, run.id)
        ordinal = len(attempts) + 1
        now = view.now()
        for a in attempts:
            if a.status in ("pending", "running"):
                # The attempt a recovery replaces failed (its provider crashed); any other
                # replacement supersedes it: a steering restart, or a recovery moved to
                # the thread that replaced the crashed one (it was begun there, never sent).
                moved = a.reason == "provider_recovery" and a.provider_thread_id != pt.id
                crashed = reason == "provider_recovery" and not moved
                moved_on = "failed" if crashed else "superseded"
                ch.put("run_attempt", msgspec.structs.replace(a, status=moved_on, completed_at=now))
        attempt_id = derived_id(RunAttemptId, run.id, str(ordinal))
        turn_id = attempt_turn_id(provider_thread_id, run.id, ordinal)
        root = run.root_node_id
        if root is None:  # every run is created with its root node (send_message)
            raise CommandRejected("run_without_root", f"run {run_id} has no root node")
        ch.put(
            "provider_turn",
            ProviderTurn(
                id=turn_id,
                provider_thread_id=provider_thread_id,
                node_id=root,
                run_attempt_id=attempt_id,
                native_turn_ref=None,
                ordinal=pt.turn_count + 1,
                status="pending",
                begun_after=begun_after,
            ),
        )
        ch.put(
            "run_attempt",
            RunAttempt(
                id=attempt_id,
                run_id=run.id,
                thread_id=run.thread_id,
                attempt_ordinal=ordinal,
                root_node_id=root,
                provider=pt.provider,
                provider_thread_id=provider_thread_id,
                provider_turn_id=turn_id,
                reason=reason,
                status="pending",
            ),
        )
        ch.put(
            "run",
            msgspec.structs.replace(
                run,
                status="starting",
                active_attempt_id=attempt_id,
                provider=pt.provider,
                provider_thread_id=provider_thread_id,
            ),
        )
        node = view.get(ExecutionNode, root)
        if node is not None:
            ch.put(
                "node",
                msgspec.structs.replace(
                    node,
                    provider_thread_id=provider_thread_id,
                    provider_turn_id=turn_id,
                    status="pending",
                ),
            )
        binding = TurnBinding(
            run_id=run.id, attempt_id=attempt_id, root_node_id=root, provider_turn_id=turn_id
        )
        return Decision(ch.drafts, binding)

    return decide


def fail_queued_run(run_id: str, reason: str) -> Decide:
    """A run that could not be dispatched (no runtime could start) ends ``failed``."""

    def decide(view: StateView) -> Decision:
        run = view.get(Run, run_id)
        if run is None or run.status in RUN_TERMINAL:
            return Decision([])
        ch = Changes(view)
        now = view.now()
        ch.put(
            "run",
            msgspec.structs.replace(run, status="failed", completed_at=now, last_error=reason),
        )
        node = view.get(ExecutionNode, run.root_node_id) if run.root_node_id else None
        if node is not None:
            ch.put("node", msgspec.structs.replace(node, status="failed", completed_at=now))
        return Decision(ch.drafts)

    return decide


def add_run_input(run_id: str, text: str, item_id: TurnItemId) -> Decide:
    """More user input for an active run (steering): a user message on that run."""
    if not text.strip():
        raise CommandRejected("empty_message", "a message needs some text")

    def decide(view: StateView) -> Decision:
        run = view.get(Run, run_id)
        if run is None:
            raise CommandRejected("unknown_run", f"no run {run_id!r}")
        if run.status in RUN_TERMINAL:
            raise CommandRejected("run_finished", f"run {run_id} already ended {run.status}")
        ch = Changes(view)
        now = view.now()
        ch.put(
            "turn_item",
            UserMessage(
                id=item_id,
                **orchestration_refs(run.thread_id, run.id, run.root_node_id, now),
                message_id=derived_id(MessageId, item_id),
                text=text,
            ),
        )
        return Decision(ch.drafts, {"runId": run.id, "itemId": item_id})

    return decide
