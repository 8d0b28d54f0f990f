from __future__ import annotations

from t3orch.domain.base import ProviderRef, Wire
from t3orch.domain.vocab import (
    ProviderKind,
    ProviderSessionStatus,
    ProviderThreadStatus,
    ProviderTurnStatus,
)
from t3orch.ids import (
    ContextHandoffId,
    DaemonId,
    NodeId,
    ProviderSessionId,
    ProviderThreadId,
    ProviderTurnId,
    RunAttemptId,
    ThreadId,
)


class ProviderCapabilities(Wire):
    """What a provider can do natively; missing capabilities are explicit."""

    version: int = 1
    native_turn_ids: bool = False
    steer: bool = False
    fork: bool = False
    rollback: bool = False
    multiple_threads_per_process: bool = False


class ProcessOwner(Wire):
    """The daemon that spawned a provider process, and the state dir it served.

    The orphan sweep kills a recorded process only when this daemon is gone:
    ``daemon_pid`` with ``daemon_started_at`` (the kernel's start time) names one
    process forever. ``state_dir_id`` is the state dir's ``device:inode``, which a
    copy of the directory does not share: a live owner with another id means the
    dir being opened is a copy of that daemon's (docs/decisions.md).
    """

    daemon_pid: int
    daemon_started_at: float
    state_dir: str
    state_dir_id: str


class ProviderSession(Wire):
    """Durable metadata of a live-or-recoverable provider runtime (not the handle)."""

    id: ProviderSessionId
    provider: ProviderKind
    status: ProviderSessionStatus
    cwd: str
    model: str | None
    capabilities: ProviderCapabilities
    created_at: str
    updated_at: str
    last_error: str | None = None
    pid: int | None = None
    process_started_at: float | None = None
    last_activity_at: str | None = None
    exit_description: str | None = None
    #: Who spawned ``pid``; None on rows from before owners were recorded.
    owner: ProcessOwner | None = None
    #: The fleet daemon that runs it: only that daemon settles it after a crash.
    #: None on rows from before owners were recorded: the local daemon's.
    owner_daemon_id: DaemonId | None = None
    #: The holder ``pid`` runs under, when it outlives the daemon (``daemon.reattach_grace_s``).
    holder: HolderRef | None = None


class HolderRef(Wire):
    """The holder process a runtime's provider runs under (``supervisor/holder``): named
    forever by its pid and start time, found by its id under ``<state-dir>/held/``."""

    holder_id: str
    pid: int
    started_at: float


class JournalPosition(Wire):
    """A point in a held runtime's journal: the offset of a record of holder ``holder_id``."""

    holder_id: str
    offset: int


class JournalCommitted(Wire):
    """How far the log holds a held runtime's journal (the ``journal`` row, per session)."""

    holder_id: str
    offset: int


class ProviderThreadForkSource(Wire):
    provider_thread_id: ProviderThreadId
    native_thread_ref: str | None
    native_turn_ref: str | None = None


class ProviderThread(Wire):
    """A provider-native conversation handle, with the resume refs."""

    id: ProviderThreadId
    provider: ProviderKind
    provider_session_id: ProviderSessionId | None
    app_thread_id: ThreadId | None
    owner_node_id: NodeId | None
    native_thread_ref: str | None
    native_conversation_head_ref: ProviderRef | None
    status: ProviderThreadStatus
    first_run_ordinal: int | None
    last_run_ordinal: int | None
    handoff_ids: list[ContextHandoffId]
    forked_from: ProviderThreadForkSource | None
    created_at: str
    updated_at: str
    #: A resume ref is trusted only after a turn completed with it (lessons §8 rule 2).
    resume_ref_confirmed: bool = False
    turn_count: int = 0
    #: The working directory its conversation is held in (its first turn's); None
    #: when not recorded (a subagent's, or a row from before it was). A run in another
    #: cwd does not resume it (docs/decisions-lineage.md, settings incompatibility).
    cwd: str | None = None


class ProviderTurn(Wire):
    """The normalized handle of a provider-native turn (native id or ordinal)."""

    id: ProviderTurnId
    provider_thread_id: ProviderThreadId
    node_id: NodeId
    run_attempt_id: RunAttemptId | None
    native_turn_ref: str | None
    ordinal: int
    status: ProviderTurnStatus
    started_at: str | None = None
    completed_at: str | None = None
    error: str | None = None
    #: A held runtime's turn: how far the daemon had read the journal when it began the
    #: turn. Its input is the first turn request journaled after it (a reattach reads
    #: whether it was sent from that, not from turn ends the log may lack the offset of).
    begun_after: JournalPosition | None = None
