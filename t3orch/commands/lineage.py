"""Lineage and context: provider switches, delta handoffs and forks (issue 7).

Everything here is a decision run inside the single writer. A transfer is cheap
to create; the handoff text is materialized when the target run starts and its
provider thread is known (:func:`prepare_handoff`, :func:`resolve_fork_portable`).
See ``docs/lineage.md`` for the rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from t3orch.commands.items import orchestration_refs
from t3orch.commands.threads import require_thread
from t3orch.domain.context import (
    ContextHandoff,
    ContextSourcePoint,
    ContextTransfer,
    ContextTransferResolution,
    DeltaContextResolution,
    NativeForkResolution,
    PortableContextResolution,
    RunOrdinalRange,
)
from t3orch.domain.message import ConversationMessage
from t3orch.domain.provider import ProviderThread, ProviderThreadForkSource, ProviderTurn
from t3orch.domain.run import Run, RunAttempt
from t3orch.domain.thread import AppThread, AppThreadLineage, ModelSelection
from t3orch.domain.turn_items import Handoff
from t3orch.domain.vocab import (
    PROVIDER_THREAD_DEAD,
    RUN_TERMINAL,
    ContextHandoffStatus,
    ContextHandoffStrategy,
    ContextTransferStatus,
    ContextTransferType,
    CreatedBy,
    ProviderKind,
)
from t3orch.events import ContextTransferUpserted, ThreadUpserted
from t3orch.ids import (
    ContextHandoffId,
    ContextTransferId,
    DaemonId,
    ProviderTurnId,
    RunId,
    ThreadId,
    TurnItemId,
    derived_id,
)
from t3orch.ingest.changes import Changes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView

#: The summary keeps the most recent history that fits: providers truncate worse.
MAX_SUMMARY_CHARS = 24_000


# -- history, from the app's own records ---------------------------------------------


def fork_transfer(view: StateView, thread_id: str) -> ContextTransfer | None:
    """The ``fork`` transfer that created ``thread_id``, if it is a fork."""
    for t in view.select(ContextTransfer, thread_id=thread_id):
        if t.type == "fork" and t.target_thread_id == thread_id:
            assert isinstance(t, ContextTransfer)
            return t
    return None


def _runs(view: StateView, thread_id: str) -> dict[str, Run]:
    return {r.id: r for r in view.select(Run, thread_id=thread_id)}


def history(
    view: StateView,
    thread_id: str,
    *,
    up_to_ordinal: int | None = None,
    run_ids: Iterable[str] | None = None,
) -> list[ConversationMessage]:
    """The conversation a user sees on ``thread_id``: a fork's inherited part first.

    ``up_to_ordinal`` stops after that run; ``run_ids`` keeps only those runs'
    messages (and skips the inherited part). Rolled-back runs are left out.
    """
    out: list[ConversationMessage] = []
    wanted = set(run_ids) if run_ids is not None else None
    if wanted is None:
        transfer = fork_transfer(view, thread_id)
        if transfer is not None and transfer.source_point.run_id is not None:
            source = view.get(Run, transfer.source_point.run_id)
            if source is not None:
                out.extend(history(view, source.thread_id, up_to_ordinal=source.ordinal))
    runs = _runs(view, thread_id)
    for m in view.select(ConversationMessage, thread_id=thread_id):
        run = runs.get(m.run_id) if m.run_id else None
        if run is not None and run.status == "rolled_back":
            continue
        if up_to_ordinal is not None and (run is None or run.ordinal > up_to_ordinal):
            continue
        if wanted is not None and m.run_id not in wanted:
            continue
        out.append(m)
    return out


def render(messages: Iterable[ConversationMessage], *, limit: int = MAX_SUMMARY_CHARS) -> str:
    lines = [f"{m.role.capitalize()}: {m.text.strip()}" for m in messages if m.text.strip()]
    body = "\n\n".join(lines)
    if len(body) > limit:
        body = "[earlier history omitted]\n\n" + body[-limit:]
    return body


# -- provider threads ---------------------------------------------------------------------


def resumable_provider_thread(
    view: StateView, thread_id: str, provider: ProviderKind
) -> ProviderThread | None:
    """The provider thread a return to ``provider`` resumes: its newest live root one.

    Each provider keeps its own provider thread on the app thread (``appThreadId``
    set, no ``ownerNodeId``); a replaced one is ``error`` and never picked again.
    """
    best: ProviderThread | None = None
    for pt in view.select(ProviderThread, thread_id=thread_id):
        if (
            pt.provider != provider
            or pt.owner_node_id is not None
            or pt.status in PROVIDER_THREAD_DEAD
        ):
            continue
        if best is None or (pt.last_run_ordinal or 0, pt.created_at) >= (
            best.last_run_ordinal or 0,
            best.created_at,
        ):
            best = pt
    return best


# -- switching provider -------------------------------------------------------------------


def switch_provider(thread_id: str, provider: ProviderKind) -> Decide:
    """Select ``provider`` for the thread's future runs (queued ones included).

    The provider thread it used before, if any, becomes the active one again: the
    next runtime resumes it, and the next run gets a delta handoff for what it missed.
    """

    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        if thread.archived_at is not None:
            raise CommandRejected("thread_archived", f"thread {thread_id} is archived")
        previous = thread.default_provider
        result: dict[str, Any] = {
            "threadId": thread.id,
            "provider": provider,
            "previousProvider": previous,
        }
        if previous == provider:
            result["providerThreadId"] = thread.active_provider_thread_id
            return Decision([], result)
        ch = Changes(view)
        now = view.now()
        back = resumable_provider_thread(view, thread_id, provider)
        ch.put(
            "thread",
            msgspec.structs.replace(
                thread,
                default_provider=provider,
                # The old model names the old provider's model: the new one's default.
                model_selection=ModelSelection(provider=provider, model=None),
                active_provider_thread_id=back.id if back else None,
                updated_at=now,
            ),
        )
        for run in view.select(Run, thread_id=thread_id):
            if run.status == "queued":
                ch.put("run", msgspec.structs.replace(run, provider=provider))
        result["providerThreadId"] = back.id if back else None
        return Decision(ch.drafts, result)

    return decide


def record_handoff(
    ch: Changes,
    *,
    thread_id: str,
    run: Run,
    transfer_type: ContextTransferType,
    transfer_id: ContextTransferId,
    strategy: ContextHandoffStrategy,
    source_point: ContextSourcePoint,
    source_provider: ProviderKind | None,
    target: ProviderThread,
    from_pts: list[ProviderThread],
    covered: RunOrdinalRange,
    summary: str,
    status: ContextTransferStatus,
    created_by: CreatedBy = "system",
    handoff_id: ContextHandoffId | None = None,
    handoff_status: ContextHandoffStatus = "ready",
    delivered: bool = True,
    carrier: ProviderTurnId | None = None,
) -> ContextHandoff:
    """Record a transfer, its materialized handoff, the run's link and a ``handoff`` item.

    The run's ``contextHandoffId`` names the first handoff it got; a merge-back or a
    regenerated handoff delivered with the same run keeps its own ``targetRunId``.
    Not ``delivered`` (a ready one made before the run's provider thread was opened):
    only the run's link; ``delivery.prepare_handoff`` delivers it with the run's attempt.
    ``carrier``: the provider turn whose input it goes with (``deliver``).
    """
    now = ch.now()
    handoff_id = handoff_id or derived_id(ContextHandoffId, transfer_id)
    resolution: ContextTransferResolution = (
        DeltaContextResolution(context_handoff_id=handoff_id)
        if strategy == "delta_since_target_last_seen"
        else PortableContextResolution(context_handoff_id=handoff_id)
    )
    existing = ch.get("context_transfer", transfer_id)
    transfer = ContextTransfer(
        id=transfer_id,
        type=transfer_type,
        source_thread_id=source_point.thread_id,
        target_thread_id=ThreadId(thread_id),
        source_point=source_point,
        base_point=existing.base_point if existing else None,
        source_provider=source_provider,
        target_provider=target.provider,
        status=status,
        resolution=resolution,
        created_by=existing.created_by if existing else created_by,
        created_at=existing.created_at if existing else now,
    )
    ch.emit(ContextTransferUpserted(transfer=transfer))
    handoff = ContextHandoff(
        id=handoff_id,
        transfer_id=transfer_id,
        thread_id=ThreadId(thread_id),
        target_run_id=RunId(run.id),
        from_provider_thread_ids=[p.id for p in from_pts],
        to_provider_thread_id=target.id,
        covered_run_ordinals=covered,
        strategy=strategy,
        status=handoff_status,
        summary_message_id=None,
        summary_text=summary,
        created_by_provider=None,
        created_at=now,
        updated_at=now,
    )
    ch.put("context_handoff", handoff)
    if handoff_status == "ready" and delivered:
        providers = sorted({p.provider for p in from_pts})
        deliver(ch, handoff, run, target, from_providers=providers, carrier=carrier)
    elif handoff_status == "ready":
        _link_run(ch, run, handoff)
    return handoff


def _link_run(ch: Changes, run: Run, handoff: ContextHandoff) -> None:
    """The run's ``contextHandoffId``, when it has none yet."""
    current = ch.get("run", run.id) or run
    if current.context_handoff_id is None:
        ch.put("run", msgspec.structs.replace(current, context_handoff_id=handoff.id))


def deliver(
    ch: Changes,
    handoff: ContextHandoff,
    run: Run,
    target: ProviderThread,
    *,
    from_providers: Sequence[str],
    carrier: ProviderTurnId | None,
) -> None:
    """The handoff goes to ``run``: the run's link, the provider thread's list, an item
    naming ``carrier``, the provider turn whose input carries it (None: none named; a
    turn the next daemon sends carries what names it, ``delivery.carried_by``)."""
    now = ch.now()
    _link_run(ch, run, handoff)
    pt = ch.get("provider_thread", target.id) or target
    if handoff.id not in pt.handoff_ids:
        ch.put(
            "provider_thread",
            msgspec.structs.replace(pt, handoff_ids=[*pt.handoff_ids, handoff.id], updated_at=now),
        )
    ch.put(
        "turn_item",
        Handoff(
            id=derived_id(TurnItemId, handoff.id),
            **orchestration_refs(handoff.thread_id, run.id, run.root_node_id, now, carrier),
            handoff_id=handoff.id,
            strategy=handoff.strategy,
            from_providers=list(from_providers),
            to_provider=target.provider,
        ),
    )


# -- forks ----------------------------------------------------------------------------------


def fork_thread(
    thread_id: str,
    run_id: str | None,
    new_thread_id: ThreadId,
    *,
    title: str | None = None,
    provider: ProviderKind | None = None,
    worktree: tuple[str, str] | None = None,
    owner: DaemonId | None = None,
) -> Decide:
    """A new app thread continuing ``thread_id`` from ``run_id`` (default: its latest run).

    Nothing is copied: the fork's lineage and a ``fork`` transfer (source point =
    the run) are recorded; the fork's first run resolves it (native or portable).
    ``worktree``: (cwd, worktreePath) of a git worktree made for the fork
    (``t3orch.worktrees``); without it the fork shares its parent's cwd.
    """

    def decide(view: StateView) -> Decision:
        parent = require_thread(view, thread_id)
        source = finished_run(view, thread_id, run_id, "fork at")
        ch = Changes(view)
        now = view.now()
        kind = provider or parent.default_provider
        root = parent.lineage.root_thread_id if parent.lineage else ThreadId(parent.id)
        fork = AppThread(
            id=new_thread_id,
            project_id=parent.project_id,
            title=title or f"{parent.title} (fork)",
            default_provider=kind,
            model_selection=parent.model_selection
            if kind == parent.default_provider
            else ModelSelection(provider=kind, model=None),
            runtime_mode=parent.runtime_mode,
            interaction_mode=parent.interaction_mode,
            cwd=worktree[0] if worktree else parent.cwd,
            branch=None if worktree else parent.branch,
            worktree_path=worktree[1] if worktree else parent.worktree_path,
            active_provider_thread_id=None,
            lineage=AppThreadLineage(
                parent_thread_id=ThreadId(parent.id),
                relationship_to_parent="fork",
                root_thread_id=root,
            ),
            created_at=now,
            updated_at=now,
            owner_daemon_id=owner,
        )
        ch.emit(ThreadUpserted(thread=fork))
        pt = (
            view.get(ProviderThread, source.provider_thread_id)
            if source is not None and source.provider_thread_id
            else None
        )
        point = ContextSourcePoint(
            thread_id=ThreadId(parent.id),
            run_id=source.id if source else None,
            checkpoint_id=source.checkpoint_id if source else None,
            turn_item_id=None,
            provider_thread_ref=pt.native_thread_ref if pt else None,
            provider_turn_ref=_native_turn_ref(view, source),
        )
        transfer_id = derived_id(ContextTransferId, new_thread_id, "fork")
        ch.emit(
            ContextTransferUpserted(
                transfer=ContextTransfer(
                    id=transfer_id,
                    type="fork",
                    source_thread_id=ThreadId(parent.id),
                    target_thread_id=new_thread_id,
                    source_point=point,
                    base_point=None,
                    source_provider=source.provider if source else None,
                    target_provider=kind,
                    # Nothing to carry over from an empty thread.
                    status="pending" if source is not None else "consumed",
                    resolution=None,
                    created_by="user",
                    created_at=now,
                    consumed_at=None if source is not None else now,
                )
            )
        )
        return Decision(
            ch.drafts,
            {
                "threadId": new_thread_id,
                "transferId": transfer_id,
                "sourceThreadId": parent.id,
                "sourceRunId": source.id if source else None,
            },
        )

    return decide


def finished_run(view: StateView, thread_id: str, run_id: str | None, verb: str) -> Run | None:
    """``run_id`` checked to be a finished, live run of the thread; default its latest one."""
    if run_id is None:
        done = [
            r
            for r in view.select(Run, thread_id=thread_id)
            if r.status in RUN_TERMINAL and r.status != "rolled_back"
        ]
        return max(done, key=lambda r: r.ordinal) if done else None
    run = view.get(Run, run_id)
    if run is None or run.thread_id != thread_id:
        raise CommandRejected("unknown_run", f"no run {run_id!r} on thread {thread_id}")
    if run.status not in RUN_TERMINAL:
        raise CommandRejected(
            "run_not_finished", f"run {run_id} is {run.status}; {verb} a finished run"
        )
    if run.status == "rolled_back":
        raise CommandRejected("run_rolled_back", f"run {run_id} was rolled back")
    assert isinstance(run, Run)
    return run


def _native_turn_ref(view: StateView, run: Run | None) -> str | None:
    if run is None or run.active_attempt_id is None:
        return None
    attempt = view.get(RunAttempt, run.active_attempt_id)
    if attempt is None or attempt.provider_turn_id is None:
        return None
    turn = view.get(ProviderTurn, attempt.provider_turn_id)
    return None if turn is None else turn.native_turn_ref


def resolve_fork_native(transfer_id: str, provider_thread_id: str, native_ref: str) -> Decide:
    """The fork's first runtime forked the source natively into ``native_ref``."""

    def decide(view: StateView) -> Decision:
        transfer = view.get(ContextTransfer, transfer_id)
        pt = view.get(ProviderThread, provider_thread_id)
        if transfer is None or pt is None:
            raise CommandRejected("unknown_transfer", f"no transfer {transfer_id!r}")
        ch = Changes(view)
        source_run = (
            view.get(Run, transfer.source_point.run_id) if transfer.source_point.run_id else None
        )
        ch.emit(
            ContextTransferUpserted(
                transfer=msgspec.structs.replace(
                    transfer,
                    status="resolved_native",
                    resolution=NativeForkResolution(provider_thread_ref=native_ref),
                    consumed_at=view.now(),
                )
            )
        )
        if source_run is not None and source_run.provider_thread_id is not None:
            ch.put(
                "provider_thread",
                msgspec.structs.replace(
                    pt,
                    forked_from=ProviderThreadForkSource(
                        provider_thread_id=source_run.provider_thread_id,
                        native_thread_ref=transfer.source_point.provider_thread_ref,
                        native_turn_ref=transfer.source_point.provider_turn_ref,
                    ),
                    updated_at=view.now(),
                ),
            )
        return Decision(ch.drafts, native_ref)

    return decide


def resolve_fork_portable(
    transfer_id: str, provider_thread_id: str, run_id: str, reason: str
) -> Decide:
    """No native fork: the fork's first run gets the source history up to the source point."""

    def decide(view: StateView) -> Decision:
        transfer = view.get(ContextTransfer, transfer_id)
        pt = view.get(ProviderThread, provider_thread_id)
        run = view.get(Run, run_id)
        if transfer is None or pt is None or run is None:
            raise CommandRejected("unknown_transfer", f"no transfer {transfer_id!r}")
        if run.context_handoff_id is not None:
            return Decision([], None)
        source_run = (
            view.get(Run, transfer.source_point.run_id) if transfer.source_point.run_id else None
        )
        if source_run is None:
            return Decision([], None)
        ch = Changes(view)
        body = render(history(view, source_run.thread_id, up_to_ordinal=source_run.ordinal))
        summary = (
            "This conversation is a fork of an earlier one. Here is that conversation up to "
            "the fork point, from the application's own history:\n\n" + body
        )
        src_pt = (
            view.get(ProviderThread, source_run.provider_thread_id)
            if source_run.provider_thread_id
            else None
        )
        record_handoff(
            ch,
            thread_id=run.thread_id,
            run=run,
            transfer_type="fork",
            transfer_id=transfer.id,
            strategy="full_thread_summary",
            source_point=transfer.source_point,
            source_provider=transfer.source_provider,
            target=pt,
            from_pts=[src_pt] if src_pt is not None else [],
            covered=RunOrdinalRange(from_=1, to=source_run.ordinal),
            summary=summary,
            status="resolved_portable",
            created_by="user",
            # Sent with the run's first attempt, which delivers it (a daemon that dies
            # before that leaves it to the next one).
            delivered=False,
        )
        return Decision(ch.drafts, {"summary": summary, "reason": reason})

    return decide


def pending_fork(view: StateView, thread_id: str) -> ContextTransfer | None:
    transfer = fork_transfer(view, thread_id)
    return transfer if transfer is not None and transfer.status == "pending" else None


__all__ = [
    "finished_run",
    "fork_thread",
    "history",
    "pending_fork",
    "record_handoff",
    "render",
    "resolve_fork_native",
    "resolve_fork_portable",
    "resumable_provider_thread",
    "switch_provider",
]
