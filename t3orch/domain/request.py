from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

from t3orch.domain.base import Wire
from t3orch.domain.vocab import RuntimeRequestKind, RuntimeRequestStatus
from t3orch.ids import NodeId, ProviderSessionId, ProviderTurnId, RuntimeRequestId, ThreadId

#: What a user can answer an approval with, the same words for every provider (the
#: V1 ``ProviderApprovalDecision`` the data model's requests keep): ``accept`` this
#: once; ``acceptForSession``, accept and remember (Codex's session cache or its
#: exec-policy amendment, Claude's permission suggestions); ``decline``, refuse and
#: let the turn go on; ``cancel``, refuse and stop the turn. An adapter offers, per
#: request, only those it can send, and maps them to the provider's words itself.
RequestDecision = Literal["accept", "acceptForSession", "decline", "cancel"]
REQUEST_DECISIONS: tuple[RequestDecision, ...] = get_args(RequestDecision)


class LiveCapability(Wire, tag_field="type", tag="live"):
    provider_session_id: ProviderSessionId


class NotResumableCapability(Wire, tag_field="type", tag="not_resumable"):
    reason: str


ResponseCapability = LiveCapability | NotResumableCapability


class RuntimeRequest(Wire):
    """A provider-originated callback that needs an app/user answer."""

    id: RuntimeRequestId
    node_id: NodeId
    thread_id: ThreadId
    provider_turn_id: ProviderTurnId | None
    native_request_ref: str | None
    kind: RuntimeRequestKind
    status: RuntimeRequestStatus
    response_capability: ResponseCapability
    created_at: str
    resolved_at: str | None = None
    #: What the provider asked, as the adapter summarised it (command, paths, questions).
    detail: dict[str, Any] = msgspec.field(default_factory=dict)
    #: The decisions this request accepts, in :data:`REQUEST_DECISIONS` words.
    available_decisions: list[str] = msgspec.field(default_factory=list)
    decision: str | None = None
