"""Subscription topics: the snapshot each one reads and which events concern it.

A filter is per subscription because the execution graph's is stateful: provider
turns name their provider thread, not the app thread, so the filter learns the
thread's provider threads from the snapshot and from later events.
"""

from __future__ import annotations

from typing import Any

import attrs

from t3orch.api.params import THREAD_TOPICS
from t3orch.events import EventEnvelope, ProviderThreadUpserted, ProviderTurnUpserted
from t3orch.projections import views
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import ReadModel

_SHELL = frozenset({"thread.upserted", "run.upserted", "runtime_request.upserted"})
_SESSIONS = frozenset({"provider_session.upserted", "provider.usage", "provider.diagnostic"})
_REQUESTS = frozenset({"runtime_request.upserted"})


@attrs.define
class TopicFilter:
    topic: str
    thread_id: str | None = None
    provider_threads: set[str] = attrs.field(factory=set)

    def concerns(self, env: EventEnvelope) -> bool:
        match self.topic:
            case "threadShell":
                return env.type in _SHELL
            case "providerSessions":
                return env.type in _SESSIONS
            case "pendingRequests":
                return env.type in _REQUESTS
            case "threadDetail":
                return env.thread_id == self.thread_id
            case "executionGraph":
                return self._graph(env)
        return False

    def _graph(self, env: EventEnvelope) -> bool:
        payload = env.payload
        if isinstance(payload, ProviderThreadUpserted) and env.thread_id == self.thread_id:
            self.provider_threads.add(payload.provider_thread.id)
        if isinstance(payload, ProviderTurnUpserted):
            return payload.turn.provider_thread_id in self.provider_threads
        return env.thread_id == self.thread_id


def check_topic(topic: str, thread_id: str | None) -> None:
    if topic in THREAD_TOPICS and thread_id is None:
        raise CommandRejected("thread_required", f"topic {topic} needs a threadId")
    if topic not in THREAD_TOPICS and thread_id is not None:
        raise CommandRejected("thread_not_allowed", f"topic {topic} takes no threadId")


def read_view(
    store: ReadModel,
    topic: str,
    thread_id: str | None,
    *,
    limit: int = views.DETAIL_WINDOW,
    before_position: int | None = None,
    hosts: views.FleetHosts | None = None,
) -> Any:
    """The topic's read model; call inside ``store.snapshot()``. ``hosts``: the fleet's
    daemons, for each thread's host."""
    try:
        match topic:
            case "threadShell":
                return views.thread_shell(store, hosts)
            case "providerSessions":
                return views.provider_sessions(store)
            case "pendingRequests":
                return views.pending_requests(store)
            case "threadDetail":
                assert thread_id is not None
                return views.thread_detail(
                    store, thread_id, limit=limit, before_position=before_position, hosts=hosts
                )
            case "executionGraph":
                assert thread_id is not None
                return views.execution_graph(store, thread_id)
    except views.UnknownThread:
        raise CommandRejected("unknown_thread", f"no thread {thread_id!r}") from None
    raise CommandRejected("unknown_topic", f"no topic {topic!r}")


def open_filter(store: ReadModel, topic: str, thread_id: str | None) -> TopicFilter:
    """The topic's filter as of the current read; call inside ``store.snapshot()``."""
    flt = TopicFilter(topic, thread_id)
    if thread_id is not None:
        if store.row("thread", thread_id) is None:
            raise CommandRejected("unknown_thread", f"no thread {thread_id!r}")
        flt.provider_threads = {r.id for r in store.rows("provider_thread", thread_id=thread_id)}
    return flt
