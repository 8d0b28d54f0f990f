"""Settling what a turn, a dead runtime or a dead daemon left open.

Three callers share these functions: the end of a provider turn, the exit of a
provider process (crash, reap, stop), and startup reconciliation. One code path
means one set of rules: items still streaming are closed, pending requests
expire and lose their live response capability, the run ends.
"""

from __future__ import annotations

from typing import Any

import msgspec

from t3orch.domain.provider import ProviderThread
from t3orch.domain.request import NotResumableCapability
from t3orch.domain.run import TokenUsage, add_usage
from t3orch.domain.vocab import (
    ATTEMPT_TERMINAL,
    NODE_TERMINAL,
    RUN_TERMINAL,
    TURN_ITEM_OPEN,
    TURN_ITEM_TERMINAL,
    TURN_TERMINAL,
)
from t3orch.events import ContextTransferUpserted
from t3orch.ids import ContextTransferId, NodeId, ProviderTurnId, TurnItemId, derived_id
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.changes import Changes
from t3orch.ingest.subagents import settle_subagent, within

_NODE_OPEN = ("pending", "running", "waiting")

_RUN_STATUS = {
    "completed": "completed",
    "interrupted": "interrupted",
    "failed": "failed",
    "cancelled": "cancelled",
}


def _why_ended(status: str, error: str | None, before: str | None) -> str | None:
    """A run's ``lastError`` once its turn ended: a failure's error; an interrupt's
    reason when the turn has one (the daemon stopped its runtime under it: the user did
    not ask, so the run says who did), else what it said before."""
    if status == "failed" or (status == "interrupted" and error is not None):
        return error
    return before


def close_turn(
    ch: Changes,
    b: SessionBinding,
    t: TurnBinding,
    status: str,
    error: str | None,
    native_turn_ref: str | None = None,
    continuing: frozenset[NodeId] = frozenset(),
    usage: TokenUsage | None = None,
) -> None:
    """End a provider turn and everything it owns, in dependency order.

    ``continuing``: subagent nodes the provider keeps running past this turn; they
    and everything under them stay open (the run still completes from its root).
    ``usage``: what the provider reported for the turn; added to the run's (a run
    with several attempts spent the tokens of each).
    """
    now = ch.now()
    if b.thread_id is not None:
        close_open_items(ch, b.thread_id, t.provider_turn_id, "interrupted", continuing)
        interrupt_subagents(ch, b.thread_id, t.provider_turn_id, continuing)
        expire_requests(
            ch,
            b.thread_id,
            t.provider_turn_id,
            "cancelled" if status == "completed" else "expired",
            f"turn ended {status}",
        )
    turn = ch.get("provider_turn", t.provider_turn_id)
    if turn is not None and turn.status not in TURN_TERMINAL:
        ch.put(
            "provider_turn",
            msgspec.structs.replace(
                turn,
                status=status,
                completed_at=now,
                error=error,
                native_turn_ref=native_turn_ref or turn.native_turn_ref,
            ),
        )
    run = ch.get("run", t.run_id)
    selected = run is not None and run.active_attempt_id == t.attempt_id
    att = ch.get("run_attempt", t.attempt_id)
    if att is not None and att.status not in ATTEMPT_TERMINAL:
        # An attempt the run moved past ends "superseded" (a steering restart), unless
        # it failed (a crash the run recovers from with a new attempt).
        moved_on = "failed" if status == "failed" else "superseded"
        ch.put(
            "run_attempt",
            msgspec.structs.replace(att, status=status if selected else moved_on, completed_at=now),
        )
    node = ch.get("node", t.root_node_id)
    if selected and node is not None and node.status not in NODE_TERMINAL:
        ch.put("node", msgspec.structs.replace(node, status=status, completed_at=now))
    # Only the root node completes a run, and only the attempt the run selected.
    if run is not None and run.status not in RUN_TERMINAL and run.active_attempt_id == t.attempt_id:
        ch.put(
            "run",
            msgspec.structs.replace(
                run,
                status=_RUN_STATUS.get(status, "failed"),
                completed_at=now,
                last_error=_why_ended(status, error, run.last_error),
                usage=add_usage(run.usage, usage),
            ),
        )
    elif run is not None and usage is not None:
        # A superseded attempt (steering restart) or a late report: the run spent it too.
        ch.put("run", msgspec.structs.replace(run, usage=add_usage(run.usage, usage)))
    if b.provider_thread_id is not None:
        pt = ch.get("provider_thread", b.provider_thread_id)
        # A completed turn was had, whatever was acknowledged.
        unsent = b.turn_unsent and t == b.turn and status != "completed"
        if pt is not None and unsent:
            give_back(ch, t.run_id, pt)
        elif pt is not None:
            ch.put(
                "provider_thread",
                msgspec.structs.replace(
                    pt,
                    status="idle" if pt.status == "active" else pt.status,
                    turn_count=pt.turn_count + 1 if turn is not None else pt.turn_count,
                    # The ref is trusted once a turn has completed on it (lessons §8 rule 2).
                    resume_ref_confirmed=pt.resume_ref_confirmed
                    or (status == "completed" and pt.native_thread_ref is not None),
                    last_run_ordinal=_ordinal(ch, t) or pt.last_run_ordinal,
                    updated_at=now,
                ),
            )
    s = ch.get("provider_session", b.provider_session_id)
    if s is not None and s.status in ("running", "waiting"):
        ch.put(
            "provider_session",
            msgspec.structs.replace(s, status="ready", updated_at=now, last_activity_at=now),
        )


