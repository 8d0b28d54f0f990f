"""Which runtimes a live holder kept across a daemon restart, and how to pick them up again.

At start, before anything is settled, each provider session still live in the log
that names a holder (``ProviderSession.holder``) is looked up: its holder must be
the very process recorded (pid + start time) and serve its socket. Such a session
is not settled; a runner reattaches to it (``SessionManager.reattach``) with its
binding, its active turn and its committed journal offset, all from the log.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import attrs

from adapters.ownership import OwnerMark
from supervisor.holder.layout import HeldPaths, HolderState, held_root
from supervisor.holder.wire import Kind, iter_file
from t3orch.commands.reconcile import Held
from t3orch.domain.provider import JournalCommitted, ProviderSession, ProviderThread, ProviderTurn
from t3orch.domain.run import RunAttempt
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.store.interface import ReadModel

log = logging.getLogger(__name__)

LIVE_SESSION = ("starting", "ready", "running", "waiting")

#: The file in a holder's directory that says its process is shared by many threads
#: (its content: their compatibility key; ``supervisor/shared_codex.py``, issue 21).
SHARED_MARK = "shared-codex"


@attrs.frozen
class Reattach:
    """One held runtime, as the log has it."""

    thread_id: str
    session: ProviderSession
    binding: SessionBinding
    #: The turn that was running, bound to its run (None: the runtime was idle).
    turn: TurnBinding | None
    native_thread_ref: str | None
    native_turn_ref: str | None
    paths: HeldPaths
    state: HolderState
    #: The journal offset the log holds everything up to.
    committed: int
    #: The active turn was begun in the log but its input never reached the provider
    #: (the daemon died in between): the reattached runner sends it.
    unsent: bool = False


def holder_alive(paths: HeldPaths, pid: int, started_at: float) -> HolderState | None:
    """The holder's state when the recorded process still runs and serves, else None."""
    state = paths.read_state()
    if state is None or state.holder_pid != pid:
        return None
    if not OwnerMark(pid, started_at).alive() or not paths.socket.exists():
        return None
    return state


def find_held(reader: ReadModel, state_dir: Path, daemon_id: str | None = None) -> list[Reattach]:
    """Every live session of the log whose holder still runs (in a fleet, of this
    daemon's sessions only: another daemon's holders are on its own machine)."""
    out = []
    root = held_root(state_dir)
    for s in reader.select_by_status(ProviderSession, LIVE_SESSION):
        theirs = daemon_id is not None and s.owner_daemon_id not in (None, daemon_id)
        if s.holder is None or theirs:
            continue
        paths = HeldPaths(root / s.holder.holder_id)
        state = holder_alive(paths, s.holder.pid, s.holder.started_at)
        if state is None:
            log.info("session %s: its holder %s is gone", s.id, s.holder.holder_id)
            continue
        threads = [
            pt
            for pt in reader.select(ProviderThread)
            if pt.provider_session_id == s.id and pt.app_thread_id is not None
        ]
        if not threads:
            continue
        pt = max(threads, key=lambda p: p.last_run_ordinal or 0)
        assert pt.app_thread_id is not None
        turn, native_turn = _active_turn(reader, pt.id)
        unsent = turn is not None and native_turn is None and not _sent(paths, pt.native_thread_ref)
        committed = reader.get(JournalCommitted, s.id)
        out.append(
            Reattach(
                thread_id=pt.app_thread_id,
                session=s,
                binding=SessionBinding(
                    provider=s.provider,
                    provider_session_id=s.id,
                    provider_thread_id=pt.id,
                    thread_id=pt.app_thread_id,
                ),
                turn=turn,
                native_thread_ref=pt.native_thread_ref,
                native_turn_ref=native_turn,
                paths=paths,
                state=state,
                committed=(
                    committed.offset
                    if committed is not None and committed.holder_id == s.holder.holder_id
                    else 0
                ),
                unsent=unsent,
            )
        )
    return out


def _turn_sent(paths: HeldPaths) -> bool:
    """Whether the journal's last turn request came after the last turn's end: a turn
    started in the log whose request the provider never got has neither."""
    last_start = last_end = 0
    for _, record in iter_file(os.fspath(paths.journal)):
        if record.kind is Kind.IN and b'"turn/start"' in record.payload:
            last_start = record.offset
        elif record.kind is Kind.OUT and b'"turn/completed"' in record.payload:
            last_end = record.offset
    return last_start > last_end


def _sent(paths: HeldPaths, thread_ref: str | None) -> bool:
    """:func:`_turn_sent`, of the one thread on a shared process's journal (issue 21)."""
    if thread_ref is None or not (paths.dir / SHARED_MARK).exists():
        return _turn_sent(paths)
    return _thread_turn_sent(paths, thread_ref)


def _thread_turn_sent(paths: HeldPaths, thread_ref: str) -> bool:
    """Whether the journal's last ``turn/start`` of ``thread_ref`` came after that
    thread's last ``turn/completed`` (a shared journal has every thread's frames)."""
    named = f'"threadId":"{thread_ref}"'.encode()
    last_start = last_end = 0
    for _, record in iter_file(os.fspath(paths.journal)):
        if named not in record.payload.replace(b'": "', b'":"'):
            continue
        if record.kind is Kind.IN and b'"turn/start"' in record.payload:
            last_start = record.offset
        elif record.kind is Kind.OUT and b'"turn/completed"' in record.payload:
            last_end = record.offset
    return last_start > last_end


def _active_turn(
    reader: ReadModel, provider_thread_id: str
) -> tuple[TurnBinding | None, str | None]:
    for turn in reader.select_by_status(ProviderTurn, ("pending", "running")):
        if turn.provider_thread_id != provider_thread_id or turn.run_attempt_id is None:
            continue
        attempt = reader.get(RunAttempt, turn.run_attempt_id)
        if attempt is None:
            continue
        binding = TurnBinding(
            run_id=attempt.run_id,
            attempt_id=attempt.id,
            root_node_id=attempt.root_node_id,
            provider_turn_id=turn.id,
        )
        return binding, turn.native_turn_ref
    return None, None


def held_of(reattaches: list[Reattach]) -> Held:
    return Held(
        sessions=frozenset(r.session.id for r in reattaches),
        threads=frozenset(r.thread_id for r in reattaches),
    )
