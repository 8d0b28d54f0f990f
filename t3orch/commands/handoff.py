"""A replacement provider thread seeded from the app's own history.

Three reasons: resuming the old one failed (it becomes ``error``); it was held
with settings the run cannot use on it, a cwd that changed since (it becomes
``closed``); or the delta handoffs it accumulated would pass the configured size
(``closed`` too: it still works, but a fresh conversation with one summary is
better context).
The old provider thread is kept (with its native ref, for audit); a
``provider_handoff`` ContextTransfer records why, and a ``full_thread_summary``
ContextHandoff carries the summary the run sends to the new thread: it is in the log
before the new thread is opened, and delivered (the thread's list, a ``handoff`` item)
with the run's first attempt on it (``delivery.prepare_handoff``), so a daemon that dies
in between leaves it to the next one. A handoff the run had before (an earlier
attempt's) is ``superseded``.
"""

from __future__ import annotations

import msgspec

from t3orch.commands.delivery import delta_overflow
from t3orch.commands.lineage import MAX_SUMMARY_CHARS, history, render
from t3orch.commands.threads import require_thread
from t3orch.domain.context import (
    ContextHandoff,
    ContextSourcePoint,
    ContextTransfer,
    PortableContextResolution,
    RunOrdinalRange,
)
from t3orch.domain.provider import ProviderThread
from t3orch.domain.run import Run
from t3orch.domain.thread import AppThread
from t3orch.events import ContextHandoffUpserted, ContextTransferUpserted
from t3orch.ids import (
    ContextHandoffId,
    ContextTransferId,
    ProviderSessionId,
    ProviderThreadId,
    RunId,
    ThreadId,
    derived_id,
)
from t3orch.ingest.binding import SessionBinding
from t3orch.ingest.changes import Changes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView

_RESUME_FAILED = "The earlier provider conversation for this thread could not be resumed."
_OVERFLOW = (
    "The earlier provider conversation for this thread has been given too much context "
    "second-hand, so this is a fresh one."
)


def _settings_changed(conflict: str) -> str:
    return (
        f"The earlier provider conversation for this thread was held with settings this "
        f"run cannot use on it ({conflict}), so this is a fresh one."
    )


def settings_conflict(thread: AppThread, pt: ProviderThread) -> str | None:
    """What ``pt``'s conversation was held with that a run of ``thread`` cannot use on it.

    Only the cwd counts (docs/decisions-lineage.md): Claude keeps a session under its
    cwd's project directory, and every earlier turn of either provider is about the
    files of the old tree. The model and the runtime mode are given to the resuming
    process (Claude's ``--model`` / permission flags, Codex's ``thread/resume``
    overrides), so a change of them is used on the old conversation. None: resumable.
    """
    if pt.cwd is not None and pt.cwd != thread.cwd:
        return f"cwd {pt.cwd} -> {thread.cwd}"
    return None


def thread_summary(
    view: StateView, thread_id: str, *, limit: int = MAX_SUMMARY_CHARS, why: str = _RESUME_FAILED
) -> str:
    # A fork's inherited conversation is part of its history (commands.lineage).
    body = render(history(view, thread_id), limit=limit)
    return f"{why} Here is the conversation so far, from the application's own history:\n\n" + body


