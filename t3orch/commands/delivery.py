"""What a run's provider thread is told when the run starts (issue 7).

Called just before a run's first attempt, once its provider thread is known:

* what this provider thread missed on its own app thread (a provider switch):
  ``delta_since_target_last_seen`` for the runs since it last ran, or a
  ``full_thread_summary`` the first time; this is the run's ``contextHandoffId``;
* or the run's ``contextHandoffId`` made before its provider thread was opened (a
  resume fallback's or a settings replacement's summary, a portable fork's history),
  delivered with the run's first attempt on that provider thread;
* handoffs waiting for this provider thread: a regenerated one (``pending``
  until delivered, see ``commands.regenerate``) and pending ``merge_back``
  transfers into this app thread (``commands.mergeback``).

The texts are joined and put before the user's message. See docs/lineage.md.
"""

from __future__ import annotations

import msgspec

from t3orch.commands import mergeback
from t3orch.commands.lineage import deliver, history, record_handoff, render
from t3orch.commands.runs import next_turn_id
from t3orch.domain.context import ContextHandoff, ContextSourcePoint, RunOrdinalRange
from t3orch.domain.provider import ProviderThread
from t3orch.domain.run import Run
from t3orch.domain.turn_items import Handoff
from t3orch.domain.vocab import ContextHandoffStrategy
from t3orch.ids import ContextTransferId, ProviderTurnId, ThreadId, TurnItemId, derived_id
from t3orch.ingest.changes import Changes
from t3orch.store.interface import Decide, Decision, ReadModel, StateView

#: Between the texts of several handoffs delivered with one run (and the message).
SEPARATOR = "\n\n---\n\n"


def earlier_runs(view: StateView, run: Run) -> list[Run]:
    return sorted(
        (
            r
            for r in view.select(Run, thread_id=run.thread_id)
            if r.ordinal < run.ordinal and r.status != "rolled_back"
        ),
        key=lambda r: r.ordinal,
    )


def missed_runs(view: StateView, run: Run, pt: ProviderThread) -> list[Run]:
    """The earlier runs of the app thread that ran on other provider threads since ``pt``'s last."""
    seen = pt.last_run_ordinal
    if run.ordinal <= 1 or (seen is not None and seen >= run.ordinal - 1):
        return []  # no earlier run, or ``pt`` ran the one before: none to read
    return [
        r
        for r in earlier_runs(view, run)
        if (seen is None or r.ordinal > seen)
        and r.provider_thread_id is not None
        and r.provider_thread_id != pt.id
    ]


def delta_summary(view: StateView, thread_id: str, missed: list[Run], providers: str) -> str:
    covered = RunOrdinalRange(from_=missed[0].ordinal, to=missed[-1].ordinal)
    return (
        f"Context handoff: since your last turn here, the conversation continued "
        f"with another provider ({providers}) for runs {covered.from_}-{covered.to}. "
        "Here is what was said, from the application's own history:\n\n"
        + render(history(view, thread_id, run_ids=[r.id for r in missed]))
    )


def accumulated_delta_chars(view: StateView, pt: ProviderThread) -> int:
    """The size of the delta handoffs ``pt`` was given (superseded ones excluded)."""
    total = 0
    for handoff_id in pt.handoff_ids:
        h = view.get(ContextHandoff, handoff_id)
        if h is not None and h.strategy == "delta_since_target_last_seen" and h.status == "ready":
            total += len(h.summary_text)
    return total


def delta_overflow(view: StateView, run: Run, pt: ProviderThread, limit: int) -> str | None:
    """Why ``pt`` should not be resumed for ``run``: its deltas would pass ``limit``; or None.

    Only a provider thread that saw runs before and missed some gets a delta; the
    ones it got already count, so a long back-and-forth ends in a fresh summary.
    """
    if pt.last_run_ordinal is None:
        return None
    missed = missed_runs(view, run, pt)
    if not missed:
        return None
    providers = _providers(view, missed)
    size = len(delta_summary(view, run.thread_id, missed, providers))
    before = accumulated_delta_chars(view, pt)
    if before + size <= limit:
        return None
    return (
        f"the delta handoffs of provider thread {pt.id} would reach {before + size} characters "
        f"({before} given before, {size} now), above the configured {limit}"
    )


def _providers(view: StateView, runs: list[Run]) -> str:
    kinds = set()
    for r in runs:
        src = view.get(ProviderThread, r.provider_thread_id) if r.provider_thread_id else None
        if src is not None:
            kinds.add(src.provider)
    return ", ".join(sorted(kinds)) or "another provider"


