"""``merge_back``: what a fork found, carried back into the thread it was forked from.

A ``merge_back`` ContextTransfer (source = the fork at a finished run, target =
its parent or a named thread) is cheap to create: ``pending``, nothing built.
Its handoff is materialized when the target's next run starts (its provider
thread is known then): a ``delta_since_target_last_seen`` of the source's own
runs since the target last saw them — since the fork point the first time,
since the previous merge-back after that. ``coveredRunOrdinals`` counts the
*source* thread's runs (named by the transfer's ``sourcePoint.threadId``).
Only conversation context moves: a fork shares its parent's cwd, so files need
no merging. See docs/decisions-lineage.md and docs/lineage.md.
"""

from __future__ import annotations

from typing import Any

import msgspec

from t3orch.commands.lineage import (
    finished_run,
    fork_transfer,
    history,
    record_handoff,
    render,
)
from t3orch.commands.threads import require_thread
from t3orch.domain.context import ContextSourcePoint, ContextTransfer, RunOrdinalRange
from t3orch.domain.provider import ProviderThread
from t3orch.domain.run import Run
from t3orch.domain.thread import AppThread
from t3orch.events import ContextTransferUpserted
from t3orch.ids import ContextTransferId, ProviderTurnId, ThreadId
from t3orch.ingest.changes import Changes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView

#: Merge-backs whose handoff reached the target: the next one starts after them.
_DELIVERED = ("resolved_portable", "consumed")


def _merges(view: StateView, source_id: str, target_id: str) -> list[ContextTransfer]:
    out = [
        t
        for t in view.select(ContextTransfer, thread_id=target_id)
        if t.type == "merge_back" and t.source_thread_id == source_id
    ]
    return sorted(out, key=lambda t: t.created_at)


def covered_runs(view: StateView, transfer: ContextTransfer) -> list[Run]:
    """The source's own runs the transfer carries: after its base, up to its source point."""
    source = transfer.source_point
    end = view.get(Run, source.run_id) if source.run_id else None
    if end is None:
        return []
    after = 0
    base = transfer.base_point
    if base is not None and base.thread_id == source.thread_id and base.run_id is not None:
        base_run = view.get(Run, base.run_id)
        after = base_run.ordinal if base_run is not None else 0
    runs = [
        r
        for r in view.select(Run, thread_id=source.thread_id)
        if after < r.ordinal <= end.ordinal and r.status != "rolled_back"
    ]
    return sorted(runs, key=lambda r: r.ordinal)


def merge_back(
    source_thread_id: str,
    run_id: str | None,
    target_thread_id: str | None,
    transfer_id: ContextTransferId,
) -> Decide:
    """Record a pending ``merge_back`` of ``source_thread_id`` (at ``run_id``) into its parent."""

    def decide(view: StateView) -> Decision:
        source = require_thread(view, source_thread_id)
        target_id = target_thread_id or (
            source.lineage.parent_thread_id if source.lineage else None
        )
        if target_id is None:
            raise CommandRejected(
                "no_merge_target",
                f"thread {source_thread_id} is not a fork; name the thread to merge into",
            )
        if target_id == source.id:
            raise CommandRejected("same_thread", "a thread cannot be merged back into itself")
        target = require_thread(view, target_id)
        if target.archived_at is not None:
            raise CommandRejected("thread_archived", f"thread {target_id} is archived")
        run = finished_run(view, source.id, run_id, "merge back")
        if run is None:
            raise CommandRejected("nothing_to_merge", f"thread {source.id} has no finished run")
        ch = Changes(view)
        now = view.now()
        base: ContextSourcePoint | None = None
        for earlier in _merges(view, source.id, target.id):
            if earlier.status == "pending":
                # Not delivered yet: the new one carries its runs too.
                base = earlier.base_point
                ch.emit(
                    ContextTransferUpserted(
                        transfer=msgspec.structs.replace(earlier, status="superseded")
                    )
                )
            elif earlier.status in _DELIVERED:
                base = earlier.source_point
        if base is None:
            fork = fork_transfer(view, source.id)
            if fork is not None and fork.source_thread_id == target.id:
                base = fork.source_point
        pt = view.get(ProviderThread, run.provider_thread_id) if run.provider_thread_id else None
        transfer = ContextTransfer(
            id=transfer_id,
            type="merge_back",
            source_thread_id=ThreadId(source.id),
            target_thread_id=ThreadId(target.id),
            source_point=ContextSourcePoint(
                thread_id=ThreadId(source.id),
                run_id=run.id,
                checkpoint_id=run.checkpoint_id,
                turn_item_id=None,
                provider_thread_ref=pt.native_thread_ref if pt else None,
                provider_turn_ref=None,
            ),
            base_point=base,
            source_provider=run.provider,
            target_provider=target.default_provider,
            status="pending",
            resolution=None,
            created_by="user",
            created_at=now,
        )
        covered = covered_runs(view, transfer)
        if not covered:
            raise CommandRejected(
                "nothing_to_merge",
                f"thread {source.id} has no runs up to {run.id} that {target.id} has not "
                "been given already",
            )
        ch.emit(ContextTransferUpserted(transfer=transfer))
        result: dict[str, Any] = {
            "transferId": transfer_id,
            "sourceThreadId": source.id,
            "targetThreadId": target.id,
            "sourceRunId": run.id,
            "coveredRunOrdinals": {"from": covered[0].ordinal, "to": covered[-1].ordinal},
        }
        return Decision(ch.drafts, result)

    return decide


def materialize(
    ch: Changes, view: StateView, run: Run, pt: ProviderThread, carrier: ProviderTurnId
) -> list[str]:
    """The pending merge-backs into ``run``'s thread become handoffs delivered with it
    (with the input of ``carrier``, its provider turn)."""
    texts = []
    pending = [
        t
        for t in view.select(ContextTransfer, thread_id=run.thread_id)
        if t.type == "merge_back" and t.status == "pending"
    ]
    for transfer in sorted(pending, key=lambda t: t.created_at):
        covered = covered_runs(view, transfer)
        if not covered:
            # Its runs were rolled back since: nothing is left to carry.
            ch.emit(
                ContextTransferUpserted(
                    transfer=msgspec.structs.replace(
                        transfer, status="consumed", consumed_at=ch.now()
                    )
                )
            )
            continue
        source = view.get(AppThread, transfer.source_thread_id)
        title = source.title if source is not None else transfer.source_thread_id
        span = RunOrdinalRange(from_=covered[0].ordinal, to=covered[-1].ordinal)
        text = (
            f"Context merged back from the forked conversation {title!r} "
            f"(its runs {span.from_}-{span.to}, after it branched off from here). "
            "Here is what was said there, from the application's own history:\n\n"
            + render(history(view, transfer.source_thread_id, run_ids=[r.id for r in covered]))
        )
        src_pts = {
            r.provider_thread_id: view.get(ProviderThread, r.provider_thread_id)
            for r in covered
            if r.provider_thread_id
        }
        record_handoff(
            ch,
            thread_id=run.thread_id,
            run=run,
            transfer_type="merge_back",
            transfer_id=transfer.id,
            strategy="delta_since_target_last_seen",
            source_point=transfer.source_point,
            source_provider=transfer.source_provider,
            target=pt,
            from_pts=[p for p in src_pts.values() if p is not None],
            covered=span,
            summary=text,
            status="resolved_portable",
            created_by="user",
            carrier=carrier,
        )
        texts.append(text)
    return texts


__all__ = ["covered_runs", "materialize", "merge_back"]
