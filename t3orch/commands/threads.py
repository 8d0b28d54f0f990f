from __future__ import annotations

import hashlib
import os
from typing import Any

import msgspec

from t3orch.commands.specs import CreateThread
from t3orch.domain.run import Run
from t3orch.domain.thread import AppThread, ModelSelection
from t3orch.domain.vocab import RuntimeMode
from t3orch.events import EventDraft, ThreadUpserted
from t3orch.ids import DaemonId, ProjectId, ThreadId
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, Decision, StateView

#: Runs not yet ended: a thread holding one is not deleted.
_LIVE_RUN = ("queued", "starting", "running", "waiting")


def project_for(cwd: str) -> ProjectId:
    # One project per working directory until projects become first-class.
    return ProjectId("prj_" + hashlib.blake2b(cwd.encode(), digest_size=10).hexdigest())


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise CommandRejected("invalid_cwd", f"cwd must be an absolute path, got {cwd!r}")


def _require_directory(cwd: str) -> None:
    """The agent's working directory must exist when the thread is (re)configured.

    Asked inside ``decide`` (after the command receipt lookup): a retried command
    gets its first answer even if the directory has gone since.
    """
    if not os.path.isdir(cwd):
        what = "is not a directory" if os.path.exists(cwd) else "does not exist"
        raise CommandRejected("invalid_cwd", f"cwd {cwd} {what}")


def create_thread(spec: CreateThread, thread_id: ThreadId, owner: DaemonId | None = None) -> Decide:
    _check_cwd(spec.cwd)

    def decide(view: StateView) -> Decision:
        _require_directory(spec.cwd)
        now = view.now()
        thread = AppThread(
            id=thread_id,
            project_id=ProjectId(spec.project_id) if spec.project_id else project_for(spec.cwd),
            title=spec.title,
            default_provider=spec.provider,
            model_selection=ModelSelection(provider=spec.provider, model=spec.model),
            runtime_mode=spec.runtime_mode,
            interaction_mode=spec.interaction_mode,
            cwd=spec.cwd,
            branch=None,
            worktree_path=None,
            active_provider_thread_id=None,
            lineage=None,
            created_at=now,
            updated_at=now,
            owner_daemon_id=owner,
        )
        return Decision(
            [EventDraft(payload=ThreadUpserted(thread=thread))], {"threadId": thread_id}
        )

    return decide


def archive_thread(thread_id: str) -> Decide:
    """Hide the thread from ``threads``; it refuses new runs until unarchived.

    A record only: a run already working or queued goes on, and an idle runtime is
    released by the reaper as usual.
    """

    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        if thread.archived_at is not None:
            return Decision([], {"threadId": thread_id})
        archived = msgspec.structs.replace(thread, archived_at=view.now(), updated_at=view.now())
        return Decision(
            [EventDraft(payload=ThreadUpserted(thread=archived))], {"threadId": thread_id}
        )

    return decide


def unarchive_thread(thread_id: str) -> Decide:
    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        if thread.archived_at is None:
            return Decision([], {"threadId": thread_id})
        restored = msgspec.structs.replace(thread, archived_at=None, updated_at=view.now())
        return Decision(
            [EventDraft(payload=ThreadUpserted(thread=restored))], {"threadId": thread_id}
        )

    return decide


def delete_thread(thread_id: str) -> Decide:
    """Make the thread a tombstone: ``deletedAt`` set, every later command refused.

    Its events stay in the log (it is append-only) and its rows stay readable. A
    thread with a run still queued or working is refused: the user interrupts it
    first, so deleting never abandons work mid-turn. Stopping the thread's idle
    runtime is the supervisor's part (``SessionManager.delete_thread``).
    """

    def decide(view: StateView) -> Decision:
        thread = view.get(AppThread, thread_id)
        if thread is None:
            raise CommandRejected("unknown_thread", f"no thread {thread_id!r}")
        assert isinstance(thread, AppThread)
        if thread.deleted_at is not None:
            return Decision([], {"threadId": thread_id, "deletedAt": thread.deleted_at})
        live = view.select_by_status(Run, _LIVE_RUN, thread_id=thread_id)
        if live:
            run = live[0]
            assert isinstance(run, Run)
            raise CommandRejected(
                "thread_busy",
                f"thread {thread_id} has run {run.id} still {run.status}; "
                "interrupt it or let it finish, then delete the thread",
            )
        now = view.now()
        tombstone = msgspec.structs.replace(thread, deleted_at=now, updated_at=now)
        return Decision(
            [EventDraft(payload=ThreadUpserted(thread=tombstone))],
            {"threadId": thread_id, "deletedAt": now},
        )

    return decide


def configure_thread(
    thread_id: str,
    *,
    cwd: str | None = None,
    model: str | None = None,
    runtime_mode: RuntimeMode | None = None,
) -> Decide:
    """Change the settings the thread's next runs use (None: keep that one).

    Only a record: the supervisor retires an idle runtime started with the old
    settings, and the next run's runtime decides whether the thread's provider
    thread can be resumed with the new ones (``commands.handoff.settings_conflict``).
    The result names each setting that changed, old and new.
    """
    if cwd is not None:
        _check_cwd(cwd)

    def decide(view: StateView) -> Decision:
        thread = require_thread(view, thread_id)
        if thread.archived_at is not None:
            raise CommandRejected("thread_archived", f"thread {thread_id} is archived")
        changed: dict[str, Any] = {}
        new = thread
        if cwd is not None and cwd != thread.cwd:
            _require_directory(cwd)
            changed["cwd"] = {"from": thread.cwd, "to": cwd}
            new = msgspec.structs.replace(new, cwd=cwd)
        if model is not None and model != thread.model_selection.model:
            changed["model"] = {"from": thread.model_selection.model, "to": model}
            selection = msgspec.structs.replace(thread.model_selection, model=model)
            new = msgspec.structs.replace(new, model_selection=selection)
        if runtime_mode is not None and runtime_mode != thread.runtime_mode:
            changed["runtimeMode"] = {"from": thread.runtime_mode, "to": runtime_mode}
            new = msgspec.structs.replace(new, runtime_mode=runtime_mode)
        result = {"threadId": thread_id, "changed": changed}
        if not changed:
            return Decision([], result)
        new = msgspec.structs.replace(new, updated_at=view.now())
        return Decision([EventDraft(payload=ThreadUpserted(thread=new))], result)

    return decide


def require_thread(view: StateView, thread_id: str) -> AppThread:
    """The thread a command acts on: a deleted one (a tombstone) takes no command."""
    thread = view.get(AppThread, thread_id)
    if thread is None:
        raise CommandRejected("unknown_thread", f"no thread {thread_id!r}")
    assert isinstance(thread, AppThread)
    if thread.deleted_at is not None:
        raise CommandRejected(
            "thread_deleted", f"thread {thread_id} was deleted at {thread.deleted_at}"
        )
    return thread
