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
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import attrs

from adapters.claude import journal as claude_journal
from adapters.codex import journal as codex_journal
from adapters.ownership import OwnerMark
from adapters.protocol import JournalLine
from supervisor.holder.layout import HeldPaths, HolderState, held_root
from supervisor.holder.wire import Kind, iter_file
from t3orch.commands.delivery import SEPARATOR, carried_by
from t3orch.commands.reconcile import Held
from t3orch.commands.runs import run_attempts
from t3orch.domain.context import ContextHandoff
from t3orch.domain.provider import JournalCommitted, ProviderSession, ProviderThread, ProviderTurn
from t3orch.domain.run import RunAttempt
from t3orch.domain.vocab import PROVIDER_THREAD_DEAD, ProviderKind
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.store.interface import ReadModel

log = logging.getLogger(__name__)

LIVE_SESSION = ("starting", "ready", "running", "waiting")

#: The file in a holder's directory that says its process is shared by many threads
#: (its content: their compatibility key; ``supervisor/shared_codex.py``, issue 21).
SHARED_MARK = "shared-codex"

#: Each held provider's reading of its journal: whether the active turn's input was sent.
_TURN_SENT: Mapping[ProviderKind, Callable[[Iterable[JournalLine], int, int | None], bool]] = {
    "codex": codex_journal.turn_sent,
    "standin": codex_journal.turn_sent,  # it speaks Codex's protocol
    "claude": claude_journal.turn_sent,
}


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
    if not OwnerMark(pid, started_at).alive() or not paths.serves():
        return None
    return state


def find_held(reader: ReadModel, state_dir: Path, daemon_id: str | None = None) -> list[Reattach]:
    """Every live session of the log whose holder still runs (in a fleet, of this
    daemon's sessions only: another daemon's holders are on its own machine).

    One pass over the provider threads and one over the active turns, whatever the
    number of held sessions: a daemon start with hundreds held reads each table once.
    """
    out = []
    root = held_root(state_dir)
    threads: dict[str, ProviderThread] = {}
    for candidate in reader.select(ProviderThread):
        sid = candidate.provider_session_id
        if candidate.app_thread_id is None or sid is None:
            continue
        best = threads.get(sid)
        if best is None or _serves_before(candidate, best):
            threads[sid] = candidate
    turns: dict[str, tuple[TurnBinding, ProviderTurn]] | None = None
    for s in reader.select_by_status(ProviderSession, LIVE_SESSION):
        theirs = daemon_id is not None and s.owner_daemon_id not in (None, daemon_id)
        if s.holder is None or theirs:
            continue
        paths = HeldPaths(root / s.holder.holder_id)
        state = holder_alive(paths, s.holder.pid, s.holder.started_at)
        if state is None:
            log.info("session %s: its holder %s is gone", s.id, s.holder.holder_id)
            continue
        pt = threads.get(s.id)
        if pt is None:
            continue
        assert pt.app_thread_id is not None
        if turns is None:
            turns = _active_turns(reader)
        turn, active = turns.get(pt.id, (None, None))
        native_turn = None if active is None else active.native_turn_ref
        journal = reader.get(JournalCommitted, s.id)
        committed = (
            journal.offset if journal is not None and journal.holder_id == s.holder.holder_id else 0
        )
        unsent = (
            active is not None
            and native_turn is None
            and not _TURN_SENT[s.provider](
                _journal_lines(paths, pt.native_thread_ref),
                committed,
                _begun_after(active, s.holder.holder_id),
            )
        )
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
                committed=committed,
                unsent=unsent,
            )
        )
    return out


def _serves_before(pt: ProviderThread, other: ProviderThread) -> bool:
    """Whether ``pt`` rather than ``other`` (of one session) is the thread its runtime
    serves: a root one (a subagent's child thread is not), one still in use (a resume
    fallback's replacement, not the ``error``/``closed`` thread it replaced, which ran
    more runs and still names the session), then the one that ran the latest run."""

    def rank(p: ProviderThread) -> tuple[bool, bool, int]:
        return (
            p.owner_node_id is None,
            p.status not in PROVIDER_THREAD_DEAD,
            p.last_run_ordinal or 0,
        )

    return rank(pt) > rank(other)


def _journal_lines(paths: HeldPaths, thread_ref: str | None) -> Iterator[JournalLine]:
    """The journal's lines both ways; of a shared process's journal (which has every
    thread's frames, issue 21), only those naming ``thread_ref``."""
    named = None
    if thread_ref is not None and (paths.dir / SHARED_MARK).exists():
        named = f'"threadId":"{thread_ref}"'.encode()
    for _, record in iter_file(os.fspath(paths.journal)):
        if named is not None and named not in record.payload.replace(b'": "', b'":"'):
            continue
        if record.kind is Kind.IN:
            yield "in", record.offset, record.payload
        elif record.kind is Kind.OUT:
            yield "out", record.offset, record.payload


def _active_turns(reader: ReadModel) -> dict[str, tuple[TurnBinding, ProviderTurn]]:
    """Provider thread id -> its active turn bound to its run, and the turn."""
    out: dict[str, tuple[TurnBinding, ProviderTurn]] = {}
    for turn in reader.select_by_status(ProviderTurn, ("pending", "running")):
        if turn.run_attempt_id is None or turn.provider_thread_id in out:
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
        out[turn.provider_thread_id] = (binding, turn)
    return out


def _begun_after(turn: ProviderTurn, holder_id: str) -> int | None:
    """How far the daemon had read this holder's journal when it began ``turn`` (None: it
    was begun before this holder's process ran it, or the row does not say)."""
    mark = turn.begun_after
    return mark.offset if mark is not None and mark.holder_id == holder_id else None


def begun_handoff(reader: ReadModel, turn: TurnBinding, provider_thread_id: str) -> str | None:
    """The context handed off with ``turn`` (its run's attempt) to that provider thread, as
    it was materialized when the turn began (``prepare_handoff``: its handoffs, in the order
    they were delivered, a resume fallback's summary among them): a turn sent by the next
    daemon carries it as the first would have.

    Each handoff's item names the turn whose input it went with: a later attempt on the
    same conversation (a steering restart) carries none, or the provider would be told
    twice; a recovered attempt on a conversation started afresh carries what it was given
    again. Items that name no turn (written before they did) go with the run's first
    attempt on the provider thread.
    """
    carried = carried_by(reader, provider_thread_id, turn.run_id, turn.provider_turn_id)
    if carried is None:
        attempts = run_attempts(reader, turn.run_id)
        on_pt = [a.id for a in attempts if a.provider_thread_id == provider_thread_id]
        if on_pt[:1] != [turn.attempt_id]:
            return None
        pt = reader.get(ProviderThread, provider_thread_id)
        handoffs = (reader.get(ContextHandoff, h) for h in pt.handoff_ids) if pt else ()
        carried = [h for h in handoffs if h is not None and h.target_run_id == turn.run_id]
    return SEPARATOR.join(h.summary_text for h in carried) or None


def held_of(reattaches: list[Reattach]) -> Held:
    return Held(
        sessions=frozenset(r.session.id for r in reattaches),
        threads=frozenset(r.thread_id for r in reattaches),
    )
