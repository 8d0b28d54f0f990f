"""The params of every API method: camelCase on the wire, unknown fields refused."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from t3orch.domain.vocab import InteractionMode, ProviderKind, RuntimeMode

CommandIdField = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
#: SQLite integers are 64-bit: a larger one is refused here (-32602), not by the store.
INT64_MAX = 2**63 - 1
Cursor = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
Position = Annotated[int, msgspec.Meta(ge=-INT64_MAX, le=INT64_MAX)]
Topic = Literal[
    "threadShell", "threadDetail", "executionGraph", "providerSessions", "pendingRequests"
]
#: Topics about one thread: they need a ``threadId``; the others refuse one.
THREAD_TOPICS: frozenset[str] = frozenset({"threadDetail", "executionGraph"})


class Params(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    pass


def _no_nul(**fields: str | None) -> None:
    """Settings that end up in a provider's argv or cwd: the OS refuses a NUL byte there.

    Raised as ValueError, msgspec makes it a ValidationError (-32602) naming the field.
    """
    for name, value in fields.items():
        if value is not None and "\x00" in value:
            raise ValueError(f"{name} must not contain a NUL byte")


class ThreadCreate(Params):
    command_id: CommandIdField
    provider: ProviderKind
    cwd: str
    title: str = "New thread"
    model: str | None = None
    runtime_mode: RuntimeMode = "approval-required"
    interaction_mode: InteractionMode = "default"
    project_id: str | None = None

    def __post_init__(self) -> None:
        _no_nul(cwd=self.cwd, model=self.model)


class ThreadArchive(Params):
    command_id: CommandIdField
    thread_id: str


class ThreadUnarchive(Params):
    command_id: CommandIdField
    thread_id: str


class ThreadDelete(Params):
    command_id: CommandIdField
    thread_id: str


class RunSend(Params):
    command_id: CommandIdField
    thread_id: str
    text: str
    mode: Literal["queue", "steer"] = "queue"


class RunInterrupt(Params):
    command_id: CommandIdField
    run_id: str


class RequestRespond(Params):
    command_id: CommandIdField
    request_id: str
    decision: str
    message: str | None = None
    answers: dict[str, str] | None = None


class ThreadSwitchProvider(Params):
    command_id: CommandIdField
    thread_id: str
    provider: ProviderKind


class ThreadConfigure(Params):
    command_id: CommandIdField
    thread_id: str
    #: Each one given replaces the thread's setting for its next runs.
    cwd: str | None = None
    model: str | None = None
    runtime_mode: RuntimeMode | None = None

    def __post_init__(self) -> None:
        _no_nul(cwd=self.cwd, model=self.model)


class ThreadFork(Params):
    command_id: CommandIdField
    thread_id: str
    #: The source point: this run (finished) and everything before it; default the latest.
    run_id: str | None = None
    title: str | None = None
    provider: ProviderKind | None = None
    #: A git worktree of its own (beside the repository) instead of the parent's cwd.
    worktree: bool = False


class ThreadMergeBack(Params):
    command_id: CommandIdField
    #: The fork whose runs go back.
    thread_id: str
    #: Up to this run (finished); default its latest.
    run_id: str | None = None
    #: Default: the thread it was forked from.
    target_thread_id: str | None = None


class HandoffRegenerate(Params):
    command_id: CommandIdField
    handoff_id: str
    #: Default: the handoff's own strategy.
    strategy: Literal["delta_since_target_last_seen", "full_thread_summary"] | None = None


class CheckpointList(Params):
    thread_id: str


class CheckpointDiff(Params):
    from_checkpoint_id: str
    to_checkpoint_id: str


class ThreadRollback(Params):
    command_id: CommandIdField
    thread_id: str
    checkpoint_id: str
    #: Only say what it would change (files written back and deleted, runs rolled back).
    dry_run: bool = False
    #: Confirms rolling back a work tree other threads use too (a fork's, say).
    allow_shared_work_tree: bool = False
    #: The ``workTree`` of the dry run the user confirmed: refused if files changed since.
    expect_work_tree: str | None = None


class DaemonStatus(Params):
    pass


class WebLogin(Params):
    pass


class EventsRead(Params):
    after_sequence: Cursor = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=5000)] = 500


class ViewRead(Params):
    topic: Topic
    thread_id: str | None = None
    #: threadDetail pages: the window of turn items before this position.
    before_position: Position | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 200


class Subscribe(Params):
    topic: Topic
    thread_id: str | None = None
    #: Replay stored events after this sequence instead of sending a snapshot.
    after_sequence: Cursor | None = None


class Unsubscribe(Params):
    subscription: str
