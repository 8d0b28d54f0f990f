from __future__ import annotations

from typing import Literal

from t3orch.domain.base import Wire
from t3orch.domain.vocab import InteractionMode, ProviderKind, RuntimeMode
from t3orch.ids import DaemonId, ProjectId, ProviderThreadId, ThreadId


class ModelSelection(Wire):
    provider: ProviderKind
    model: str | None = None


class AppThreadLineage(Wire):
    parent_thread_id: ThreadId | None
    relationship_to_parent: Literal["fork", "subagent"] | None
    root_thread_id: ThreadId


class AppThread(Wire):
    """The stable user-facing conversation."""

    id: ThreadId
    project_id: ProjectId
    title: str
    default_provider: ProviderKind
    model_selection: ModelSelection
    runtime_mode: RuntimeMode
    interaction_mode: InteractionMode
    cwd: str
    branch: str | None
    worktree_path: str | None
    active_provider_thread_id: ProviderThreadId | None
    lineage: AppThreadLineage | None
    created_at: str
    updated_at: str
    archived_at: str | None = None
    deleted_at: str | None = None
    #: The daemon that created it, whose runtimes run it (the fleet routes its
    #: commands there); None on rows from before owners were recorded: the local one.
    owner_daemon_id: DaemonId | None = None
