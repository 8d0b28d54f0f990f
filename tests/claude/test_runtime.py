"""The runtime against a scripted process: the control protocol and the process lifetime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from adapters.claude import ClaudeAdapter, ClaudeOptions
from adapters.claude.control import HookCall, McpCall
from adapters.claude.runtime import TEARDOWN_TIMEOUT_S, ClaudeRuntime
from adapters.errors import NotSupported, ProviderGone, ResumeError, StaleRequest
from adapters.protocol import NullRawSink, RequestAnswer, ResumeRefs, RuntimeConfig
from adapters.transport import ExitStatus, OversizedLine
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import (
    Diagnostic,
    RequestCancelled,
    RequestOpened,
    RequestResolved,
    ResumeFailed,
    RuntimeExited,
    TurnStarted,
)

from .fake_process import BatchingFakeProcess, FakeLauncher, FakeProcess
from .support import Events, can_use_tool, init

CONFIG = RuntimeConfig(
    command=["/bin/claude"], env={"HOME": "/h"}, cwd="/w", model="m1", request_timeout_s=2.0
)


@asynccontextmanager
async def running(
    options: ClaudeOptions | None = None,
    queue: EventQueue | None = None,
    launcher: FakeLauncher | None = None,
) -> AsyncIterator[tuple[ClaudeRuntime, FakeLauncher, Events]]:
    launcher = launcher or FakeLauncher()
    events = Events(queue)
    adapter = ClaudeAdapter(options or ClaudeOptions(session_id_factory=lambda: "new-session"))
    async with adapter.open_runtime(CONFIG, launcher, events.queue, NullRawSink()) as runtime:
        yield runtime, launcher, events


async def open_new(runtime: ClaudeRuntime, launcher: FakeLauncher) -> tuple[str, FakeProcess]:
    refs: list[str] = []
    async with trio.open_nursery() as nursery:

        async def opener() -> None:
            refs.append(await runtime.open_thread(None))

        nursery.start_soon(opener)
        process = await launcher.process()
        await process.answer_initialize()
    return refs[0], process


async def test_open_thread_spawns_with_our_session_id_and_initializes() -> None:
    hooks = {"PreToolUse": [{"matcher": "Bash", "hookCallbackIds": ["h0"]}]}
    async with running(ClaudeOptions(hooks=hooks, session_id_factory=lambda: "sid-1")) as (
        runtime,
        launcher,
        _,
    ):
        ref, process = await open_new(runtime, launcher)
        assert ref == "sid-1"
        spec = launcher.specs[0]
        assert list(spec.argv[:10]) == [
            "/bin/claude",
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
            "--permission-prompt-tool",
            "stdio",
            "--include-partial-messages",
            "--setting-sources=",
        ]
        assert list(spec.argv[10:12]) == ["--model", "m1"]
        assert list(spec.argv[12:14]) == ["--session-id", "sid-1"]
        assert (spec.cwd, dict(spec.env)) == ("/w", {"HOME": "/h"})
        assert process.sent[0]["request"] == {"subtype": "initialize", "hooks": hooks}
        assert process.sent[0]["request_id"].startswith("req_1_")
        assert runtime.pid == 4242


async def test_resume_and_fork_command_lines() -> None:
    async with running() as (runtime, launcher, _):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.open_thread, ResumeRefs("old", "head"))
            process = await launcher.process(0)
            await process.answer_initialize()
        assert list(launcher.specs[0].argv[-2:]) == ["--resume", "old"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.fork_thread, ResumeRefs("old"))
            fork = await launcher.process(1)
            await fork.answer_initialize()
        # The first process was closed gracefully before the fork started.
        assert process.stdin_closed
        assert list(launcher.specs[1].argv[-5:]) == [
            "--resume",
            "old",
            "--fork-session",
            "--session-id",
            "new-session",
        ]


async def test_start_turn_writes_a_user_frame_after_turn_started() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await runtime.start_turn("hello")
        assert await events.until(TurnStarted) == TurnStarted(native_turn_ref=None)
        assert process.sent[1] == {
            "type": "user",
            "session_id": "",
            "parent_tool_use_id": None,
            "message": {"role": "user", "content": "hello"},
        }
        with pytest.raises(NotSupported):
            await runtime.start_turn("again")  # a turn is running
        with pytest.raises(NotSupported):
            await runtime.steer_turn("more")


async def test_permission_is_answered_exactly_once() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await runtime.start_turn("go")
        process.emit(init("new-session"))
        process.emit(can_use_tool("cli-1", "Bash", {"command": "touch x"}, "t1"))
        opened = await events.until(RequestOpened)
        assert opened.kind == "command"
        await runtime.respond("cli-1", RequestAnswer(decision="accept"))
        assert process.sent[-1] == {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": "cli-1",
                "response": {"behavior": "allow", "updatedInput": {"command": "touch x"}},
            },
        }
        assert await events.until(RequestResolved) == RequestResolved(
            native_request_ref="cli-1", decision="accept"
        )
        sent = len(process.sent)
        with pytest.raises(StaleRequest):
            await runtime.respond("cli-1", RequestAnswer(decision="decline"))
        assert len(process.sent) == sent


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            RequestAnswer(decision="decline", message="no"),
            {"behavior": "deny", "message": "no"},
        ),
        (
            RequestAnswer(decision="cancel"),
            {
                "behavior": "deny",
                "message": "The user cancelled this tool call.",
                "interrupt": True,
            },
        ),
        (
            RequestAnswer(decision="acceptForSession"),
            {
                "behavior": "allow",
                "updatedInput": {"command": "touch x"},
                "updatedPermissions": [{"type": "setMode", "mode": "acceptEdits"}],
            },
        ),
    ],
)
async def test_permission_answers(answer: RequestAnswer, expected: dict[str, Any]) -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await runtime.start_turn("go")
        request = can_use_tool("cli-1", "Bash", {"command": "touch x"}, "t1")
        request["request"]["permission_suggestions"] = [{"type": "setMode", "mode": "acceptEdits"}]
        process.emit(request)
        await events.until(RequestOpened)
        await runtime.respond("cli-1", answer)
        assert process.sent[-1]["response"]["response"] == expected


async def test_user_question_answers_ride_on_the_input() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await runtime.start_turn("go")
        questions = {"questions": [{"question": "Colour?", "options": [{"label": "red"}]}]}
        process.emit(can_use_tool("q1", "AskUserQuestion", questions, "t1"))
        await events.until(RequestOpened)
        await runtime.respond("q1", RequestAnswer(decision="accept", answers={"Colour?": "red"}))
        assert process.sent[-1]["response"]["response"] == {
            "behavior": "allow",
            "updatedInput": {**questions, "answers": {"Colour?": "red"}},
        }


async def test_a_cancelled_request_is_never_answered() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await runtime.start_turn("go")
        process.emit(can_use_tool("cli-1", "Bash", {"command": "touch x"}, "t1"))
        await events.until(RequestOpened)
        process.emit({"type": "control_cancel_request", "request_id": "cli-1"})
        cancelled = await events.until(RequestCancelled)
        assert cancelled.native_request_ref == "cli-1"
        sent = len(process.sent)
        with pytest.raises(StaleRequest):
            await runtime.respond("cli-1", RequestAnswer(decision="accept"))
        assert len(process.sent) == sent


async def test_hooks_default_to_continue_and_use_the_handler_when_given() -> None:
    async with running() as (runtime, launcher, _):
        _, process = await open_new(runtime, launcher)
        process.emit(
            {
                "type": "control_request",
                "request_id": "h1",
                "request": {"subtype": "hook_callback", "callback_id": "hook_0", "input": {}},
            }
        )
        reply = await process.next_sent(1)
        assert reply["response"] == {
            "subtype": "success",
            "request_id": "h1",
            "response": {"continue": True},
        }

    calls: list[HookCall] = []

    async def handler(call: HookCall) -> dict[str, Any]:
        calls.append(call)
        return {"continue": False, "stopReason": "policy"}

    async with running(ClaudeOptions(hook_handler=handler)) as (runtime, launcher, _):
        _, process = await open_new(runtime, launcher)
        process.emit(
            {
                "type": "control_request",
                "request_id": "h2",
                "request": {
                    "subtype": "hook_callback",
                    "callback_id": "hook_7",
                    "tool_use_id": "t9",
                    "input": {"hook_event_name": "PreToolUse"},
                },
            }
        )
        reply = await process.next_sent(1)
        assert reply["response"]["response"] == {"continue": False, "stopReason": "policy"}
        assert calls == [HookCall("h2", "hook_7", "t9", {"hook_event_name": "PreToolUse"})]


async def test_mcp_messages_default_to_an_error_and_use_the_handler_when_given() -> None:
    def mcp(request_id: str, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "control_request",
            "request_id": request_id,
            "request": {"subtype": "mcp_message", "server_name": "t3", "message": message},
        }

    async with running() as (runtime, launcher, _):
        _, process = await open_new(runtime, launcher)
        process.emit(mcp("m1", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}))
        reply = (await process.next_sent(1))["response"]["response"]["mcp_response"]
        assert reply["id"] == 0 and reply["error"]["code"] == -32601
        process.emit(mcp("m2", {"jsonrpc": "2.0", "method": "notifications/initialized"}))
        ack = (await process.next_sent(2))["response"]["response"]
        assert ack == {"mcp_response": {"jsonrpc": "2.0", "result": {}}}

    async def server(call: McpCall) -> dict[str, Any] | None:
        return {"jsonrpc": "2.0", "id": call.message["id"], "result": {"tools": []}}

    async with running(ClaudeOptions(mcp_servers=["t3"], mcp_handler=server)) as (
        runtime,
        launcher,
        _,
    ):
        _, process = await open_new(runtime, launcher)
        assert "--mcp-config" in launcher.specs[0].argv
        process.emit(mcp("m3", {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}))
        reply = (await process.next_sent(1))["response"]["response"]["mcp_response"]
        assert reply == {"jsonrpc": "2.0", "id": 5, "result": {"tools": []}}


async def test_unknown_control_request_gets_an_error_reply() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        process.emit(
            {"type": "control_request", "request_id": "x1", "request": {"subtype": "teleport"}}
        )
        reply = await process.next_sent(1)
        assert reply["response"]["subtype"] == "error" and reply["response"]["request_id"] == "x1"
        diag = await events.until(Diagnostic)
        assert diag.code == "claude.unknown_control_request"


@pytest.mark.parametrize(
    "request_body",
    [
        {"subtype": "can_use_tool", "tool_name": 7, "input": {}, "tool_use_id": "t1"},
        {"subtype": ["hook_callback"]},
        {"tool_name": "Bash"},  # no subtype at all
    ],
)
async def test_a_control_request_with_unexpected_field_types_gets_an_error_reply(
    request_body: dict[str, Any],
) -> None:
    # The CLI waits for every control request's answer: one that does not decode
    # must be refused, not dropped.
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        process.emit({"type": "control_request", "request_id": "x2", "request": request_body})
        with trio.fail_after(2):
            reply = await process.next_sent(1)
        assert reply["type"] == "control_response"
        assert reply["response"]["subtype"] == "error" and reply["response"]["request_id"] == "x2"
        diag = await events.until(Diagnostic)
        assert diag.code == "claude.invalid_control_request" and diag.level == "error"


async def test_interrupt_sends_the_control_request_and_waits_for_its_response() -> None:
    async with running() as (runtime, launcher, _):
        _, process = await open_new(runtime, launcher)
        await runtime.interrupt_turn()  # no turn: nothing to do
        assert len(process.sent) == 1
        await runtime.start_turn("go")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.interrupt_turn)
            request = await process.next_sent(2)
            assert request["request"] == {"subtype": "interrupt"}
            process.respond_ok(request["request_id"], {"still_queued": []})


async def test_bad_lines_are_diagnostics_and_reading_goes_on() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        process.emit(b"not json at all")
        process.emit(OversizedLine(length=10**9, head=b'{"type":"assistant"'))
        process.emit(b'{"type": "assistant", "mess')
        codes = [e.code for e in await events.all_of(Diagnostic, 3)]
        assert codes == ["claude.non_json_line", "claude.oversized_line", "claude.malformed_line"]


async def test_exit_fails_waiters_and_reports_runtime_exited() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await runtime.start_turn("go")
        process.stderr = "boom"

        async def die() -> None:
            await process.next_sent(2)
            process.exit(ExitStatus(code=3, signal=None))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(die)
            with pytest.raises(ProviderGone):
                await runtime.interrupt_turn()
        exited = await events.until(RuntimeExited)
        assert exited == RuntimeExited(code=3, signal=None, stderr_tail="boom")
        with pytest.raises(ProviderGone):
            await runtime.start_turn("again")


async def test_resume_of_an_unknown_session_raises_resume_error() -> None:
    async with running() as (runtime, launcher, events):

        async def refuse() -> None:
            process = await launcher.process()
            process.stderr = "No conversation found with session ID: ghost\n"
            process.emit(
                {
                    "type": "result",
                    "subtype": "error_during_execution",
                    "is_error": True,
                    "num_turns": 0,
                    "session_id": "ghost",
                    "errors": ["No conversation found with session ID: ghost"],
                }
            )
            process.exit(ExitStatus(code=1, signal=None))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse)
            with pytest.raises(ResumeError) as caught:
                await runtime.open_thread(ResumeRefs("ghost"))
        assert caught.value.reason == "not_found"
        failed = await events.until(ResumeFailed)
        assert (failed.native_thread_ref, failed.reason) == ("ghost", "not_found")
        assert sum(isinstance(e, ResumeFailed) for e in events.seen) == 1


async def test_resume_that_dies_for_another_reason_is_an_error() -> None:
    async with running() as (runtime, launcher, events):

        async def crash() -> None:
            process = await launcher.process()
            process.stderr = "segfault"
            process.exit(ExitStatus(code=None, signal=11))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(crash)
            with pytest.raises(ResumeError) as caught:
                await runtime.open_thread(ResumeRefs("s"))
        assert caught.value.reason == "error"
        assert (await events.until(ResumeFailed)).reason == "error"


async def test_close_closes_stdin_and_leaving_kills() -> None:
    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await runtime.close()
        assert process.stdin_closed and process.status == ExitStatus(code=0, signal=None)
        assert (await events.until(RuntimeExited)).code == 0

    async with running() as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        process.exit_on_stdin_close = False
    assert process.status == ExitStatus(code=None, signal=9)


async def test_leaving_does_not_wait_for_a_process_left_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A held CLI the daemon leaves to its holder never exits here: leaving the runtime
    does not kill it, nor wait the teardown bound for an exit (it held every daemon
    restart 5 s per Claude runtime)."""
    async with running() as (runtime, launcher, _):
        _, process = await open_new(runtime, launcher)
        process.leave_running()
        left_at = trio.current_time()
    assert trio.current_time() - left_at < TEARDOWN_TIMEOUT_S / 10
    assert process.status is None, "not killed"


