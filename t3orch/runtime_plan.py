"""What the next runtime of a thread opens: the core's answer, typed, for the supervisor.

A runtime either resumes its provider thread natively (a ref a completed turn
confirmed), forks a pending fork's source (natively where the provider can,
else portably: seeded with a summary of the source), or starts a fresh
provider thread. The supervisor matches on the plan and drives the process; it
never reads projection rows to decide this itself. Any handoff text a fresh
start carries (a resume fallback's summary, a portable fork's) is the result of
the command that recorded it and goes with the first turn.
"""

from __future__ import annotations

import msgspec

from t3orch.domain.context import ContextTransfer
from t3orch.domain.provider import ProviderThread
from t3orch.domain.run import Run
from t3orch.domain.vocab import ProviderKind
from t3orch.store.interface import ReadModel


class ResumeThread(msgspec.Struct, frozen=True):
    """Resume this native thread (at this head, where the provider keeps one)."""

    native_thread_ref: str
    head_ref: str | None = None


class NativeForkSource(msgspec.Struct, frozen=True):
    """Where a native fork starts: the source's native thread, at a turn (Codex)."""

    native_thread_ref: str
    turn_ref: str | None = None


class ForkThread(msgspec.Struct, frozen=True):
    """Resolve this pending fork: natively from ``source``, or (None) portably."""

    transfer_id: str
    source: NativeForkSource | None


class StartFresh(msgspec.Struct, frozen=True):
    """Start a new provider thread."""


RuntimePlan = ResumeThread | ForkThread | StartFresh


def resume_point(reads: ReadModel, provider_thread_id: str) -> ResumeThread | None:
    """The stored provider thread's resume refs, once a turn completed with them
    (a ref is trusted only then: lessons §8 rule 2)."""
    pt = reads.get(ProviderThread, provider_thread_id)
    if pt is None or not pt.native_thread_ref or not pt.resume_ref_confirmed:
        return None
    head = pt.native_conversation_head_ref
    return ResumeThread(pt.native_thread_ref, head.value if head else None)


def next_runtime(
    reads: ReadModel,
    *,
    thread_id: str,
    provider_thread_id: str,
    provider: ProviderKind,
    cwd: str,
    first_run_id: str | None,
    forks_natively: bool,
) -> RuntimePlan:
    """The plan for a runtime about to open ``provider_thread_id`` of ``thread_id``.

    ``first_run_id``: the run whose dispatch opens it (a fork resolves only for a
    run); ``forks_natively``: the provider's runtimes can fork a thread.
    """
    with reads.snapshot():
        resume = resume_point(reads, provider_thread_id)
        if resume is not None:
            return resume
        fork = _pending_fork(reads, thread_id) if first_run_id is not None else None
        if fork is None:
            return StartFresh()
        source = _native_fork_source(reads, fork, provider, cwd) if forks_natively else None
        return ForkThread(fork.id, source)


def _pending_fork(reads: ReadModel, thread_id: str) -> ContextTransfer | None:
    """This thread's ``fork`` transfer, while no run has resolved it."""
    for t in reads.select(ContextTransfer, thread_id=thread_id):
        if t.type == "fork" and t.target_thread_id == thread_id and t.status == "pending":
            return t
    return None


def _native_fork_source(
    reads: ReadModel, fork: ContextTransfer, provider: ProviderKind, cwd: str
) -> NativeForkSource | None:
    """Where a native fork starts, when this provider can fork the source natively.

    Codex forks through the source run's turn (``lastTurnId``). Claude forks a
    whole session (``--fork-session``): only a fork at the source provider
    thread's latest run is native there.
    """
    point = fork.source_point
    if point.run_id is None:
        return None
    run = reads.get(Run, point.run_id)
    src = (
        reads.get(ProviderThread, run.provider_thread_id)
        if run is not None and run.provider_thread_id
        else None
    )
    if run is None or src is None or src.provider != provider:
        return None
    if not src.native_thread_ref or not src.resume_ref_confirmed:
        return None
    if provider == "codex":
        if point.provider_turn_ref is None and src.last_run_ordinal != run.ordinal:
            return None
        return NativeForkSource(src.native_thread_ref, point.provider_turn_ref)
    if src.last_run_ordinal != run.ordinal:
        return None
    if src.cwd is not None and src.cwd != cwd:
        # Claude keeps a session under its cwd's project directory: a fork in
        # another cwd (a `fork --worktree`) cannot find it, so it is portable.
        return None
    return NativeForkSource(src.native_thread_ref, None)
