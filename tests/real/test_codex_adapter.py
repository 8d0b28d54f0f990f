"""The Codex adapter driving the real pinned ``codex app-server`` against the fake
Responses API on 127.0.0.1. Everything is asserted on canonical events."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from adapters.codex import CodexAdapter, CodexRuntime
from adapters.diagnostics import RotatingRawLog, read_raw_log
from adapters.errors import ResumeError
from adapters.protocol import RequestAnswer, ResumeRefs, RuntimeConfig
from fixtures.fakes.codex_home import make_codex_home, make_work_dir, resolve_codex_binary
from fixtures.fakes.responses_api import FakeResponsesServer, user_texts
from supervisor.launcher import RecordingLauncher
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
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
)
from tests.adapters.support import QueuedEvents

BINARY = resolve_codex_binary()
TURN_S = 30.0

pytestmark = [
    pytest.mark.real_codex,
    pytest.mark.skipif(
        BINARY is None, reason="codex 0.169.0 not installed: run scripts/install-codex"
    ),
]


class Events(QueuedEvents):
    def __init__(self) -> None:
        super().__init__(wait_s=TURN_S)

    async def until(self, kind: type[Any], where: Callable[[Any], bool] = lambda _: True) -> Any:
        """The next event of ``kind`` satisfying ``where`` (bounded wait)."""
        with trio.fail_after(TURN_S):
            while True:
                event = await self.next()
                if isinstance(event, kind) and where(event):
                    return event

    def since(self, marker: int) -> list[ProviderEvent]:
        return self.seen[marker:]


@attrs.define
class Rig:
    fake: FakeResponsesServer
    work: Path
    config: RuntimeConfig
    launcher: RecordingLauncher
    raw_dir: Path

    @asynccontextmanager
    async def runtime(self, name: str = "pss_real") -> AsyncIterator[tuple[CodexRuntime, Events]]:
        events = Events()
        with RotatingRawLog(self.raw_dir, "codex", name) as raw:
            async with CodexAdapter().open_runtime(
                self.config, self.launcher, events.queue, raw
            ) as runtime:
                assert isinstance(runtime, CodexRuntime)
                await events.until(SessionReady)
                yield runtime, events


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    assert BINARY is not None
    with FakeResponsesServer() as fake:
        work = make_work_dir(tmp_path / "work")
        env = make_codex_home(tmp_path, fake.base_url, work)
        config = RuntimeConfig(
            command=[str(BINARY)],
            env=env,
            cwd=str(work),
            model="mock-model",
            request_timeout_s=TURN_S,
        )
        async with trio.open_nursery() as nursery:
            yield Rig(
                fake,
                work,
                config,
                RecordingLauncher(nursery),
                tmp_path / "raw",
            )
            nursery.cancel_scope.cancel()


async def run_turn(
    runtime: CodexRuntime, events: Events, text: str
) -> tuple[TurnCompleted, list[ProviderEvent]]:
    marker = len(events.seen)
    await runtime.start_turn(text)
    done = await events.until(TurnCompleted)
    return done, events.since(marker)


def texts_of(events: list[ProviderEvent]) -> list[str]:
    return [
        e.content.text
        for e in events
        if isinstance(e, ItemCompleted) and isinstance(e.content, AssistantMessage)
    ]


async def test_streamed_reply(rig: Rig) -> None:
    async with rig.runtime() as (runtime, events):
        thread = await runtime.open_thread(None)
        refs = await events.until(ThreadRefsLearned)
        assert refs.native_thread_ref == thread
        done, turn = await run_turn(runtime, events, "hello there")
        assert done.status == "completed" and done.usage
        deltas = [e.text for e in turn if isinstance(e, ItemDelta)]
        assert len(deltas) > 1 and "".join(deltas) == "ack: hello there"
        assert texts_of(turn) == ["ack: hello there"]
        await runtime.close()
        exited = await events.until(RuntimeExited)
        assert exited.code == 0
    # Both directions reached the raw log, with the fake's key never written.
    stored = read_raw_log(rig.raw_dir / "pss_real.jsonl")
    assert {r.direction for r in stored} == {"incoming", "outgoing"}
    assert "dummy" not in json.dumps([r.payload for r in stored])


async def _escalated(
    rig: Rig, decision: str, marker: str
) -> tuple[TurnCompleted, list[ProviderEvent]]:
    async with rig.runtime() as (runtime, events):
        await runtime.open_thread(None)
        begin = len(events.seen)
        await runtime.start_turn(f"ESCALATE RUN_SHELL: touch {marker} && echo ran-{marker}")
        opened = await events.until(RequestOpened)
        assert opened.kind == "command" and "touch" in opened.summary
        await runtime.respond(opened.native_request_ref, RequestAnswer(decision))  # type: ignore[arg-type]
        resolved = await events.until(RequestResolved)
        assert (resolved.native_request_ref, resolved.decision) == (
            opened.native_request_ref,
            decision,
        )
        done = await events.until(TurnCompleted)
        return done, events.since(begin)


async def test_approved_command_really_runs(rig: Rig) -> None:
    done, turn = await _escalated(rig, "accept", "approved.txt")
    assert done.status == "completed"
    (run,) = [
        e for e in turn if isinstance(e, ItemCompleted) and isinstance(e.content, CommandExecution)
    ]
    assert run.status == "completed" and run.content.exit_code == 0
    assert "ran-approved.txt" in run.content.output
    assert (rig.work / "approved.txt").exists()


async def test_every_offered_decision_is_one_codex_takes(rig: Rig) -> None:
    # The real request lists accept, the exec-policy amendment and cancel; t3orch
    # offers them in its own words (plus decline, which Codex takes unlisted).
    async with rig.runtime() as (runtime, events):
        await runtime.open_thread(None)
        await runtime.start_turn("ESCALATE RUN_SHELL: touch offered.txt")
        opened = await events.until(RequestOpened)
        assert opened.available_decisions == ["accept", "acceptForSession", "decline", "cancel"]
        await runtime.respond(opened.native_request_ref, RequestAnswer("cancel"))
        await events.until(TurnCompleted)


async def test_accept_and_remember_sends_the_amendment_and_the_command_runs(rig: Rig) -> None:
    done, turn = await _escalated(rig, "acceptForSession", "remembered.txt")
    assert done.status == "completed"
    (run,) = [
        e for e in turn if isinstance(e, ItemCompleted) and isinstance(e.content, CommandExecution)
    ]
    assert run.status == "completed" and run.content.exit_code == 0
    assert (rig.work / "remembered.txt").exists()
    sent = [
        r.payload["result"].get("decision")
        for r in read_raw_log(rig.raw_dir / "pss_real.jsonl")
        if r.direction == "outgoing" and isinstance(r.payload, dict) and "result" in r.payload
    ]
    rule = ["touch", "remembered.txt"]
    assert {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": rule}} in sent
    # Codex remembered it: it tells the model the prefix was saved.
    notes = [
        part.get("text", "")
        for body in rig.fake.requests
        for item in body["input"]
        if item.get("role") == "developer"
        for part in item.get("content") or []
    ]
    assert any("Approved command prefix saved" in n and '"remembered.txt"' in n for n in notes)


async def test_declined_command_does_not_run(rig: Rig) -> None:
    done, turn = await _escalated(rig, "decline", "declined.txt")
    assert done.status == "completed"
    (run,) = [
        e for e in turn if isinstance(e, ItemCompleted) and isinstance(e.content, CommandExecution)
    ]
    assert run.status == "declined"
    assert not (rig.work / "declined.txt").exists()


@pytest.mark.slow
async def test_interrupt_closes_the_streaming_item(rig: Rig) -> None:
    async with rig.runtime() as (runtime, events):
        await runtime.open_thread(None)
        begin = len(events.seen)
        await runtime.start_turn("SLOW")
        for _ in range(2):
            await events.until(ItemDelta)
        await runtime.interrupt_turn()
        done = await events.until(TurnCompleted)
        assert done.status == "interrupted"
        turn = events.since(begin)
        closed = [e for e in turn if isinstance(e, ItemCompleted) and e.status == "interrupted"]
        assert len(closed) == 1 and isinstance(closed[0].content, AssistantMessage)
        assert closed[0].content.text.startswith("slow 0 slow 1 ")
        assert turn.index(closed[0]) < turn.index(done)
        assert runtime.active_turn_ref is None


async def test_kill_then_resume_keeps_the_history(rig: Rig) -> None:
    async with rig.runtime("pss_first") as (runtime, events):
        thread = await runtime.open_thread(None)
        done, _ = await run_turn(runtime, events, "remember the word pineapple")
        assert done.status == "completed"
        await rig.launcher.children[-1].kill()  # SIGKILL to the process group
        exited = await events.until(RuntimeExited)
        assert exited.signal == signal.SIGKILL
    async with rig.runtime("pss_second") as (runtime, events):
        resumed = await runtime.open_thread(ResumeRefs(thread))
        assert resumed == thread
        refs = await events.until(ThreadRefsLearned)
        assert refs.native_thread_ref == thread
        done, turn = await run_turn(runtime, events, "RECALL")
        assert done.status == "completed"
        assert "remember the word pineapple" in texts_of(turn)[-1]
    # The second process's model request carried the first process's user text.
    assert "remember the word pineapple" in user_texts(rig.fake.requests[-1])


async def test_fork_carries_the_parent_history(rig: Rig) -> None:
    async with rig.runtime() as (runtime, events):
        parent = await runtime.open_thread(None)
        await run_turn(runtime, events, "the parent thread says hi")
        child = await runtime.fork_thread(ResumeRefs(parent))
        assert child != parent and runtime.native_thread_ref == child
        refs = await events.until(ThreadRefsLearned, lambda e: e.native_thread_ref == child)
        assert refs.forked_from_native_thread_ref == parent
        done, turn = await run_turn(runtime, events, "RECALL")
        assert done.status == "completed"
        assert "the parent thread says hi" in texts_of(turn)[-1]
        read = await runtime.read_thread(child)
        assert read["thread"]["forkedFromId"] == parent


async def test_resume_of_an_unknown_thread_is_not_found(rig: Rig) -> None:
    async with rig.runtime() as (runtime, _):
        with pytest.raises(ResumeError) as caught:
            await runtime.open_thread(ResumeRefs("01a22d22-0000-7000-8000-000000000000"))
        assert caught.value.reason == "not_found", caught.value.message


async def test_resume_of_a_thread_held_by_a_live_process_is_owned_elsewhere(rig: Rig) -> None:
    async with rig.runtime("pss_holder") as (holder, events):
        thread = await holder.open_thread(None)
        await run_turn(holder, events, "hold this")
        async with rig.runtime("pss_other") as (other, _):
            with pytest.raises(ResumeError) as caught:
                await other.open_thread(ResumeRefs(thread))
            assert caught.value.reason == "owned_elsewhere", caught.value.message
