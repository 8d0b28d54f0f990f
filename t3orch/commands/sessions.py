from __future__ import annotations

from typing import Literal

import msgspec

from t3orch.commands.threads import require_thread
from t3orch.domain.provider import (
    HolderRef,
    ProcessOwner,
    ProviderCapabilities,
    ProviderSession,
    ProviderThread,
)
from t3orch.domain.vocab import ProviderKind
from t3orch.events import ProviderDiagnostic
from t3orch.ids import DaemonId, ProviderSessionId, ProviderThreadId, ThreadId
from t3orch.ingest.binding import SessionBinding
from t3orch.ingest.changes import Changes
from t3orch.store.interface import Decide, Decision, StateView


def open_session(
    session_id: ProviderSessionId,
    thread_id: str,
    new_provider_thread_id: ProviderThreadId,
    *,
    provider: ProviderKind | None = None,
    owner: DaemonId | None = None,
) -> Decide:
    """Record a runtime about to start for a thread, reusing the thread's provider thread.

    The result is the :class:`SessionBinding`. When the app thread already has a
    provider thread of this provider, it is kept (with its resume refs) and moved
    to the new session: that is the one recovery path after a reap, a crash or a
    daemon restart.
    """

    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        kind = provider or thread.default_provider
        ch = Changes(view)
        now = view.now()
        ch.put(
            "provider_session",
            ProviderSession(
                id=session_id,
                provider=kind,
                status="starting",
                cwd=thread.cwd,
                model=thread.model_selection.model,
                capabilities=ProviderCapabilities(),
                created_at=now,
                updated_at=now,
                owner_daemon_id=owner,
            ),
        )
        pt = None
        if thread.active_provider_thread_id is not None:
            pt = view.get(ProviderThread, thread.active_provider_thread_id)
            if pt is not None and pt.provider != kind:
                pt = None
        if pt is None:
            pt = ProviderThread(
                id=new_provider_thread_id,
                provider=kind,
                provider_session_id=session_id,
                app_thread_id=ThreadId(thread.id),
                owner_node_id=None,
                native_thread_ref=None,
                native_conversation_head_ref=None,
                status="not_loaded",
                first_run_ordinal=None,
                last_run_ordinal=None,
                handoff_ids=[],
                forked_from=None,
                created_at=now,
                updated_at=now,
                cwd=thread.cwd,
            )
            ch.put("provider_thread", pt)
            ch.put(
                "thread",
                msgspec.structs.replace(thread, active_provider_thread_id=pt.id, updated_at=now),
            )
        else:
            # Not resumable yet (no turn completed with its ref): it starts afresh
            # in the thread's cwd of now, so that is its cwd.
            cwd = pt.cwd if pt.resume_ref_confirmed else thread.cwd
            ch.put(
                "provider_thread",
                msgspec.structs.replace(
                    pt, provider_session_id=session_id, cwd=cwd, updated_at=now
                ),
            )
        binding = SessionBinding(
            provider=kind,
            provider_session_id=session_id,
            provider_thread_id=pt.id,
            thread_id=ThreadId(thread.id),
        )
        return Decision(ch.drafts, binding)

    return decide


def record_process(
    session_id: str,
    pid: int | None,
    started_at: float | None,
    owner: ProcessOwner | None,
    holder: HolderRef | None = None,
) -> Decide:
    """Remember a runtime's pid, start time and owning daemon: the orphan sweep checks all three
    (and the holder it runs under, which a restarted daemon reattaches to)."""

    def decide(view: StateView) -> Decision:
        ch = Changes(view)
        s = view.get(ProviderSession, session_id)
        if s is not None:
            ch.put(
                "provider_session",
                msgspec.structs.replace(
                    s,
                    pid=pid,
                    process_started_at=started_at,
                    owner=owner,
                    holder=holder,
                    updated_at=view.now(),
                ),
            )
        return Decision(ch.drafts)

    return decide


def note(
    session_id: str | None, level: Literal["info", "warning", "error"], code: str, message: str
) -> Decide:
    def decide(view: StateView) -> Decision:
        ch = Changes(view)
        ch.emit(
            ProviderDiagnostic(
                provider_session_id=ProviderSessionId(session_id) if session_id else None,
                level=level,
                code=code,
                message=message,
            )
        )
        return Decision(ch.drafts)

    return decide
