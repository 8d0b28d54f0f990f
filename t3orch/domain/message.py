from __future__ import annotations

from t3orch.domain.base import Wire
from t3orch.domain.vocab import MessageRole
from t3orch.ids import MessageId, NodeId, RunId, ThreadId


class Attachment(Wire):
    name: str
    mime_type: str
    path: str | None = None


class ConversationMessage(Wire):
    """A message of the conversation projection; derived from turn items."""

    id: MessageId
    thread_id: ThreadId
    run_id: RunId | None
    node_id: NodeId | None
    role: MessageRole
    text: str
    attachments: list[Attachment]
    streaming: bool
    created_at: str
    updated_at: str
