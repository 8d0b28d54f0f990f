"""The API's methods: typed params in, JSON-able results out.

Each mutating method takes a client ``commandId`` and returns
``{result, sequence}``; a repeated id returns the first result (the store's
command receipts make that a lookup), so a client may retry after any failure.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sized
from functools import partial
from typing import Any, Protocol

import attrs

from t3orch import gitstore, timeline
from t3orch.api import params as P
from t3orch.api.operations import Operations, store_facts, writer_facts
from t3orch.api.protocol import METHOD_NOT_FOUND, RpcError, decode_params
from t3orch.api.reads import ApiReader
from t3orch.api.topics import TopicFilter, check_topic, open_filter, read_view
from t3orch.commands.specs import CreateThread
from t3orch.core import Core
from t3orch.domain.checkpoint import Checkpoint
from t3orch.domain.thread import AppThread
from t3orch.live import LiveSubscription
from t3orch.projections.views import FleetHosts
from t3orch.service import CommandResult
from t3orch.store.broadcast import Subscription
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import ReadModel
from t3orch.web.session import CODE_TTL_S, WebAuth
from t3orch.worktrees import fork_into_worktree


class ServerLimits(Protocol):
    @property
    def subscription_buffer(self) -> int: ...


class Server(Protocol):
    @property
    def limits(self) -> ServerLimits: ...
    @property
    def web(self) -> WebAuth: ...

    def status(self) -> dict[str, Any]: ...


class Connection(Protocol):
    """A client connection as the methods see it (``t3orch.api.server.Connection`` is
    one): a protocol, so that the server, which dispatches to the methods, is not
    imported back by them."""

    @property
    def server(self) -> Server: ...
    @property
    def core(self) -> Core: ...
    @property
    def ops(self) -> Operations: ...
    @property
    def reader(self) -> ApiReader: ...
    @property
    def subscriptions(self) -> Sized: ...

    def start_stream(
        self,
        flt: TopicFilter,
        live: Subscription,
        cursor: int,
        snapshot: Any,
        text: LiveSubscription | None = None,
    ) -> str: ...

    def stop_stream(self, sub_id: str) -> bool: ...


Handler = Callable[[Connection, Any], Awaitable[Any]]
MAX_SUBSCRIPTIONS = 64


@attrs.frozen
class Method:
    params: type[P.Params]
    handler: Handler


def _committed(res: CommandResult) -> dict[str, Any]:
    # Deliberately without ``duplicate``: a retry must see exactly the first answer.
    return {"result": res.result, "sequence": res.sequence}


async def thread_create(conn: Connection, p: P.ThreadCreate) -> Any:
    spec = CreateThread(
        provider=p.provider,
        cwd=p.cwd,
        title=p.title,
        model=p.model,
        runtime_mode=p.runtime_mode,
        interaction_mode=p.interaction_mode,
        project_id=p.project_id,
    )
    return _committed(await conn.core.service.create_thread(spec, command_id=p.command_id))


async def thread_archive(conn: Connection, p: P.ThreadArchive) -> Any:
    return _committed(await conn.core.service.archive_thread(p.thread_id, command_id=p.command_id))


async def thread_unarchive(conn: Connection, p: P.ThreadUnarchive) -> Any:
    res = await conn.core.service.unarchive_thread(p.thread_id, command_id=p.command_id)
    return _committed(res)


async def thread_delete(conn: Connection, p: P.ThreadDelete) -> Any:
    return _committed(await conn.ops.delete_thread(p.thread_id, command_id=p.command_id))


async def run_send(conn: Connection, p: P.RunSend) -> Any:
    timeline.stamp("api.send")
    sent = await conn.ops.send_message(p.thread_id, p.text, command_id=p.command_id, mode=p.mode)
    timeline.stamp("api.sent")
    return _committed(sent)


async def run_interrupt(conn: Connection, p: P.RunInterrupt) -> Any:
    return _committed(await conn.ops.interrupt_run(p.run_id, command_id=p.command_id))


async def request_respond(conn: Connection, p: P.RequestRespond) -> Any:
    res = await conn.ops.respond(
        p.request_id, p.decision, message=p.message, answers=p.answers, command_id=p.command_id
    )
    return _committed(res)


async def thread_switch_provider(conn: Connection, p: P.ThreadSwitchProvider) -> Any:
    return _committed(
        await conn.ops.switch_provider(p.thread_id, p.provider, command_id=p.command_id)
    )


async def thread_configure(conn: Connection, p: P.ThreadConfigure) -> Any:
    res = await conn.ops.configure_thread(
        p.thread_id,
        cwd=p.cwd,
        model=p.model,
        runtime_mode=p.runtime_mode,
        command_id=p.command_id,
    )
    return _committed(res)


async def thread_fork(conn: Connection, p: P.ThreadFork) -> Any:
    if p.worktree:
        res = await fork_into_worktree(
            conn.core.service,
            conn.reader,
            p.thread_id,
            p.run_id,
            title=p.title,
            provider=p.provider,
            command_id=p.command_id,
        )
    else:
        res = await conn.core.service.fork_thread(
            p.thread_id, p.run_id, title=p.title, provider=p.provider, command_id=p.command_id
        )
    return _committed(res)


async def thread_merge_back(conn: Connection, p: P.ThreadMergeBack) -> Any:
    res = await conn.core.service.merge_back(
        p.thread_id, p.run_id, target_thread_id=p.target_thread_id, command_id=p.command_id
    )
    return _committed(res)


async def handoff_regenerate(conn: Connection, p: P.HandoffRegenerate) -> Any:
    res = await conn.core.service.regenerate_handoff(
        p.handoff_id, p.strategy, command_id=p.command_id
    )
    return _committed(res)


async def checkpoint_list(conn: Connection, p: P.CheckpointList) -> Any:
    def read(store: ReadModel) -> tuple[AppThread, list[Checkpoint]]:
        thread = store.get(AppThread, p.thread_id)
        if thread is None:
            raise CommandRejected("unknown_thread", f"no thread {p.thread_id!r}")
        return thread, store.select(Checkpoint, thread_id=p.thread_id)

    thread, cps = await conn.reader.snapshot(read)
    root = await gitstore.work_tree_root(thread.cwd)
    return {
        "threadId": p.thread_id,
        "enabled": root is not None,
        "reason": None if root is not None else f"{thread.cwd} is not in a git work tree",
        # Oldest first: a run's subagent checkpoints come before the run's own.
        "checkpoints": sorted(cps, key=lambda c: c.captured_at),
    }


async def checkpoint_diff(conn: Connection, p: P.CheckpointDiff) -> Any:
    def read(store: ReadModel) -> tuple[Checkpoint, Checkpoint, AppThread]:
        ca, cb = (
            store.get(Checkpoint, p.from_checkpoint_id),
            store.get(Checkpoint, p.to_checkpoint_id),
        )
        if ca is None or cb is None:
            raise CommandRejected("unknown_checkpoint", "no such checkpoint")
        if ca.thread_id != cb.thread_id:
            raise CommandRejected("different_threads", "the checkpoints are of different threads")
        thread = store.get(AppThread, ca.thread_id)
        assert thread is not None
        return ca, cb, thread

    ca, cb, thread = await conn.reader.snapshot(read)
    root = await gitstore.work_tree_root(thread.cwd)
    if root is None:
        raise CommandRejected("checkpoints_disabled", f"{thread.cwd} is not in a git work tree")
    base, target = await gitstore.resolve(root, ca.ref), await gitstore.resolve(root, cb.ref)
    if base is None or target is None:
        raise CommandRejected("checkpoint_missing", "a checkpoint's ref is gone")
    files = await gitstore.numstat(root, base, target)
    return {
        "from": ca.id,
        "to": cb.id,
        "files": [
            {"path": f.path, "additions": f.additions, "deletions": f.deletions} for f in files
        ],
        "patch": await gitstore.diff(root, base, target),
    }


async def thread_rollback(conn: Connection, p: P.ThreadRollback) -> Any:
    res = await conn.ops.rollback(
        p.thread_id,
        p.checkpoint_id,
        command_id=p.command_id,
        dry_run=p.dry_run,
        allow_shared_work_tree=p.allow_shared_work_tree,
        expect_work_tree=p.expect_work_tree,
    )
    return _committed(res)


async def daemon_status(conn: Connection, p: P.DaemonStatus) -> Any:
    # The documented keys come from the core whatever implements Operations; the
    # operations' own status (the supervisor's runners, say) is laid over them.
    facts = await conn.reader.snapshot(store_facts)
    base = {"pid": os.getpid(), **facts, "writer": writer_facts(conn.core)}
    return {**base, **conn.ops.status(), "api": conn.server.status()}


async def web_login(conn: Connection, p: P.WebLogin) -> Any:
    # A client that can call this already holds the API (token or the Unix socket).
    web = conn.server.web
    code = web.issue_code()
    return {
        "url": f"{web.origin}/login?code={code}",
        "origin": web.origin,
        "expiresInS": CODE_TTL_S,
    }


def _events_page(after: int, limit: int, store: ReadModel) -> dict[str, Any]:
    return {"events": store.read_events(after, limit), "headSequence": store.last_sequence()}


async def events_read(conn: Connection, p: P.EventsRead) -> Any:
    return await conn.reader.snapshot(partial(_events_page, p.after_sequence, p.limit))


def _view(p: P.ViewRead, hosts: FleetHosts, store: ReadModel) -> dict[str, Any]:
    view = read_view(
        store,
        p.topic,
        p.thread_id,
        limit=p.limit,
        before_position=p.before_position,
        hosts=hosts,
    )
    return {"snapshotSequence": view.snapshot_sequence, "data": view}


async def view_read(conn: Connection, p: P.ViewRead) -> Any:
    check_topic(p.topic, p.thread_id)
    return await conn.reader.snapshot(partial(_view, p, await conn.reader.hosts()))


def _with_snapshot(
    topic: str, thread_id: str | None, hosts: FleetHosts, store: ReadModel
) -> tuple[TopicFilter, Any]:
    return open_filter(store, topic, thread_id), read_view(store, topic, thread_id, hosts=hosts)


def _with_head(topic: str, thread_id: str | None, store: ReadModel) -> tuple[TopicFilter, int]:
    return open_filter(store, topic, thread_id), store.last_sequence()


async def subscribe(conn: Connection, p: P.Subscribe) -> Any:
    check_topic(p.topic, p.thread_id)
    if len(conn.subscriptions) >= MAX_SUBSCRIPTIONS:
        raise CommandRejected(
            "too_many_subscriptions", f"at most {MAX_SUBSCRIPTIONS} subscriptions per connection"
        )
    # Subscribe FIRST, then read: whatever commits in between is in both, and the
    # stream sends it once (by sequence); nothing can fall between the two.
    live = conn.core.broadcast.subscribe(conn.server.limits.subscription_buffer)
    # A thread's detail also gets the text streaming in, before it commits.
    text = (
        conn.core.service.live.subscribe(p.thread_id)
        if p.topic == "threadDetail" and p.thread_id is not None
        else None
    )
    try:
        if p.after_sequence is None:
            hosts = await conn.reader.hosts()
            read = partial(_with_snapshot, p.topic, p.thread_id, hosts)
            flt, snap = await conn.reader.snapshot(read)
            cursor, reply_seq = snap.snapshot_sequence, snap.snapshot_sequence
        else:
            flt, head = await conn.reader.snapshot(partial(_with_head, p.topic, p.thread_id))
            if p.after_sequence > head:
                raise CommandRejected(
                    "cursor_ahead",
                    f"afterSequence {p.after_sequence} is beyond the log's end ({head}); "
                    "subscribe without it for a fresh snapshot",
                )
            snap, cursor, reply_seq = None, p.after_sequence, None
    except BaseException:
        live.close()
        if text is not None:
            text.close()
        raise
    sub_id = conn.start_stream(flt, live, cursor, snap, text)
    reply: dict[str, Any] = {"subscription": sub_id}
    if reply_seq is not None:
        reply["snapshotSequence"] = reply_seq
    return reply


async def unsubscribe(conn: Connection, p: P.Unsubscribe) -> Any:
    if not conn.stop_stream(p.subscription):
        raise CommandRejected("unknown_subscription", f"no subscription {p.subscription!r}")
    return {"subscription": p.subscription, "unsubscribed": True}


METHODS: dict[str, Method] = {
    "thread.create": Method(P.ThreadCreate, thread_create),
    "thread.archive": Method(P.ThreadArchive, thread_archive),
    "thread.unarchive": Method(P.ThreadUnarchive, thread_unarchive),
    "thread.delete": Method(P.ThreadDelete, thread_delete),
    "thread.switchProvider": Method(P.ThreadSwitchProvider, thread_switch_provider),
    "thread.configure": Method(P.ThreadConfigure, thread_configure),
    "thread.fork": Method(P.ThreadFork, thread_fork),
    "thread.rollback": Method(P.ThreadRollback, thread_rollback),
    "thread.mergeBack": Method(P.ThreadMergeBack, thread_merge_back),
    "handoff.regenerate": Method(P.HandoffRegenerate, handoff_regenerate),
    "checkpoint.list": Method(P.CheckpointList, checkpoint_list),
    "checkpoint.diff": Method(P.CheckpointDiff, checkpoint_diff),
    "run.send": Method(P.RunSend, run_send),
    "run.interrupt": Method(P.RunInterrupt, run_interrupt),
    "request.respond": Method(P.RequestRespond, request_respond),
    "daemon.status": Method(P.DaemonStatus, daemon_status),
    "web.login": Method(P.WebLogin, web_login),
    "events.read": Method(P.EventsRead, events_read),
    "view.read": Method(P.ViewRead, view_read),
    "subscribe": Method(P.Subscribe, subscribe),
    "unsubscribe": Method(P.Unsubscribe, unsubscribe),
}


async def call(conn: Connection, method: str, raw: Any) -> Any:
    entry = METHODS.get(method)
    if entry is None:
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method!r}")
    return await entry.handler(conn, decode_params(raw, entry.params))
