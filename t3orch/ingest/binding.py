"""Which app entities a provider runtime's events belong to."""

from __future__ import annotations

import attrs

from t3orch.domain.vocab import ProviderKind
from t3orch.ids import (
    NodeId,
    ProviderSessionId,
    ProviderThreadId,
    ProviderTurnId,
    RunAttemptId,
    RunId,
    ThreadId,
)


@attrs.frozen
class TurnBinding:
    """The run attempt a provider turn executes. Rebuilt from durable rows on recovery."""

    run_id: RunId
    attempt_id: RunAttemptId
    root_node_id: NodeId
    provider_turn_id: ProviderTurnId


@attrs.frozen
class SessionBinding:
    provider: ProviderKind
    provider_session_id: ProviderSessionId
    provider_thread_id: ProviderThreadId | None
    thread_id: ThreadId | None
    turn: TurnBinding | None = None
    #: Ended turns whose subagents the provider still runs: their children's later
    #: events are bound to them, not to whatever turn is active now.
    lingering: tuple[TurnBinding, ...] = ()
    #: ``turn``'s input may never have reached the provider: its start was not
    #: acknowledged. A turn ending so gives back what was delivered with it
    #: (``settle.give_back``). Not part of equality: a batch bound before the
    #: acknowledgement still joins the ones after it.
    turn_unsent: bool = attrs.field(default=False, eq=False)

    def with_turn(self, turn: TurnBinding | None) -> SessionBinding:
        return attrs.evolve(self, turn=turn)
