"""Turn items: the ordered, render-ready projection records of a thread (seed §Turn Item).

One union serves the whole path: an adapter describes what a provider item *is*
with a variant of it (``CommandExecution(input=...)``, its ``ItemContent``), ingest
binds that same value to the app graph (its ids, refs, status and times), and
the projector, the read models and the API carry the bound item. An adapter's
value is *unbound*: the refs every variant keeps are ``UNSET`` and left out of its
JSON, so it is its content (and ``hidden``, false unless ingest says otherwise); a
bound item has every ref, and its stored JSON is the same as before the two unions
were one.
"""

from __future__ import annotations

from typing import Any

import msgspec

from t3orch.domain.base import ProviderRef
from t3orch.domain.vocab import TurnItemStatus
from t3orch.ids import (
    CheckpointId,
    ContextHandoffId,
    ContextTransferId,
    MessageId,
    NodeId,
    PlanId,
    ProviderTurnId,
    RunId,
    RuntimeRequestId,
    ThreadId,
    TurnItemId,
)

#: The value of a ref an adapter's item does not have yet (``msgspec.UNSET``: left out
#: of its JSON). Typed as the field's type: nothing past ingest ever sees it, and
#: ``Changes.put`` refuses an item that still has one.
_UNBOUND: Any = msgspec.UNSET


class TurnItemBase(msgspec.Struct, rename="camel", kw_only=True, tag_field="type"):
    """Refs every variant keeps, so a view can jump back into the graph and the raw logs.

    Unset in an adapter's (unbound) item; set by ingest, or by the command
    that makes an orchestration item (approval, checkpoint, handoff, fork).
    """

    id: TurnItemId = _UNBOUND
    thread_id: ThreadId = _UNBOUND
    run_id: RunId | None = _UNBOUND
    node_id: NodeId | None = _UNBOUND
    provider_turn_id: ProviderTurnId | None = _UNBOUND
    native_item_ref: ProviderRef | None = _UNBOUND
    status: TurnItemStatus = _UNBOUND
    created_at: str = _UNBOUND
    updated_at: str = _UNBOUND
    #: Hidden from the default thread view (subagent/child work) but kept in the graph.
    hidden: bool = False


class UserMessage(TurnItemBase, tag="user_message"):
    #: Set by ingest (derived from the item id), like the refs.
    message_id: MessageId = _UNBOUND
    # A default, as the id before it has one: the fields' order is the stored JSON's.
    text: str = ""


class AssistantMessage(TurnItemBase, tag="assistant_message"):
    message_id: MessageId = _UNBOUND
    text: str = ""


class Reasoning(TurnItemBase, tag="reasoning"):
    text: str = ""
    summary: str = ""


class Plan(TurnItemBase, tag="plan"):
    plan_id: PlanId = _UNBOUND
    markdown: str = ""


class FileChangeEntry(msgspec.Struct, rename="camel", kw_only=True):
    path: str
    kind: str
    diff: str | None = None


class FileChange(TurnItemBase, tag="file_change"):
    file_name: str
    additions: int | None = None
    deletions: int | None = None
    diff_str: str | None = None
    old_str: str | None = None
    new_str: str | None = None
    changes: list[FileChangeEntry] = msgspec.field(default_factory=list)


class CommandExecution(TurnItemBase, tag="command_execution"):
    input: str
    output: str = ""
    exit_code: int | None = None
    cwd: str | None = None


class FileSearch(TurnItemBase, tag="file_search"):
    query: str
    path: str | None = None
    output: str = ""


class WebSearch(TurnItemBase, tag="web_search"):
    query: str
    output: str = ""


class ApprovalRequest(TurnItemBase, tag="approval_request"):
    request_id: RuntimeRequestId
    request_kind: str
    summary: str
    decision: str | None = None


class CheckpointItem(TurnItemBase, tag="checkpoint"):
    checkpoint_id: CheckpointId
    ref: str


class Compaction(TurnItemBase, tag="compaction"):
    title: str


class Handoff(TurnItemBase, tag="handoff"):
    handoff_id: ContextHandoffId
    strategy: str
    from_providers: list[str]
    to_provider: str


class Fork(TurnItemBase, tag="fork"):
    transfer_id: ContextTransferId
    source_thread_id: ThreadId
    source_run_id: RunId | None
    title: str = "Forked from conversation"


class DynamicTool(TurnItemBase, tag="dynamic_tool"):
    tool_name: str | None
    input: Any = None
    output: Any = None


class Subagent(TurnItemBase, tag="subagent"):
    """Work delegated to a provider's own subagent (Codex collab spawn, Claude Task/Agent).

    Its own items are hidden children of its node: an adapter names this item as
    their ``parent_native_item_ref``. ``child_native_thread_ref`` is the subagent's
    own native thread, when the provider has one (Codex: the spawned agent's thread id).
    """

    tool_name: str
    description: str = ""
    prompt: str | None = None
    agent_type: str | None = None
    child_native_thread_ref: str | None = None
    output: Any = None


#: What an adapter says a provider item is (``ItemStarted``/``ItemCompleted.content``):
#: the variants a provider item can be, unbound. The others are made by the core.
ItemContent = (
    UserMessage
    | AssistantMessage
    | Reasoning
    | Plan
    | FileChange
    | CommandExecution
    | FileSearch
    | WebSearch
    | Compaction
    | DynamicTool
    | Subagent
)

#: Every turn item: what a provider item can be, and the ones the core makes.
TurnItem = ItemContent | ApprovalRequest | CheckpointItem | Handoff | Fork

#: The refs ingest sets; an item with one of them unset is not bound.
BOUND_FIELDS = tuple(f for f in TurnItemBase.__struct_fields__ if f != "hidden")


def unbound_fields(item: TurnItemBase) -> list[str]:
    """The refs ``item`` lacks (``[]`` for a bound item)."""
    missing = [f for f in BOUND_FIELDS if getattr(item, f) is msgspec.UNSET]
    for own in ("message_id", "plan_id"):
        if getattr(item, own, None) is msgspec.UNSET:
            missing.append(own)
    return missing
