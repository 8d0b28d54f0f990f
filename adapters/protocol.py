"""The one protocol every provider adapter implements.

A *runtime* is one live provider process (or a lazily spawned one) hosting one
provider thread. Adapters put canonical :mod:`t3orch.provider_events` on the
:class:`~t3orch.ingest.queue.EventQueue` handed to
:meth:`ProviderAdapter.open_runtime` (its consumer takes them in batches); they
never write to the store. Resume is a required primitive, not a capability.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

import attrs

from adapters.transport import ProcessLauncher
from t3orch.domain.provider import ProviderCapabilities
from t3orch.domain.request import RequestDecision
from t3orch.domain.vocab import ProviderKind, RuntimeMode
from t3orch.ingest.queue import EventQueue

#: The decision vocabulary is the core's (requests store it); adapters translate it.
Decision = RequestDecision


@attrs.frozen
class RuntimeConfig:
    """How to run one provider runtime."""

    command: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    model: str | None = None
    runtime_mode: RuntimeMode = "approval-required"
    extra_args: Sequence[str] = ()
    #: Bound on how long a request to the provider may take before ProviderTimeout.
    request_timeout_s: float = 30.0
    #: The runtime is opened to resume a thread; a provider that picks its mode when
    #: it is spawned (the stand-in plays a different transcript segment) needs it.
    resuming: bool = False
    #: The provider already runs (a holder kept it across a daemon restart): the
    #: runtime replays what it said, sends nothing to set it up, and is given its
    #: thread by :meth:`ProviderRuntime.adopt`.
    reattaching: bool = False


@attrs.frozen
class ResumeRefs:
    native_thread_ref: str
    native_conversation_head_ref: str | None = None


@attrs.frozen
class RequestAnswer:
    decision: Decision
    message: str | None = None
    #: Answers to user-input questions, by question id.
    answers: Mapping[str, str] | None = None


class RawFrameSink(Protocol):
    """Where raw frames go (both directions); returns the raw event id it assigned."""

    def record(self, direction: Literal["incoming", "outgoing"], line: bytes) -> str: ...


class NullRawSink:
    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def record(self, direction: Literal["incoming", "outgoing"], line: bytes) -> str:
        return f"raw_{next(self._ids)}"


#: One line of a held provider's journal: who wrote it ("in": the daemon, to the
#: provider; "out": the provider), its offset and the line.
JournalLine = tuple[Literal["in", "out"], int, bytes]


class ProviderRuntime(Protocol):
    @property
    def capabilities(self) -> ProviderCapabilities: ...

    @property
    def pid(self) -> int | None: ...

    async def open_thread(self, resume: ResumeRefs | None) -> str:
        """Start a new native thread, or resume ``resume``; returns the native thread ref.

        Raises :class:`~adapters.errors.ResumeError` when the thread cannot be resumed.
        """

    async def start_turn(self, text: str) -> None: ...

    async def steer_turn(self, text: str) -> None:
        """Add input to the active turn; NotSupported where the provider cannot."""

    async def interrupt_turn(self) -> None:
        """Ask the provider to stop the active turn; TurnCompleted says when it did."""

    async def respond(self, native_request_ref: str, answer: RequestAnswer) -> None:
        """Answer a provider request exactly once; StaleRequest if it no longer waits."""

    async def fork_thread(self, resume: ResumeRefs) -> str:
        """Natively fork ``resume`` into a new native thread; returns its ref."""

    async def close(self) -> None:
        """Graceful stop (protocol close / stdin EOF); the supervisor escalates after."""

    def adopt(self, native_thread_ref: str | None, native_turn_ref: str | None) -> None:
        """Reattached: the thread (and the turn, if one runs) the provider already hosts,
        as the log has them. NotSupported where the runtime cannot be reattached to."""


class ProviderAdapter(Protocol):
    kind: ProviderKind

    def open_runtime(
        self,
        config: RuntimeConfig,
        launcher: ProcessLauncher,
        events: EventQueue,
        raw: RawFrameSink,
    ) -> AbstractAsyncContextManager[ProviderRuntime]:
        """Run a runtime for the ``async with`` body; leaving it kills and reaps the process.

        Events go to ``events`` in the order things happened; the runtime stops
        reading its provider while ``events`` is full. It does not close ``events``
        (the caller does, after the block).
        """
