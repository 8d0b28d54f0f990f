from __future__ import annotations

from typing import Any, Literal

from t3orch.domain.base import Wire
from t3orch.domain.vocab import ProviderKind
from t3orch.ids import ProviderSessionId, RawEventId


class RawProviderEvent(Wire):
    """One raw frame, as evidence: it lives in rotating diagnostics files, not the log."""

    id: RawEventId
    provider: ProviderKind
    provider_session_id: ProviderSessionId
    sequence: int
    direction: Literal["incoming", "outgoing"]
    message_kind: Literal["request", "response", "notification", "error"]
    method: str | None
    json_rpc_id: str | int | None
    payload: Any
    observed_at: str