def replace_provider_thread(
    thread_id: str,
    session_id: ProviderSessionId,
    new_provider_thread_id: ProviderThreadId,
    target_run_id: str,
    reason: str,
    *,
    unusable_only: bool = False,
    delta_limit: int | None = None,
) -> Decide:
    """Replace the thread's active provider thread for ``target_run_id``.

    The result: (binding, why, tag); the summary is the run's handoff in the log.
    ``unusable_only``: replace it only if it is not to be resumed for the run (else
    decide nothing, None): its settings conflict with the thread's (tag
    ``settings_changed``) or, with ``delta_limit``, the delta it would get would take its
    delta handoffs past that many characters (tag ``handoff_overflow``). Otherwise
    resuming it failed (``resume_fallback``).
    """

    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        old_id = thread.active_provider_thread_id
        old = view.get(ProviderThread, old_id) if old_id else None
        if old is None:
            raise CommandRejected("no_provider_thread", f"thread {thread_id} has none to replace")
        run = view.get(Run, target_run_id)
        if run is None:
            raise CommandRejected("unknown_run", f"no run {target_run_id!r}")
        why, old_status, tag, intro = reason, "error", "resume_fallback", _RESUME_FAILED
        if unusable_only:
            conflict = settings_conflict(thread, old)
            overflow = (
                delta_overflow(view, run, old, delta_limit)
                if conflict is None and delta_limit is not None
                else None
            )
            if conflict is not None:
                why = f"provider thread {old.id} is not resumed: {conflict}"
                old_status, tag, intro = "closed", "settings_changed", _settings_changed(conflict)
            elif overflow is not None:
                why, old_status, tag, intro = overflow, "closed", "handoff_overflow", _OVERFLOW
            else:
                return Decision([], None)
        ch = Changes(view)
        now = view.now()
        transfer_id = derived_id(ContextTransferId, new_provider_thread_id, tag)
        handoff_id = derived_id(ContextHandoffId, transfer_id)
        runs = [
            r
            for r in view.select(Run, thread_id=thread_id)
            if r.ordinal < run.ordinal and r.status != "rolled_back"
        ]
        covered = RunOrdinalRange(from_=1, to=max((r.ordinal for r in runs), default=0))
        summary = thread_summary(view, thread_id, why=intro)
        supersede_run_handoff(ch, run.context_handoff_id)
        ch.put("provider_thread", msgspec.structs.replace(old, status=old_status, updated_at=now))
        ch.put(
            "provider_thread",
            ProviderThread(
                id=new_provider_thread_id,
                provider=old.provider,
                provider_session_id=session_id,
                app_thread_id=ThreadId(thread.id),
                owner_node_id=None,
                native_thread_ref=None,
                native_conversation_head_ref=None,
                status="not_loaded",
                first_run_ordinal=run.ordinal,
                last_run_ordinal=None,
                # Delivered with the run's first attempt on it (``delivery.prepare_handoff``).
                handoff_ids=[],
                forked_from=None,
                created_at=now,
                updated_at=now,
                cwd=thread.cwd,
            ),
        )
        ch.put(
            "thread",
            msgspec.structs.replace(
                thread, active_provider_thread_id=new_provider_thread_id, updated_at=now
            ),
        )
        point = ContextSourcePoint(
            thread_id=ThreadId(thread.id),
            run_id=runs[-1].id if runs else None,
            checkpoint_id=None,
            turn_item_id=None,
            provider_thread_ref=old.native_thread_ref,
            provider_turn_ref=None,
        )
        ch.emit(
            ContextTransferUpserted(
                transfer=ContextTransfer(
                    id=transfer_id,
                    type="provider_handoff",
                    source_thread_id=ThreadId(thread.id),
                    target_thread_id=ThreadId(thread.id),
                    source_point=point,
                    base_point=None,
                    source_provider=old.provider,
                    target_provider=old.provider,
                    status="resolved_portable",
                    resolution=PortableContextResolution(context_handoff_id=handoff_id),
                    created_by="system",
                    created_at=now,
                )
            )
        )
        ch.emit(
            ContextHandoffUpserted(
                handoff=ContextHandoff(
                    id=handoff_id,
                    transfer_id=transfer_id,
                    thread_id=ThreadId(thread.id),
                    target_run_id=RunId(run.id),
                    from_provider_thread_ids=[old.id],
                    to_provider_thread_id=new_provider_thread_id,
                    covered_run_ordinals=covered,
                    strategy="full_thread_summary",
                    status="ready",
                    summary_message_id=None,
                    summary_text=summary,
                    created_by_provider=None,
                    created_at=now,
                    updated_at=now,
                )
            )
        )
        ch.put("run", msgspec.structs.replace(run, context_handoff_id=handoff_id))
        binding = SessionBinding(
            provider=old.provider,
            provider_session_id=session_id,
            provider_thread_id=new_provider_thread_id,
            thread_id=ThreadId(thread.id),
        )
        return Decision(ch.drafts, (binding, why, tag))

    return decide


def supersede_run_handoff(ch: Changes, handoff_id: str | None) -> None:
    """The handoff a run had is replaced: it and its transfer become ``superseded``."""
    old = ch.get("context_handoff", handoff_id) if handoff_id else None
    if old is None or old.status == "superseded":
        return
    now = ch.now()
    ch.put("context_handoff", msgspec.structs.replace(old, status="superseded", updated_at=now))
    transfer = ch.get("context_transfer", old.transfer_id)
    if transfer is not None and transfer.type == "provider_handoff":
        ch.put("context_transfer", msgspec.structs.replace(transfer, status="superseded"))