def _missed_handoff(
    ch: Changes, view: StateView, run: Run, pt: ProviderThread, carrier: ProviderTurnId
) -> str | None:
    missed = missed_runs(view, run, pt)
    if not missed:
        return None
    earlier = earlier_runs(view, run)
    sources: dict[str, ProviderThread] = {}
    for r in missed:
        src = view.get(ProviderThread, r.provider_thread_id) if r.provider_thread_id else None
        if src is not None:
            sources[src.id] = src
    from_pts = list(sources.values())
    providers = _providers(view, missed)
    last = missed[-1]
    point = ContextSourcePoint(
        thread_id=ThreadId(run.thread_id),
        run_id=last.id,
        checkpoint_id=last.checkpoint_id,
        turn_item_id=None,
        provider_thread_ref=sources[last.provider_thread_id].native_thread_ref
        if last.provider_thread_id in sources
        else None,
        provider_turn_ref=None,
    )
    if pt.last_run_ordinal is None:
        strategy: ContextHandoffStrategy = "full_thread_summary"
        covered = RunOrdinalRange(from_=1, to=earlier[-1].ordinal)
        _supersede_covered(ch, run, pt, covered)
        # A replacement, or a conversation started afresh, follows one of its own kind.
        where = (
            f"in an earlier {pt.provider} conversation"
            if {src.provider for src in from_pts} == {pt.provider}
            else f"with another provider ({providers})"
        )
        summary = (
            f"Context handoff: this conversation was held {where} until now. Here is the "
            "conversation so far, from the application's own history:\n\n"
            + render(history(view, run.thread_id, up_to_ordinal=earlier[-1].ordinal))
        )
    else:
        strategy = "delta_since_target_last_seen"
        covered = RunOrdinalRange(from_=missed[0].ordinal, to=missed[-1].ordinal)
        summary = delta_summary(view, run.thread_id, missed, providers)
    record_handoff(
        ch,
        thread_id=run.thread_id,
        run=run,
        transfer_type="provider_handoff",
        transfer_id=derived_id(ContextTransferId, run.id, "provider_handoff"),
        strategy=strategy,
        source_point=point,
        source_provider=last.provider,
        target=pt,
        from_pts=from_pts,
        covered=covered,
        summary=summary,
        status="resolved_portable",
        carrier=carrier,
    )
    return summary


def _supersede_covered(ch: Changes, run: Run, pt: ProviderThread, covered: RunOrdinalRange) -> None:
    """The system's summaries of this thread's history waiting for ``pt`` that the full
    summary about to be made for ``run`` (``covered``) tells all of: ``superseded``.

    One is waiting when a replacement's first turn never reached it (``give_back``):
    the replacement has still seen no run, so the next run on it gets a full summary of
    everything before it, the given-back one's runs and the failed run's own message
    included. Sending both told the provider the history twice. A fork's history or a
    merged-back handoff is not this thread's history up to a run, so it still goes.
    """
    now = ch.now()
    for h in ch.select("context_handoff", thread_id=run.thread_id):
        if h.status != "pending" or h.to_provider_thread_id != pt.id:
            continue
        if h.strategy != "full_thread_summary" or h.created_by_provider is not None:
            continue
        if h.covered_run_ordinals.to > covered.to:
            continue
        transfer = ch.get("context_transfer", h.transfer_id)
        if transfer is None or transfer.type != "provider_handoff":
            continue
        ch.put("context_handoff", msgspec.structs.replace(h, status="superseded", updated_at=now))
        ch.put("context_transfer", msgspec.structs.replace(transfer, status="superseded"))


def _from_providers(view: StateView, h: ContextHandoff) -> list[str]:
    return sorted(
        {
            p.provider
            for p in (view.get(ProviderThread, i) for i in h.from_provider_thread_ids)
            if p is not None
        }
    )


def _undelivered_own(
    ch: Changes, view: StateView, run: Run, pt: ProviderThread, carrier: ProviderTurnId
) -> str | None:
    """The run's own handoff, made for ``pt`` before its first attempt (a resume fallback's
    or a settings replacement's summary, a portable fork's history) and not delivered on
    it yet: it goes with this attempt, which delivers it (``pt``'s list), so never twice."""
    h = view.get(ContextHandoff, run.context_handoff_id) if run.context_handoff_id else None
    if h is None or h.status != "ready" or h.to_provider_thread_id != pt.id:
        return None
    if h.target_run_id != run.id or h.id in pt.handoff_ids:
        return None
    deliver(ch, h, run, pt, from_providers=_from_providers(view, h), carrier=carrier)
    return h.summary_text


