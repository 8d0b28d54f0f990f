"""Startup reconciliation: settle everything a dead daemon left in flight.

Runs once, before any client is served, as one submission (one transaction):
after it, nothing claims to be running that no live process backs. In a fleet
(several daemons on one log) a daemon settles only what it owned: another
daemon's runs are backed by that daemon's processes, live or not, and are
settled by it when it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import msgspec

from t3orch.domain.node import ExecutionNode
from t3orch.domain.provider import ProviderSession, ProviderThread
from t3orch.domain.request import NotResumableCapability, RuntimeRequest
from t3orch.domain.thread import AppThread
from t3orch.domain.turn_items import TurnItemBase
from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import RuntimeReconciled
from t3orch.ids import DaemonId
from t3orch.ingest.changes import Changes
from t3orch.store.interface import Decide, Decision, StateView
from t3orch.store.kinds import entity_of

_LIVE = {
    "run": (("queued", "starting", "running", "waiting"), "interrupted"),
    "run_attempt": (("pending", "running"), "interrupted"),
    "node": (("pending", "running", "waiting"), "interrupted"),
    "provider_turn": (("pending", "running"), "interrupted"),
}


def _ours(view: StateView, me: DaemonId | None) -> Callable[[str, Any], bool]:
    """Whether a row in flight is ``me``'s to settle: not of another daemon's thread or
    session (a row without an owner is the local daemon's; ``me`` None: every row)."""
    if me is None:
        return lambda kind, row: True
    threads = {t.id for t in view.select(AppThread) if t.owner_daemon_id not in (None, me)}
    sessions = {s.id for s in view.select(ProviderSession) if s.owner_daemon_id not in (None, me)}

    def ours(kind: str, row: Any) -> bool:
        match kind:
            case "provider_session":
                return row.id not in sessions
            case "provider_thread":
                return row.app_thread_id not in threads and row.provider_session_id not in sessions
            case "provider_turn":
                node = view.get(ExecutionNode, row.node_id)
                return node is None or node.thread_id not in threads
        return getattr(row, "thread_id", None) not in threads

    return ours


@attrs.frozen
class Held:
    """What a live holder keeps running (issue 20): its sessions and their app threads.

    Their rows stay as they are: the daemon reattaches to them instead of settling.
    """

    sessions: frozenset[str] = frozenset()
    threads: frozenset[str] = frozenset()

    def keeps(self, view: StateView, kind: str, row: Any) -> bool:
        if not self.threads:
            return False
        if kind == "provider_session":
            return row.id in self.sessions
        if kind == "provider_thread":
            return row.app_thread_id in self.threads
        if kind == "provider_turn":
            pt = view.get(ProviderThread, row.provider_thread_id)
            return pt is not None and pt.app_thread_id in self.threads
        return getattr(row, "thread_id", None) in self.threads


#: No holder outlived the previous daemon (or none is used).
NOTHING_HELD = Held()


def reconcile(
    reason: str = "daemon_restart",
    swept: Mapping[str, int] | None = None,
    owner: DaemonId | None = None,
    held: Held = NOTHING_HELD,
) -> Decide:
    """``swept``: what the orphan sweep before it did, recorded with the settling counts;
    ``owner``: the daemon settling (only its own rows), None for every row;
    ``held``: what live holders keep running, left live (``counts["held_sessions"]``)."""

    def decide(view: StateView) -> Decision:
        ch = Changes(view)
        now = view.now()
        ours = _ours(view, owner)
        counts: dict[str, int] = {}
        for kind, (live, settled) in _LIVE.items():
            rows = [
                r
                for r in view.select_by_status(entity_of(kind), live)
                if ours(kind, r) and not held.keeps(view, kind, r)
            ]
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
        items = [
            i
            for i in view.select_by_status(TurnItemBase, ("pending", "running", "waiting"))
            if ours("turn_item", i) and not held.keeps(view, "turn_item", i)
        ]
        for item in items:
            if item.status not in TURN_ITEM_TERMINAL:
                ch.put(
                    "turn_item", msgspec.structs.replace(item, status="interrupted", updated_at=now)
                )
        counts["turn_item"] = len(items)
        requests = [
            r
            for r in view.select_by_status(RuntimeRequest, ("pending",))
            if ours("runtime_request", r) and not held.keeps(view, "runtime_request", r)
        ]
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
        sessions = [
            s
            for s in view.select_by_status(
                ProviderSession, ("starting", "ready", "running", "waiting")
            )
            if ours("provider_session", s) and not held.keeps(view, "provider_session", s)
        ]
        for s in sessions:
            ch.put(
                "provider_session",
                msgspec.structs.replace(
                    s, status="stopped", updated_at=now, exit_description=f"released: {reason}"
                ),
            )
        counts["provider_session"] = len(sessions)
        threads = [
            t
            for t in view.select_by_status(ProviderThread, ("active", "idle"))
            if ours("provider_thread", t) and not held.keeps(view, "provider_thread", t)
        ]
        for pt in threads:
            # The native ref is kept: the next piece of work resumes it.
            ch.put(
                "provider_thread", msgspec.structs.replace(pt, status="not_loaded", updated_at=now)
            )
        counts["provider_thread"] = len(threads)
        counts.update(swept or {})
        if held.sessions:
            counts["held_sessions"] = len(held.sessions)
        ch.emit(RuntimeReconciled(reason=reason, counts=counts))
        return Decision(ch.drafts, counts)

    return decide
