from __future__ import annotations

import msgspec

from t3orch.domain.request import REQUEST_DECISIONS, LiveCapability, RuntimeRequest
from t3orch.ingest.changes import Changes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView

DECISIONS = frozenset(REQUEST_DECISIONS)


def claim_request(request_id: str, decision: str) -> Decide:
    """Record the user's decision on a pending request: exactly one answer wins.

    The decision is written while the request is still ``pending``; the provider
    resolving it (``serverRequest/resolved``, the tool result) moves it on. A second
    answer is ``request_already_answered`` (before or after the provider resolved
    it); a request that ended unanswered (expired with its run or runtime,
    cancelled) is ``request_not_pending``; one without a live runtime is
    ``request_not_resumable``; a decision the request does not offer is
    ``decision_not_offered``.
    """
    if decision not in DECISIONS:
        raise CommandRejected(
            "invalid_decision", f"decision must be one of {sorted(DECISIONS)}, got {decision!r}"
        )

    def decide(view: StateView) -> Decision:
        req = view.get(RuntimeRequest, request_id)
        if req is None:
            raise CommandRejected("unknown_request", f"no runtime request {request_id!r}")
        # An answer already recorded decides first, whatever the provider did with it
        # since: the loser of a race hears "answered" even when the provider resolved
        # the request (or its runtime died) before the losing answer was decided.
        if req.decision is not None:
            since = "" if req.status == "pending" else f"; it is now {req.status}"
            raise CommandRejected(
                "request_already_answered",
                f"request {request_id} was already answered ({req.decision}){since}",
            )
        if req.status != "pending":
            raise CommandRejected(
                "request_not_pending",
                f"request {request_id} is {req.status}; it cannot be answered",
            )
        if not isinstance(req.response_capability, LiveCapability):
            raise CommandRejected(
                "request_not_resumable",
                f"request {request_id} has no live runtime: {req.response_capability.reason}",
            )
        # A request stored before adapters listed their decisions offers none:
        # then any word of the vocabulary goes (the adapter maps or refuses it).
        if req.available_decisions and decision not in req.available_decisions:
            raise CommandRejected(
                "decision_not_offered",
                f"request {request_id} offers {'/'.join(req.available_decisions)}, "
                f"not {decision!r}",
            )
        ch = Changes(view)
        ch.put("runtime_request", msgspec.structs.replace(req, decision=decision))
        return Decision(
            ch.drafts,
            {
                "requestId": req.id,
                "decision": decision,
                "providerSessionId": req.response_capability.provider_session_id,
                "nativeRequestRef": req.native_request_ref,
            },
        )

    return decide
