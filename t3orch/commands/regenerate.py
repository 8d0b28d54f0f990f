"""Regenerating a context handoff: a new record built from today's history supersedes it.

The provider that received the old text keeps it in its own conversation (nothing
can take it back), so the regenerated handoff is ``pending`` until it is
delivered: it goes before the next run started on the same provider thread
(``commands.delivery``), as a correction. The old handoff becomes ``superseded``
and its transfer's resolution points at the new one. Use: a handoff built
before a rollback, or one truncated by the summary bound, or a delta the
provider misread (regenerate it as a ``full_thread_summary``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from t3orch.commands.lineage import history, render
from t3orch.domain.context import (
    ContextHandoff,
    ContextTransfer,
    ContextTransferResolution,
    DeltaContextResolution,
    PortableContextResolution,
    RunOrdinalRange,
)
from t3orch.domain.provider import ProviderThread
from t3orch.domain.run import Run
from t3orch.domain.vocab import ContextHandoffStrategy
from t3orch.ids import ContextHandoffId, derived_id
from t3orch.ingest.changes import Changes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView

#: The strategies a handoff can be regenerated as (the others are not built by t3orch).
REGENERABLE: tuple[ContextHandoffStrategy, ...] = (
    "delta_since_target_last_seen",
    "full_thread_summary",
)
_LIVE_PT = ("not_loaded", "idle", "active")


def _require_handoff(view: StateView, handoff_id: str) -> ContextHandoff:
    h = view.get(ContextHandoff, handoff_id)
    if h is None:
        raise CommandRejected("unknown_handoff", f"no context handoff {handoff_id!r}")
    assert isinstance(h, ContextHandoff)
    if h.status == "superseded":
        newer = [
            x.id
            for x in view.select(ContextHandoff, thread_id=h.thread_id)
            if x.transfer_id == h.transfer_id and x.status != "superseded"
        ]
        raise CommandRejected(
            "handoff_superseded",
            f"handoff {handoff_id} is already superseded"
            + (f" by {newer[-1]}; regenerate that one" if newer else ""),
        )
    if h.status == "pending":
        raise CommandRejected(
            "handoff_pending", f"handoff {handoff_id} has not been delivered yet; nothing to redo"
        )
    return h


def _text(view: StateView, h: ContextHandoff, strategy: str, covered: RunOrdinalRange) -> str:
    # A fork's or a merge-back's handoff covers the runs of the thread it came from.
    transfer = view.get(ContextTransfer, h.transfer_id)
    about = (
        transfer.source_thread_id
        if transfer is not None and transfer.type in ("fork", "merge_back")
        else h.thread_id
    )
    runs = [
        r
        for r in view.select(Run, thread_id=about)
        if covered.from_ <= r.ordinal <= covered.to and r.status != "rolled_back"
    ]
    if strategy == "full_thread_summary":
        body = render(history(view, about, up_to_ordinal=covered.to))
        what = f"the conversation up to run {covered.to}"
    else:
        body = render(history(view, about, run_ids=[r.id for r in runs]))
        what = f"runs {covered.from_}-{covered.to}"
    return (
        f"Context handoff (regenerated; it replaces the handoff {h.id} you were given "
        f"before): {what}, from the application's own history as it is now:\n\n" + body
    )


def regenerate_handoff(handoff_id: str, strategy: ContextHandoffStrategy | None = None) -> Decide:
    """A new handoff for the same transfer and provider thread; the old one ``superseded``."""

    def decide(view: StateView) -> Decision:
        h = _require_handoff(view, handoff_id)
        kind = strategy or h.strategy
        if kind not in REGENERABLE:
            raise CommandRejected(
                "bad_strategy",
                f"strategy {kind!r} cannot be regenerated; use one of {', '.join(REGENERABLE)}",
            )
        pt = view.get(ProviderThread, h.to_provider_thread_id)
        if pt is None or pt.status not in _LIVE_PT:
            state = "gone" if pt is None else pt.status
            raise CommandRejected(
                "provider_thread_closed",
                f"handoff {handoff_id} was for provider thread {h.to_provider_thread_id}, "
                f"which is {state}: its next run starts a new one with a fresh summary anyway",
            )
        run = view.get(Run, h.target_run_id)
        if run is None or run.status == "rolled_back":
            raise CommandRejected(
                "run_rolled_back",
                f"handoff {handoff_id} was for run {h.target_run_id}, which was rolled back",
            )
        if kind == "full_thread_summary":
            covered = RunOrdinalRange(from_=1, to=h.covered_run_ordinals.to)
        else:
            covered = h.covered_run_ordinals
        ch = Changes(view)
        now = view.now()
        new_id = derived_id(ContextHandoffId, h.id, "regenerated")
        new = ContextHandoff(
            id=new_id,
            transfer_id=h.transfer_id,
            thread_id=h.thread_id,
            target_run_id=h.target_run_id,
            from_provider_thread_ids=h.from_provider_thread_ids,
            to_provider_thread_id=h.to_provider_thread_id,
            covered_run_ordinals=covered,
            strategy=kind,
            status="pending",
            summary_message_id=None,
            summary_text=_text(view, h, kind, covered),
            created_by_provider=None,
            created_at=now,
            updated_at=now,
        )
        ch.put("context_handoff", new)
        ch.put("context_handoff", msgspec.structs.replace(h, status="superseded", updated_at=now))
        transfer = view.get(ContextTransfer, h.transfer_id)
        if transfer is not None:
            resolution: ContextTransferResolution = (
                DeltaContextResolution(context_handoff_id=new_id)
                if kind == "delta_since_target_last_seen"
                else PortableContextResolution(context_handoff_id=new_id)
            )
            ch.put("context_transfer", msgspec.structs.replace(transfer, resolution=resolution))
        result: dict[str, Any] = {
            "handoffId": new_id,
            "supersedes": h.id,
            "strategy": kind,
            "coveredRunOrdinals": {"from": covered.from_, "to": covered.to},
            "providerThreadId": h.to_provider_thread_id,
            "status": "pending",
        }
        return Decision(ch.drafts, result)

    return decide


__all__ = ["REGENERABLE", "regenerate_handoff"]
