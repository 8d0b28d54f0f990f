"""Replaying a transcript through a real adapter: the driver behind replay tests and
``t3orch replay --provider P FILE``.

A transcript records what a client *did* (its outbound frames) and what the
provider answered. To replay it, the adapter runs against the in-memory
:class:`~adapters.replay_process.ReplayLauncher` and a driver performs the
client operations the recording implies, each when the adapter is ready for
it. Providers plug in through :class:`ReplayProvider`: how to build their
adapter and how to read a transcript's outbound frames back into :data:`Op`
values, each guarded by a :class:`When` (counts of canonical events already
emitted in that process, e.g. "after the RequestOpened for ref 0").

The registry is keyed by provider name; ``adapters.<name>.replay_ops`` is
imported on first use and must call :func:`register_replay_provider`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio

from adapters.errors import AdapterError
from adapters.protocol import (
    NullRawSink,
    ProviderAdapter,
    ProviderRuntime,
    RawFrameSink,
    RequestAnswer,
    ResumeRefs,
    RuntimeConfig,
)
from adapters.replay_process import open_replay_launcher
from adapters.transcript import Transcript, load_transcript
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import ProviderEvent, RuntimeExited

#: Bound on each wait of the driver (an op's precondition, the final exit).
DEFAULT_STEP_TIMEOUT_S = 10.0


# --- operations ------------------------------------------------------------------


@attrs.frozen
class OpenThread:
    resume: ResumeRefs | None = None


@attrs.frozen
class StartTurn:
    text: str


@attrs.frozen
class SteerTurn:
    text: str


@attrs.frozen
class Interrupt:
    pass


@attrs.frozen
class Respond:
    native_request_ref: str
    answer: RequestAnswer


@attrs.frozen
class Fork:
    resume: ResumeRefs


@attrs.frozen
class Call:
    """A provider-specific runtime method, e.g. ``Call("read_thread", {...})``."""

    method: str
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)


Op = OpenThread | StartTurn | SteerTurn | Interrupt | Respond | Fork | Call


@attrs.frozen
class Need:
    """At least ``count`` events of ``event_type`` whose attributes equal ``where``."""

    event_type: type[Any]
    count: int = 1
    where: Mapping[str, Any] = attrs.field(factory=dict)

    def satisfied(self, events: Sequence[ProviderEvent]) -> bool:
        seen = 0
        for event in events:
            if isinstance(event, self.event_type) and all(
                getattr(event, key, None) == value for key, value in self.where.items()
            ):
                seen += 1
                if seen >= self.count:
                    return True
        return self.count <= 0


@attrs.frozen
class When:
    """All of ``needs`` hold over the events of the current process."""

    needs: tuple[Need, ...] = ()

    def satisfied(self, events: Sequence[ProviderEvent]) -> bool:
        return all(need.satisfied(events) for need in self.needs)


@attrs.frozen
class Step:
    op: Op
    when: When = When()
    #: The recorded provider refused this operation (an error reply, e.g. a resume
    #: of a thread it no longer has): the adapter must raise, and the replay goes on,
    #: as the recorded client did.
    fails: bool = False


class ReplayMismatch(Exception):
    """The adapter did not do what the transcript recorded."""


@attrs.frozen
class SegmentPlan:
    """The operations of one provider process (one transcript segment)."""

    steps: tuple[Step, ...]


@attrs.frozen
class ReplayPlan:
    segments: tuple[SegmentPlan, ...]


# --- registry --------------------------------------------------------------------


@attrs.frozen
class ReplayProvider:
    """How one provider replays: its adapter, its plan, the config to run it with."""

    make_adapter: Callable[[], ProviderAdapter]
    plan: Callable[[Transcript], ReplayPlan]
    config: Callable[[Transcript], RuntimeConfig] = attrs.field(
        default=lambda transcript: RuntimeConfig(
            command=list(transcript.header.argv) or [transcript.provider],
            env={},
            cwd="/",
        )
    )


_PROVIDERS: dict[str, ReplayProvider] = {}


def register_replay_provider(name: str, provider: ReplayProvider) -> None:
    _PROVIDERS[name] = provider


def replay_provider(name: str) -> ReplayProvider:
    if name not in _PROVIDERS:
        try:
            importlib.import_module(f"adapters.{name}.replay_ops")
        except ModuleNotFoundError as exc:
            raise KeyError(f"no replay support for provider {name!r}") from exc
    if name not in _PROVIDERS:
        raise KeyError(f"adapters.{name}.replay_ops did not register a replay provider")
    return _PROVIDERS[name]


# --- driver ----------------------------------------------------------------------


class _Collector:
    """Receives the adapter's events; wakes waiters whenever one arrives."""

    def __init__(self) -> None:
        self.all: list[ProviderEvent] = []
        self.segment: list[ProviderEvent] = []
        self._changed = trio.Event()

    async def collect(self, events: EventQueue) -> None:
        while batch := await events.take():
            self.all.extend(batch)
            self.segment.extend(batch)
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for(self, when: When) -> None:
        while not when.satisfied(self.segment):
            await self._changed.wait()