def give_back(ch: Changes, run_id: str, pt: ProviderThread) -> None:
    """``pt`` never saw ``run_id``'s input (its start failed): nor what came with it.

    The handoffs delivered with the run are taken off ``pt``'s list, and ``pt`` keeps
    the last run it saw, so the next run on it is told again: the run's own
    provider handoff is recomputed then (``superseded`` now: it covers the same runs
    or fewer than the next one's), any other (regenerated, merged back, a resume
    fallback's summary) waits as ``pending`` for the next run, as a regenerated one
    does. A provider that took the input after all is told twice, which it shows;
    losing it shows nowhere.
    """
    now = ch.now()
    own = derived_id(ContextTransferId, run_id, "provider_handoff")
    kept = []
    for handoff_id in pt.handoff_ids:
        h = ch.get("context_handoff", handoff_id)
        if h is None or h.target_run_id != run_id or h.status != "ready":
            kept.append(handoff_id)
            continue
        back = "superseded" if h.transfer_id == own else "pending"
        ch.put("context_handoff", msgspec.structs.replace(h, status=back, updated_at=now))
        if h.transfer_id == own:
            transfer = ch.get("context_transfer", own)
            if transfer is not None:
                replaced = msgspec.structs.replace(transfer, status="superseded")
                ch.emit(ContextTransferUpserted(transfer=replaced))
    ch.put(
        "provider_thread",
        msgspec.structs.replace(
            pt,
            status="idle" if pt.status == "active" else pt.status,
            handoff_ids=kept,
            updated_at=now,
        ),
    )


def _ordinal(ch: Changes, t: TurnBinding) -> int | None:
    run = ch.get("run", t.run_id)
    return None if run is None else int(run.ordinal)


def close_open_items(
    ch: Changes,
    thread_id: str,
    provider_turn_id: ProviderTurnId | None,
    status: str,
    keep: frozenset[NodeId] = frozenset(),
) -> int:
    """Close items a turn left streaming (Codex never completes an interrupted message).

    Items of a subagent in ``keep`` (a child the provider still runs) stay open.
    """
    n = 0
    now = ch.now()
    for item in ch.select_by_status("turn_item", TURN_ITEM_OPEN, thread_id=thread_id):
        if provider_turn_id is not None and item.provider_turn_id != provider_turn_id:
            continue
        if keep and within(ch, item.node_id, keep):
            continue
        ch.put("turn_item", msgspec.structs.replace(item, status=status, updated_at=now))
        node = ch.get("node", item.node_id) if item.node_id else None
        if node is not None and node.status not in NODE_TERMINAL:
            closed = msgspec.structs.replace(
                node,
                status="interrupted" if status == "interrupted" else "cancelled",
                completed_at=now,
            )
            ch.put("node", closed)
            # A subagent still open when its parent's turn ends is interrupted with it.
            settle_subagent(ch, closed)
        n += 1
    return n


