"""Resume failed: a replacement provider thread seeded from the app's own history.

The old provider thread is kept (with its native ref, for audit); a
``provider_handoff`` ContextTransfer records why, and a ``full_thread_summary``
ContextHandoff carries the summary the next run sends to the new thread.
"""

from __future__ import annotations

import msgspec

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
from t3orch.domain.turn_items import Handoff
from t3orch.events import ContextHandoffUpserted, ContextTransferUpserted
from t3orch.ids import (
    ContextHandoffId,
    ContextTransferId,
    ProviderSessionId,
    ProviderThreadId,
    RunId,
    ThreadId,
    TurnItemId,
    derived_id,
)
from t3orch.ingest.binding import SessionBinding
from t3orch.ingest.changes import Changes
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView


def thread_summary(view: StateView, thread_id: str, *, limit: int = MAX_SUMMARY_CHARS) -> str:
    # A fork's inherited conversation is part of its history (commands.lineage).
    body = render(history(view, thread_id), limit=limit)
    return (
        "The earlier provider conversation for this thread could not be resumed. "
        "Here is the conversation so far, from the application's own history:\n\n" + body
    )


def replace_provider_thread(
    thread_id: str,
    session_id: ProviderSessionId,
    new_provider_thread_id: ProviderThreadId,
    target_run_id: str,
    reason: str,
) -> Decide:
    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        old_id = thread.active_provider_thread_id
        old = view.get("provider_thread", old_id) if old_id else None
        if old is None:
            raise CommandRejected("no_provider_thread", f"thread {thread_id} has none to replace")
        run = view.get("run", target_run_id)
        if run is None:
            raise CommandRejected("unknown_run", f"no run {target_run_id!r}")
        ch = Changes(view)
        now = view.now()
        transfer_id = derived_id(ContextTransferId, new_provider_thread_id, "resume_fallback")
        handoff_id = derived_id(ContextHandoffId, transfer_id)
        runs = [r for r in view.select("run", thread_id=thread_id) if r.id != run.id]
        covered = RunOrdinalRange(from_=1, to=max((r.ordinal for r in runs), default=0))
        summary = thread_summary(view, thread_id)
        ch.put("provider_thread", msgspec.structs.replace(old, status="error", updated_at=now))
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
                handoff_ids=[handoff_id],
                forked_from=None,
                created_at=now,
                updated_at=now,
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
        ch.put(
            "turn_item",
            Handoff(
                id=derived_id(TurnItemId, handoff_id),
                thread_id=ThreadId(thread.id),
                run_id=run.id,
                node_id=run.root_node_id,
                provider_turn_id=None,
                native_item_ref=None,
                status="completed",
                created_at=now,
                updated_at=now,
                handoff_id=handoff_id,
                strategy="full_thread_summary",
                from_providers=[old.provider],
                to_provider=old.provider,
            ),
        )
        binding = SessionBinding(
            provider=old.provider,
            provider_session_id=session_id,
            provider_thread_id=new_provider_thread_id,
            thread_id=ThreadId(thread.id),
        )
        return Decision(ch.drafts, (binding, summary, reason))

    return decide