async def perform(runtime: ProviderRuntime, op: Op) -> None:
    """Carry out one operation on a runtime."""
    if isinstance(op, OpenThread):
        await runtime.open_thread(op.resume)
    elif isinstance(op, StartTurn):
        await runtime.start_turn(op.text)
    elif isinstance(op, SteerTurn):
        await runtime.steer_turn(op.text)
    elif isinstance(op, Interrupt):
        await runtime.interrupt_turn()
    elif isinstance(op, Respond):
        await runtime.respond(op.native_request_ref, op.answer)
    elif isinstance(op, Fork):
        await runtime.fork_thread(op.resume)
    else:
        await getattr(runtime, op.method)(**op.kwargs)


async def _perform_step(runtime: ProviderRuntime, step: Step) -> None:
    try:
        await perform(runtime, step.op)
    except AdapterError as exc:
        if not step.fails:
            raise ReplayMismatch(f"{_op_name(step.op)} failed: {exc}") from exc
        return
    if step.fails:
        raise ReplayMismatch(f"{_op_name(step.op)} succeeded; the recorded provider refused it")


def _op_name(op: Op) -> str:
    return op.method if isinstance(op, Call) else type(op).__name__


async def replay_transcript(
    transcript: Transcript,
    *,
    speed: float = 0.0,
    strict: bool = True,
    raw: RawFrameSink | None = None,
    step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S,
) -> list[ProviderEvent]:
    """Run the provider's adapter over ``transcript``; returns every canonical event."""
    provider = replay_provider(transcript.provider)
    plan = provider.plan(transcript)
    config = provider.config(transcript)
    sink = raw if raw is not None else NullRawSink()
    collector = _Collector()
    try:
        async with open_replay_launcher(transcript, speed=speed, strict=strict) as launcher:
            for number, segment in enumerate(plan.segments, start=1):
                collector.segment = []
                adapter = provider.make_adapter()
                events = EventQueue()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(collector.collect, events)
                    async with (
                        events,
                        adapter.open_runtime(config, launcher, events, sink) as runtime,
                    ):
                        for step in segment.steps:
                            try:
                                with trio.fail_after(step_timeout_s):
                                    await collector.wait_for(step.when)
                            except trio.TooSlowError as exc:
                                raise ReplayMismatch(
                                    f"process {number}: {_op_name(step.op)} waited "
                                    f"{step_timeout_s:g}s for events that never came"
                                ) from exc
                            with trio.fail_after(step_timeout_s):
                                await _perform_step(runtime, step)
                        # The player emits the rest of the segment whatever we do; closing
                        # stdin ends a segment that waits for it, and the exit is awaited
                        # so that no recorded frame is cut off by the teardown's kill.
                        with trio.fail_after(step_timeout_s):
                            await runtime.close()
                            await collector.wait_for(When((Need(RuntimeExited),)))
    except BaseExceptionGroup as group:
        # A mismatch surfaces through the nurseries as a group: raise it bare.
        mismatch = _only_mismatch(group)
        if mismatch is None:
            raise
        raise mismatch from group
    return collector.all


def _only_mismatch(group: BaseExceptionGroup[BaseException]) -> ReplayMismatch | None:
    """The ReplayMismatch ``group`` holds, if that is all it holds."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    if len(leaves) == 1 and isinstance(leaves[0], ReplayMismatch):
        return leaves[0]
    return None


async def replay_events(provider: str, path: str | Path, **kwargs: Any) -> list[ProviderEvent]:
    """Load ``path`` and replay it; ``provider`` must match the transcript's header."""
    transcript = load_transcript(path)
    if transcript.provider != provider:
        raise ValueError(f"{path}: a {transcript.provider} transcript, not {provider}")
    return await replay_transcript(transcript, **kwargs)


def event_json(event: ProviderEvent) -> bytes:
    """One canonical event as a JSON line (what ``t3orch replay`` prints)."""
    return msgspec.json.encode(event)


__all__ = [
    "Call",
    "Fork",
    "Interrupt",
    "Need",
    "Op",
    "OpenThread",
    "ReplayMismatch",
    "ReplayPlan",
    "ReplayProvider",
    "Respond",
    "SegmentPlan",
    "StartTurn",
    "SteerTurn",
    "Step",
    "When",
    "event_json",
    "perform",
    "register_replay_provider",
    "replay_events",
    "replay_provider",
    "replay_transcript",
]
