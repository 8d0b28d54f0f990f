"""Startup reconciliation: settle everything a dead daemon left in flight.

Runs once, before any client is served, as one submission (one transaction):
after it, nothing claims to be running that no live process backs.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from t3orch.domain.provider import ProviderSession, ProviderThread
from t3orch.domain.request import NotResumableCapability, RuntimeRequest
from t3orch.domain.turn_items import TurnItemBase
from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import RuntimeReconciled
from t3orch.ingest.changes import Changes
from t3orch.store.interface import Decide, Decision, StateView
from t3orch.store.kinds import entity_of

_LIVE = {
    "run": (("queued", "starting", "running", "waiting"), "interrupted"),
    "run_attempt": (("pending", "running"), "interrupted"),
    "node": (("pending", "running", "waiting"), "interrupted"),
    "provider_turn": (("pending", "running"), "interrupted"),
}


def reconcile(reason: str = "daemon_restart", swept: Mapping[str, int] | None = None) -> Decide:
    """``swept``: what the orphan sweep before it did, recorded with the settling counts."""

    def decide(view: StateView) -> Decision:
        ch = Changes(view)
        now = view.now()
        counts: dict[str, int] = {}
        for kind, (live, settled) in _LIVE.items():
            rows = view.select_by_status(entity_of(kind), live)
            for row in rows:
                fields: dict[str, object] = {"status": settled}
                if hasattr(row, "completed_at"):
                    fields["completed_at"] = now
                if kind == "run":
                    # The reason tells a run the daemon lost from one the user interrupted.
                    fields["last_error"] = reason
                elif kind == "provider_turn":
                    fields["error"] = reason
                ch.put(kind, msgspec.structs.replace(row, **fields))
            counts[kind] = len(rows)
        items = view.select_by_status(TurnItemBase, ("pending", "running", "waiting"))
        for item in items:
            if item.status not in TURN_ITEM_TERMINAL:
                ch.put(
                    "turn_item", msgspec.structs.replace(item, status="interrupted", updated_at=now)
                )
        counts["turn_item"] = len(items)
        requests = view.select_by_status(RuntimeRequest, ("pending",))
        for req in requests:
            ch.put(
                "runtime_request",
                msgspec.structs.replace(
                    req,
                    status="expired",
                    resolved_at=now,
                    response_capability=NotResumableCapability(reason=f"runtime lost: {reason}"),
                ),
            )
        counts["runtime_request"] = len(requests)
        sessions = view.select_by_status(
            ProviderSession, ("starting", "ready", "running", "waiting")
        )
        for s in sessions:
            ch.put(
                "provider_session",
                msgspec.structs.replace(
                    s, status="stopped", updated_at=now, exit_description=f"released: {reason}"
                ),
            )
        counts["provider_session"] = len(sessions)
        threads = view.select_by_status(ProviderThread, ("active", "idle"))
        for pt in threads:
            # The native ref is kept: the next piece of work resumes it.
            ch.put(
                "provider_thread", msgspec.structs.replace(pt, status="not_loaded", updated_at=now)
            )
        counts["provider_thread"] = len(threads)
        counts.update(swept or {})
        ch.emit(RuntimeReconciled(reason=reason, counts=counts))
        return Decision(ch.drafts, counts)

    return decide