def interrupt_subagents(
    ch: Changes, thread_id: str, provider_turn_id: ProviderTurnId, keep: frozenset[NodeId]
) -> None:
    """Subagent nodes of a turn still open though their call returned (a Codex child
    whose spawn completed) end ``interrupted`` with it, unless the child goes on."""
    now = ch.now()
    for node in ch.select_by_status("node", _NODE_OPEN, thread_id=thread_id):
        if node.kind != "subagent" or node.provider_turn_id != provider_turn_id:
            continue
        if keep and within(ch, node.id, keep):
            continue
        closed = msgspec.structs.replace(node, status="interrupted", completed_at=now)
        ch.put("node", closed)
        settle_subagent(ch, closed)


def expire_requests(
    ch: Changes, thread_id: str, provider_turn_id: ProviderTurnId | None, status: str, reason: str
) -> int:
    """Pending requests can no longer be answered: expire them, not resumable."""
    n = 0
    now = ch.now()
    for req in ch.select_by_status("runtime_request", ("pending",), thread_id=thread_id):
        if provider_turn_id is not None and req.provider_turn_id != provider_turn_id:
            continue
        ch.put(
            "runtime_request",
            msgspec.structs.replace(
                req,
                status=status,
                resolved_at=now,
                response_capability=NotResumableCapability(reason=reason),
            ),
        )
        item = ch.get("turn_item", derived_id(TurnItemId, req.id))
        if item is not None and item.status not in TURN_ITEM_TERMINAL:
            ch.put("turn_item", msgspec.structs.replace(item, status="cancelled", updated_at=now))
        node = ch.get("node", req.node_id)
        if node is not None and node.status not in NODE_TERMINAL:
            ch.put("node", msgspec.structs.replace(node, status="cancelled", completed_at=now))
        n += 1
    return n


def release_session(
    ch: Changes,
    b: SessionBinding,
    *,
    status: str,
    reason: str,
    last_error: str | None,
    exit_description: str | None = None,
) -> None:
    """The live handle is gone: settle its turn, keep every resume ref."""
    if b.turn is not None:
        # The run says what happened; the session keeps the diagnostic detail (stderr).
        close_turn(ch, b, b.turn, "failed" if status == "error" else "interrupted", reason)
    if b.thread_id is not None:
        # Children that outlived their parent's turn die with the process.
        for ended in b.lingering:
            close_open_items(ch, b.thread_id, ended.provider_turn_id, "interrupted")
            interrupt_subagents(ch, b.thread_id, ended.provider_turn_id, frozenset())
    if b.thread_id is not None:
        expire_requests(ch, b.thread_id, None, "expired", reason)
    if b.provider_thread_id is not None:
        pt = ch.get("provider_thread", b.provider_thread_id)
        if pt is not None and pt.status in ("active", "idle"):
            # Not "closed": the native ref stays and the next piece of work resumes it.
            ch.put(
                "provider_thread",
                msgspec.structs.replace(pt, status="not_loaded", updated_at=ch.now()),
            )
    s = ch.get("provider_session", b.provider_session_id)
    if s is not None:
        changes: dict[str, Any] = {"status": status, "updated_at": ch.now(), "pid": None}
        if last_error is not None:
            changes["last_error"] = last_error
        if exit_description is not None:
            changes["exit_description"] = exit_description
        ch.put("provider_session", msgspec.structs.replace(s, **changes))
