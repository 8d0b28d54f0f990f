"""The read models of seed §Projections, built from projection rows.

Every snapshot is read inside one read transaction and carries the
``snapshotSequence`` it reflects: a client applies only events after it. Row
bodies are already JSON, so snapshots pass them through as ``msgspec.Raw``
instead of decoding and re-encoding thousands of items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import msgspec

from t3orch.domain.run import TokenUsage, add_usage
from t3orch.domain.turn_items import Fork
from t3orch.domain.vocab import RUN_TERMINAL
from t3orch.ids import ThreadId, TurnItemId, derived_id
from t3orch.store.kinds import Row


class ProjectionReader(Protocol):
    def projection_sequence(self) -> int: ...

    def rows(self, kind: str, *, thread_id: str | None = None) -> list[Row]: ...

    def row(self, kind: str, id: str) -> Row | None: ...

    def rows_by_status(self, kind: str, statuses: Sequence[str]) -> list[Row]: ...

    def rows_window(
        self, kind: str, thread_id: str, *, limit: int, before_position: int | None = None
    ) -> tuple[list[Row], int]: ...

    def folded(self, row: Row) -> Row:
        """A turn item with its pending streamed text (chunks) folded in."""


class _Hidden(msgspec.Struct, rename="camel"):
    hidden: bool = False
    type: str = ""
    run_id: str | None = None


_hidden = msgspec.json.Decoder(_Hidden)
_LIVE_RUN = ("queued", "starting", "running", "waiting")


def _raw(rows: Sequence[Row]) -> list[msgspec.Raw]:
    return [msgspec.Raw(r.body) for r in rows]


class ThreadHost(msgspec.Struct, rename="camel"):
    """Where a thread runs: the host of the daemon that owns it, and whether that
    daemon is online (its heartbeat has not lapsed)."""

    daemon_id: str
    host: str
    online: bool


#: The fleet as the reads show it: each registered daemon's host, by daemon id.
FleetHosts = Mapping[str, ThreadHost]


class _Daemon(Protocol):
    """A registry row as the reads need it (``store.interface.DaemonRecord``)."""

    @property
    def daemon_id(self) -> str: ...
    @property
    def host(self) -> str: ...

    def online(self, now: float) -> bool: ...


def fleet_hosts(daemons: Sequence[_Daemon], now: float) -> dict[str, ThreadHost]:
    return {d.daemon_id: ThreadHost(d.daemon_id, d.host, d.online(now)) for d in daemons}


class _Owner(msgspec.Struct, rename="camel"):
    owner_daemon_id: str | None = None


_owner = msgspec.json.Decoder(_Owner)


def host_of(thread: Row, hosts: FleetHosts) -> ThreadHost | None:
    """The thread's owner (None for a thread from before owners were recorded); a
    daemon the registry does not know is shown by its id, offline."""
    owner = _owner.decode(thread.body).owner_daemon_id
    if owner is None:
        return None
    return hosts.get(owner) or ThreadHost(owner, owner, online=False)


class ThreadShellEntry(msgspec.Struct, rename="camel"):
    thread: msgspec.Raw
    run_count: int
    latest_run_status: str | None
    pending_requests: int
    #: The sum of its runs' usage; None while no run reported any.
    usage: TokenUsage | None = None
    #: Where it runs (the fleet); None for a thread from before owners were recorded.
    host: ThreadHost | None = None


class _RunUsage(msgspec.Struct, rename="camel"):
    usage: TokenUsage | None = None


_run_usage = msgspec.json.Decoder(_RunUsage)


def usage_of(runs: Sequence[Row]) -> TokenUsage | None:
    """The sum of the runs' reported usage (their rows' bodies)."""
    total: TokenUsage | None = None
    for row in runs:
        total = add_usage(total, _run_usage.decode(row.body).usage)
    return total


class ThreadShell(msgspec.Struct, rename="camel"):
    snapshot_sequence: int
    threads: list[ThreadShellEntry]


#: A thread detail carries the newest items only; older ones are paged with
#: ``beforePosition``. A full 10,000-item thread is tens of MB: never one frame.
DETAIL_WINDOW = 200


class ThreadDetail(msgspec.Struct, rename="camel"):
    snapshot_sequence: int
    thread: msgspec.Raw
    runs: list[msgspec.Raw]
    messages: list[msgspec.Raw]
    turn_items: list[msgspec.Raw]
    visible_turn_items: list[msgspec.Raw]
    #: How many turn items the thread has; the window holds the newest of them.
    total_turn_items: int
    #: Pass as ``beforePosition`` for the page before this window; None at the start.
    older_before_position: int | None
    plans: list[msgspec.Raw]
    checkpoints: list[msgspec.Raw]
    pending_requests: list[msgspec.Raw]
    handoffs: list[msgspec.Raw]
    #: The sum of its runs' usage (each run has its own); None while none reported any.
    usage: TokenUsage | None = None
    #: Where it runs (the fleet); None for a thread from before owners were recorded.
    host: ThreadHost | None = None


class ExecutionGraph(msgspec.Struct, rename="camel"):
    snapshot_sequence: int
    runs: list[msgspec.Raw]
    attempts: list[msgspec.Raw]
    nodes: list[msgspec.Raw]
    provider_threads: list[msgspec.Raw]
    provider_turns: list[msgspec.Raw]
    transfers: list[msgspec.Raw]
    checkpoint_scopes: list[msgspec.Raw] = msgspec.field(default_factory=list)


class ProviderSessions(msgspec.Struct, rename="camel"):
    snapshot_sequence: int
    sessions: list[msgspec.Raw]


class PendingRequests(msgspec.Struct, rename="camel"):
    snapshot_sequence: int
    requests: list[msgspec.Raw]


class UnknownThread(LookupError):
    pass


def thread_shell(r: ProjectionReader, hosts: FleetHosts | None = None) -> ThreadShell:
    pending: dict[str, int] = {}
    for row in r.rows_by_status("runtime_request", ("pending",)):
        if row.thread_id:
            pending[row.thread_id] = pending.get(row.thread_id, 0) + 1
    runs: dict[str, list[Row]] = {}
    for row in r.rows("run"):
        if row.thread_id:
            runs.setdefault(row.thread_id, []).append(row)
    entries = []
    for t in r.rows("thread"):
        thread_runs = runs.get(t.id, [])
        entries.append(
            ThreadShellEntry(
                thread=msgspec.Raw(t.body),
                run_count=len(thread_runs),
                latest_run_status=thread_runs[-1].status if thread_runs else None,
                pending_requests=pending.get(t.id, 0),
                usage=usage_of(thread_runs),
                host=host_of(t, hosts or {}),
            )
        )
    return ThreadShell(snapshot_sequence=r.projection_sequence(), threads=entries)


def thread_detail(
    r: ProjectionReader,
    thread_id: str,
    *,
    limit: int = DETAIL_WINDOW,
    before_position: int | None = None,
    hosts: FleetHosts | None = None,
) -> ThreadDetail:
    thread = r.row("thread", thread_id)
    if thread is None:
        raise UnknownThread(f"no thread {thread_id!r}")
    items, total = r.rows_window(
        "turn_item", thread_id, limit=limit, before_position=before_position
    )
    items = [r.folded(i) for i in items]
    first = items[0].position if items else None
    older = (
        first
        if first is not None and total > len(items) and _has_older(r, thread_id, first)
        else None
    )
    messages, _ = r.rows_window("message", thread_id, limit=limit, before_position=before_position)
    # Messages share their item's position: keep exactly the window's span.
    messages = [m for m in messages if first is None or m.position >= first]
    runs = r.rows("run", thread_id=thread_id)
    return ThreadDetail(
        snapshot_sequence=r.projection_sequence(),
        thread=msgspec.Raw(thread.body),
        runs=_raw(runs),
        messages=_raw(messages),
        turn_items=_raw(items),
        visible_turn_items=visible_turn_items(r, thread_id, items, at_start=older is None),
        total_turn_items=total,
        older_before_position=older,
        plans=_raw(r.rows("plan", thread_id=thread_id)),
        checkpoints=_raw(r.rows("checkpoint", thread_id=thread_id)),
        pending_requests=_raw(
            [q for q in r.rows("runtime_request", thread_id=thread_id) if q.status == "pending"]
        ),
        handoffs=_raw(r.rows("context_handoff", thread_id=thread_id)),
        usage=usage_of(runs),
        host=host_of(thread, hosts or {}),
    )


def _has_older(r: ProjectionReader, thread_id: str, position: int) -> bool:
    older, _ = r.rows_window("turn_item", thread_id, limit=1, before_position=position)
    return bool(older)


def visible_turn_items(
    r: ProjectionReader,
    thread_id: str,
    items: Sequence[Row] | None = None,
    *,
    at_start: bool = True,
) -> list[msgspec.Raw]:
    """What a user sees: a fork's inherited items up to its source point, then local ones.

    Inherited rows are referenced, not copied: a fork's own ``turnItems`` hold
    only what happened on it. Between the two comes a synthetic ``fork`` marker
    (never stored). Hidden (child/subagent) items and rolled-back runs are left out.
    """
    if items is None:
        items = [r.folded(i) for i in r.rows("turn_item", thread_id=thread_id)]
    out: list[msgspec.Raw] = []
    transfer = _fork_transfer(r, thread_id) if at_start else None
    if transfer is not None:
        source = transfer["sourcePoint"]
        if source.get("runId") is not None or source.get("turnItemId") is not None:
            inherited = visible_turn_items(r, source["threadId"])
            out.extend(_up_to(r, inherited, source))
        out.append(_fork_marker(thread_id, transfer))
    rolled_back = _rolled_back_runs(r, thread_id)
    for i in items:
        head = _hidden.decode(i.body)
        if head.hidden or (head.run_id is not None and head.run_id in rolled_back):
            continue
        out.append(msgspec.Raw(i.body))
    return out


def _rolled_back_runs(r: ProjectionReader, thread_id: str) -> set[str]:
    return {row.id for row in r.rows("run", thread_id=thread_id) if row.status == "rolled_back"}


def _fork_transfer(r: ProjectionReader, thread_id: str) -> dict[str, Any] | None:
    for row in r.rows("context_transfer", thread_id=thread_id):
        t = msgspec.json.decode(row.body)
        if t["type"] == "fork" and t["targetThreadId"] == thread_id:
            return dict(t)
    return None


def _fork_marker(thread_id: str, transfer: dict[str, Any]) -> msgspec.Raw:
    source = transfer["sourcePoint"]
    marker = Fork(
        id=derived_id(TurnItemId, transfer["id"], "fork_marker"),
        thread_id=ThreadId(thread_id),
        run_id=None,
        node_id=None,
        provider_turn_id=None,
        native_item_ref=None,
        status="completed",
        created_at=transfer["createdAt"],
        updated_at=transfer["createdAt"],
        transfer_id=transfer["id"],
        source_thread_id=source["threadId"],
        source_run_id=source.get("runId"),
    )
    return msgspec.Raw(msgspec.json.encode(marker))


def _up_to(
    r: ProjectionReader, inherited: list[msgspec.Raw], source: dict[str, Any]
) -> list[msgspec.Raw]:
    """The inherited items at or before the source point.

    A source run keeps every item of the runs up to it (by ordinal), wherever a
    late item landed; items the source thread inherited itself are kept whole
    (they were cut at their own source point); run-less items count by position.
    """
    target_item = source.get("turnItemId")
    if target_item is not None:
        for idx, raw in enumerate(inherited):
            if msgspec.json.decode(raw)["id"] == target_item:
                return inherited[: idx + 1]
        return []
    source_thread = source["threadId"]
    ordinals = {row.id: row.decode().ordinal for row in r.rows("run", thread_id=source_thread)}
    limit = ordinals.get(source["runId"])
    if limit is None:
        return []
    kept: list[msgspec.Raw] = []
    last_kept = -1
    decoded = [msgspec.json.decode(raw) for raw in inherited]
    for idx, item in enumerate(decoded):
        run_id = item.get("runId")
        if item.get("threadId") != source_thread or (
            run_id is not None and ordinals.get(run_id, limit + 1) <= limit
        ):
            last_kept = idx
    for idx, (raw, item) in enumerate(zip(inherited, decoded, strict=True)):
        run_id = item.get("runId")
        if item.get("threadId") != source_thread:
            kept.append(raw)
        elif run_id is not None:
            if ordinals.get(run_id, limit + 1) <= limit:
                kept.append(raw)
        elif idx <= last_kept:
            kept.append(raw)
    return kept


def execution_graph(r: ProjectionReader, thread_id: str) -> ExecutionGraph:
    if r.row("thread", thread_id) is None:
        raise UnknownThread(f"no thread {thread_id!r}")
    pthreads = r.rows("provider_thread", thread_id=thread_id)
    pt_ids = {p.id for p in pthreads}
    turns = [
        t
        for t in r.rows("provider_turn")
        if msgspec.json.decode(t.body)["providerThreadId"] in pt_ids
    ]
    return ExecutionGraph(
        snapshot_sequence=r.projection_sequence(),
        runs=_raw(r.rows("run", thread_id=thread_id)),
        attempts=_raw(r.rows("run_attempt", thread_id=thread_id)),
        nodes=_raw(r.rows("node", thread_id=thread_id)),
        provider_threads=_raw(pthreads),
        provider_turns=_raw(turns),
        transfers=_raw(r.rows("context_transfer", thread_id=thread_id)),
        checkpoint_scopes=_raw(r.rows("checkpoint_scope", thread_id=thread_id)),
    )


def provider_sessions(r: ProjectionReader) -> ProviderSessions:
    return ProviderSessions(
        snapshot_sequence=r.projection_sequence(), sessions=_raw(r.rows("provider_session"))
    )


def pending_requests(r: ProjectionReader) -> PendingRequests:
    return PendingRequests(
        snapshot_sequence=r.projection_sequence(),
        requests=_raw(r.rows_by_status("runtime_request", ("pending",))),
    )


def usage_totals(r: ProjectionReader) -> dict[str, Any]:
    """Usage over every run (``total``) and per thread (``threads``: those with any)."""
    per_thread: dict[str, list[Row]] = {}
    for row in r.rows("run"):
        if row.thread_id:
            per_thread.setdefault(row.thread_id, []).append(row)
    threads = {t: u for t, rows in per_thread.items() if (u := usage_of(rows)) is not None}
    total: TokenUsage | None = None
    for u in threads.values():
        total = add_usage(total, u)
    return {"total": total, "threads": threads}


def active_runs(r: ProjectionReader) -> list[Row]:
    return [row for row in r.rows_by_status("run", _LIVE_RUN) if row.status not in RUN_TERMINAL]
