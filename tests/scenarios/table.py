"""One scenario table, two providers.

Each scenario is written once against :class:`Driver`, the little a scenario needs
from a provider (its runtime, a prompt that runs a side-effecting command, a way to
kill the process, what the fake model server saw). A provider's events are reduced
to a *shape*, a list of short tokens, and every scenario expects the same shape for
Codex and Claude: the canonical vocabulary is what makes the two interchangeable,
so this is where a provider-specific leak would show.

Shape tokens: ``turn`` (TurnStarted), ``turn:<status>`` (TurnCompleted),
``request:<kind>``, ``resolved:<decision>``, ``command:<item status>`` (a completed
``command_execution`` item), ``exit:killed`` (RuntimeExited by SIGKILL).
Assistant text, deltas, usage, refs and diagnostics are left out of the shape
(each provider words and chunks its text differently) and asserted separately
where a scenario is about them.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import attrs

from adapters.protocol import ProviderRuntime, RequestAnswer, ResumeRefs
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
)
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ProviderEvent,
    RequestOpened,
    RequestResolved,
    RuntimeExited,
    TurnCompleted,
    TurnStarted,
)
from tests.claude.support import Events

RuntimeAndEvents = tuple[ProviderRuntime, Events]


class Driver(Protocol):
    """What a scenario needs from one provider."""

    name: str
    #: The agent's working directory (where a command's side effect lands).
    work: Path

    def runtime(self) -> AbstractAsyncContextManager[RuntimeAndEvents]:
        """A fresh runtime (a new provider process once a thread is opened)."""

    def command_prompt(self, marker: str) -> str:
        """A prompt making the fake model run ``touch <marker>`` behind an approval."""

    async def kill(self, runtime: ProviderRuntime, native_thread_ref: str) -> None:
        """SIGKILL the runtime's process once its last turn is durable."""

    def last_request_user_texts(self) -> list[str]:
        """The user texts of the newest request the fake model server received."""


def shape(events: Sequence[ProviderEvent]) -> list[str]:
    out: list[str] = []
    for event in events:
        if isinstance(event, TurnStarted):
            out.append("turn")
        elif isinstance(event, TurnCompleted):
            out.append(f"turn:{event.status}")
        elif isinstance(event, RequestOpened):
            out.append(f"request:{event.kind}")
        elif isinstance(event, RequestResolved):
            out.append(f"resolved:{event.decision}")
        elif isinstance(event, ItemCompleted) and isinstance(event.content, CommandExecution):
            out.append(f"command:{event.status}")
        elif isinstance(event, RuntimeExited) and event.signal == signal.SIGKILL:
            out.append("exit:killed")
    return out


def assistant_texts(events: Sequence[ProviderEvent]) -> list[str]:
    return [
        e.content.text
        for e in events
        if isinstance(e, ItemCompleted) and isinstance(e.content, AssistantMessage)
    ]


Run = Callable[[Driver], Awaitable[list[ProviderEvent]]]


@attrs.frozen
class Scenario:
    name: str
    expected: tuple[str, ...]
    run: Run


async def streamed_reply(driver: Driver) -> list[ProviderEvent]:
    async with driver.runtime() as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn("hello there")
        await events.until(TurnCompleted)
        deltas = [e for e in events.seen if isinstance(e, ItemDelta)]
        assert len(deltas) >= 2, "the reply was not streamed"
        assert assistant_texts(events.seen) == ["ack: hello there"]
        return events.seen


async def _command(driver: Driver, decision: str, marker: str) -> list[ProviderEvent]:
    async with driver.runtime() as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn(driver.command_prompt(marker))
        opened = await events.until(RequestOpened)
        await runtime.respond(opened.native_request_ref, RequestAnswer(decision))  # type: ignore[arg-type]
        await events.until(TurnCompleted)
        return events.seen


async def approved_command(driver: Driver) -> list[ProviderEvent]:
    events = await _command(driver, "accept", "approved.txt")
    assert (driver.work / "approved.txt").exists(), "the approved command did not run"
    return events


async def declined_command(driver: Driver) -> list[ProviderEvent]:
    events = await _command(driver, "decline", "declined.txt")
    assert not (driver.work / "declined.txt").exists(), "the declined command ran"
    return events


async def interrupt(driver: Driver) -> list[ProviderEvent]:
    async with driver.runtime() as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn("SLOW")
        await events.until(ItemDelta)
        await runtime.interrupt_turn()
        await events.until(TurnCompleted)
        return events.seen


async def kill_resume(driver: Driver) -> list[ProviderEvent]:
    async with driver.runtime() as (runtime, first):
        thread = await runtime.open_thread(None)
        await runtime.start_turn("remember the word PAPAYA")
        await first.until(TurnCompleted)
        await driver.kill(runtime, thread)
        await first.until(RuntimeExited)
    async with driver.runtime() as (runtime, second):
        assert await runtime.open_thread(ResumeRefs(thread)) == thread
        await runtime.start_turn("RECALL")
        await second.until(TurnCompleted)
    assert "remember the word PAPAYA" in driver.last_request_user_texts()
    assert "PAPAYA" in assistant_texts(second.seen)[-1]
    return [*first.seen, *second.seen]


async def backend_error(driver: Driver) -> list[ProviderEvent]:
    async with driver.runtime() as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn("FAIL")
        done = await events.until(TurnCompleted)
        assert done.error, "a failed turn says why"
        return events.seen


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("streamed_reply", ("turn", "turn:completed"), streamed_reply),
    Scenario(
        "approved_command",
        ("turn", "request:command", "resolved:accept", "command:completed", "turn:completed"),
        approved_command,
    ),
    Scenario(
        "declined_command",
        ("turn", "request:command", "resolved:decline", "command:declined", "turn:completed"),
        declined_command,
    ),
    Scenario("interrupt", ("turn", "turn:interrupted"), interrupt),
    Scenario(
        "kill_resume",
        ("turn", "turn:completed", "exit:killed", "turn", "turn:completed"),
        kill_resume,
    ),
    Scenario("backend_error", ("turn", "turn:failed"), backend_error),
)