async def test_close_kills_a_process_that_ignores_stdin_close() -> None:
    options = ClaudeOptions(session_id_factory=lambda: "s", close_timeout_s=0.2)
    async with running(options) as (runtime, launcher, _):
        _, process = await open_new(runtime, launcher)
        process.exit_on_stdin_close = False
        await runtime.close()
        assert process.status == ExitStatus(code=None, signal=9)


async def test_a_handler_that_raises_answers_with_an_error() -> None:
    async def broken(call: HookCall) -> dict[str, Any]:
        raise RuntimeError("bug")

    async with running(ClaudeOptions(hook_handler=broken)) as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        process.emit(
            {
                "type": "control_request",
                "request_id": "h1",
                "request": {"subtype": "hook_callback", "callback_id": "x", "input": {}},
            }
        )
        reply = await process.next_sent(1)
        assert reply["response"]["subtype"] == "error"
        assert (await events.until(Diagnostic)).code == "claude.handler_failed"


async def test_a_full_queue_stops_the_reader_until_its_events_are_taken() -> None:
    async with running(queue=EventQueue(high_water=3)) as (runtime, launcher, events):
        _, process = await open_new(runtime, launcher)
        await trio.testing.wait_all_tasks_blocked()
        events.drain()
        for n in range(8):
            process.emit(b"line %d" % n)  # not JSON: one diagnostic each
        await trio.testing.wait_all_tasks_blocked()
        assert (len(events.queue), process.unread) == (3, 5)
        events.drain()
        await trio.testing.wait_all_tasks_blocked()
        assert (len(events.queue), process.unread) == (3, 2)
        while process.unread or len(events.queue):
            events.drain()
            await trio.testing.wait_all_tasks_blocked()
        heads = [e.detail["head"] for e in events.seen if isinstance(e, Diagnostic)]
        assert heads == [f"line {n}" for n in range(8)]


async def test_the_reader_takes_a_pipe_read_at_a_time_as_codexs_does() -> None:
    # Both adapters read through transport.line_reads: a process that hands out a
    # read's lines at once is read that way (its receive_line would fail the test).
    launcher = FakeLauncher(BatchingFakeProcess)
    async with running(queue=EventQueue(high_water=3), launcher=launcher) as (
        runtime,
        launcher,
        events,
    ):
        _, process = await open_new(runtime, launcher)
        await trio.testing.wait_all_tasks_blocked()
        events.drain()
        for n in range(8):
            process.emit(b"line %d" % n)  # not JSON: one diagnostic each
        await trio.testing.wait_all_tasks_blocked()
        # A full queue stops the reader after the read that filled it, not mid-read.
        assert (len(events.queue), process.unread) == (8, 0)
        events.drain()
        process.emit(b"line 8")
        await trio.testing.wait_all_tasks_blocked()
        events.drain()
        assert [e.detail["head"] for e in events.seen if isinstance(e, Diagnostic)] == [
            f"line {n}" for n in range(9)
        ]