def _waiting(
    ch: Changes, view: StateView, run: Run, pt: ProviderThread, carrier: ProviderTurnId
) -> list[str]:
    """Regenerated handoffs for ``pt`` not delivered yet: they go with this run."""
    texts = []
    waiting = [
        h
        for h in ch.select("context_handoff", thread_id=run.thread_id)
        if h.status == "pending" and h.to_provider_thread_id == pt.id
    ]
    for h in sorted(waiting, key=lambda h: h.created_at):
        assert isinstance(h, ContextHandoff)
        now = ch.now()
        ready = msgspec.structs.replace(h, status="ready", target_run_id=run.id, updated_at=now)
        ch.put("context_handoff", ready)
        deliver(ch, ready, run, pt, from_providers=_from_providers(view, h), carrier=carrier)
        texts.append(h.summary_text)
    return texts


def forget_conversation(provider_thread_id: str) -> Decide:
    """The provider thread's native conversation is started afresh: the new one was told
    nothing.

    A runtime starts a provider thread anew when no turn ever completed on its stored
    conversation (the ref is not trusted, so it is not resumed): the provider's first
    turn died mid-way, say. Whatever that conversation was told (a switch's or a resume
    fallback's summary, the runs it saw) went with it. The thread's list and its last
    run go, so the next run there is told the history again (a full summary,
    ``_missed_handoff``) and a run's own handoff goes with its next attempt
    (``_undelivered_own``). The handoffs stay ``ready``: they were delivered, to the
    conversation that is gone.
    """

    def decide(view: StateView) -> Decision:
        pt = view.get(ProviderThread, provider_thread_id)
        if pt is None or (pt.last_run_ordinal is None and not pt.handoff_ids):
            return Decision([], None)
        ch = Changes(view)
        forgotten = msgspec.structs.replace(
            pt, last_run_ordinal=None, handoff_ids=[], updated_at=ch.now()
        )
        ch.put("provider_thread", forgotten)
        return Decision(ch.drafts, None)

    return decide


def prepare_handoff(
    run_id: str, provider_thread_id: str, turn_id: ProviderTurnId | None = None
) -> Decide:
    """Materialize what ``run_id``'s provider thread is to be told; the text, or None.

    A run that already has its handoff (a resume fallback, a portable fork) gets no
    second one of its own: that one goes with the run's first attempt on its provider
    thread (it is durable, so a daemon that dies before the turn is sent loses nothing),
    and is delivered then. Waiting regenerated and merge-back handoffs still go.

    What is delivered goes with the input of ``turn_id`` (default: the turn of the run's
    next attempt, begun after this in the same batch): each handoff's item names it, so
    a turn the next daemon sends carries what was prepared for it (``carried_by``).
    """

    def decide(view: StateView) -> Decision:
        run = view.get(Run, run_id)
        pt = view.get(ProviderThread, provider_thread_id)
        if run is None or pt is None:
            return Decision([], None)
        carrier = turn_id if turn_id is not None else next_turn_id(view, run.id, pt.id)
        ch = Changes(view)
        texts: list[str] = []
        if run.context_handoff_id is None:
            own = _missed_handoff(ch, view, run, pt, carrier)
        else:
            own = _undelivered_own(ch, view, run, pt, carrier)
        if own is not None:
            texts.append(own)
        texts.extend(_waiting(ch, view, run, pt, carrier))
        texts.extend(mergeback.materialize(ch, view, run, pt, carrier))
        if not texts:
            return Decision([], None)
        return Decision(ch.drafts, SEPARATOR.join(texts))

    return decide


def carried_by(
    view: StateView | ReadModel, provider_thread_id: str, run_id: str, turn_id: str
) -> list[ContextHandoff] | None:
    """The run's handoffs delivered to that provider thread with ``turn_id``'s input, in
    the order they were; None when none of the run's handoffs there names its turn (items
    written before they did)."""
    pt = view.get(ProviderThread, provider_thread_id)
    if pt is None:
        return []
    carried, named = [], False
    for handoff_id in pt.handoff_ids:
        handoff = view.get(ContextHandoff, handoff_id)
        item = view.get(Handoff, derived_id(TurnItemId, handoff_id))
        if handoff is None or handoff.target_run_id != run_id or item is None:
            continue
        named = named or item.provider_turn_id is not None
        if item.provider_turn_id == turn_id:
            carried.append(handoff)
    return carried if named else None


__all__ = [
    "SEPARATOR",
    "accumulated_delta_chars",
    "carried_by",
    "delta_overflow",
    "delta_summary",
    "forget_conversation",
    "missed_runs",
    "prepare_handoff",
]
