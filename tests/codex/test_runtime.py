"""The runtime over a scripted process: requests, answers, errors, exit."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from adapters.codex.adapter import CodexAdapter, codex_argv
from adapters.errors import ProviderGone, ProviderTimeout, ResumeError, StaleRequest
from adapters.protocol import RequestAnswer, ResumeRefs
from adapters.transport import OversizedLine
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import (
    Diagnostic,
    ItemDelta,
    RequestOpened,
    ResumeFailed,
    RuntimeExited,
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
)

from .support import (
    BatchedProcess,
    RecordingSink,
    ScriptedProcess,
    config,
    scripted_runtime,
    start_thread,
)


def test_argv_adds_app_server_once() -> None:
    assert codex_argv(config(command=["/bin/codex"])) == ["/bin/codex", "app-server"]
    assert codex_argv(config(command=["codex", "app-server"], extra_args=["-c", "x=1"])) == [
        "codex",
        "app-server",
        "-c",
        "x=1",
    ]


async def test_initialize_emits_session_ready_and_thread_refs() -> None:
    async with scripted_runtime(model="mock-model") as (runtime, process, events):
        ready = await events.until(SessionReady)
        assert ready.provider_version == "0.169.0" and ready.model == "mock-model"
        assert ready.capabilities.fork and ready.capabilities.steer
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.open_thread, None)
            request = await process.sent()
            assert request["method"] == "thread/start"
            assert request["params"] == {
                "cwd": "/work",
                "approvalPolicy": "on-request",
                "sandbox": "workspace-write",
                "model": "mock-model",
            }
            process.emit({"id": request["id"], "result": {"thread": {"id": "th1"}}})
        assert runtime.native_thread_ref == "th1"
        assert (await events.until(ThreadRefsLearned)).native_thread_ref == "th1"


async def test_full_access_mode_asks_for_no_approvals() -> None:
    async with (
        scripted_runtime(runtime_mode="full-access") as (runtime, process, _),
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(runtime.open_thread, None)
        request = await process.sent()
        assert request["params"]["approvalPolicy"] == "never"
        assert request["params"]["sandbox"] == "danger-full-access"
        process.emit({"id": request["id"], "result": {"thread": {"id": "th1"}}})


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("thread th9 already has an active writer", "owned_elsewhere"),
        ("thread not found: th9", "not_found"),
    ],
)
async def test_resume_errors_become_resume_error(message: str, reason: str) -> None:
    async with scripted_runtime() as (runtime, process, events):

        async def answer() -> None:
            request = await process.sent()
            assert request["method"] == "thread/resume"
            assert (
                request["params"]["threadId"] == "th9" and request["params"]["excludeTurns"] is True
            )
            process.emit({"id": request["id"], "error": {"code": -32600, "message": message}})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer)
            with pytest.raises(ResumeError) as caught:
                await runtime.open_thread(ResumeRefs("th9"))
        assert caught.value.reason == reason
        failed = await events.until(ResumeFailed)
        assert (failed.native_thread_ref, failed.reason) == ("th9", reason)


async def test_turn_interrupt_and_steer_use_the_turn_id() -> None:
    async with scripted_runtime() as (runtime, process, events):
        await start_thread(runtime, process)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.start_turn, "hello")
            request = await process.sent()
            assert request["params"] == {
                "threadId": "th1",
                "input": [{"type": "text", "text": "hello"}],
            }
            process.emit(
                {"id": request["id"], "result": {"turn": {"id": "tu1", "status": "inProgress"}}}
            )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.steer_turn, "more")
            request = await process.sent()
            assert request["method"] == "turn/steer"
            assert request["params"]["expectedTurnId"] == "tu1"
            process.emit({"id": request["id"], "result": {"turnId": "tu1"}})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.interrupt_turn)
            request = await process.sent()
            assert request["params"] == {"threadId": "th1", "turnId": "tu1"}
            process.emit({"id": request["id"], "result": {}})
        process.emit(
            {
                "method": "turn/completed",
                "params": {"threadId": "th1", "turn": {"id": "tu1", "status": "interrupted"}},
            }
        )
        await events.until(TurnCompleted)
        assert runtime.active_turn_ref is None
        await runtime.interrupt_turn()  # nothing running: a no-op, nothing sent


async def test_respond_exactly_once() -> None:
    async with scripted_runtime() as (runtime, process, events):
        process.emit(
            {
                "id": 0,
                "method": "item/commandExecution/requestApproval",
                "params": {"threadId": "th1", "turnId": "tu1", "itemId": "call_1", "command": "ls"},
            }
        )
        opened = await events.until(RequestOpened)
        with pytest.raises(StaleRequest):
            await runtime.respond("99", RequestAnswer("accept"))
        await runtime.respond(opened.native_request_ref, RequestAnswer("acceptForSession"))
        assert await process.sent() == {"id": 0, "result": {"decision": "acceptForSession"}}
        with pytest.raises(StaleRequest):
            await runtime.respond(opened.native_request_ref, RequestAnswer("decline"))


def _real_approval(request_id: int, available: list[Any]) -> dict[str, Any]:
    """An approval request as 0.169.0 sends it (fixtures/codex/approval_accept.ndjson)."""
    return {
        "id": request_id,
        "method": "item/commandExecution/requestApproval",
        "params": {
            "threadId": "th1",
            "turnId": "tu1",
            "itemId": "call_1",
            "reason": "the fake model wants to run this outside the sandbox",
            "command": "/bin/bash -lc 'touch approval_accept.txt'",
            "cwd": "/work",
            "proposedExecpolicyAmendment": ["touch", "approval_accept.txt"],
            "availableDecisions": available,
        },
    }


_AMENDMENT = {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "x.txt"]}}


@pytest.mark.parametrize(
    ("available", "offered", "decision", "sent"),
    [
        # The real request: the amendment (with its rule) is "accept and remember".
        (
            ["accept", _AMENDMENT, "cancel"],
            ["accept", "acceptForSession", "decline", "cancel"],
            "acceptForSession",
            _AMENDMENT,
        ),
        (["accept", _AMENDMENT, "cancel"], None, "decline", "decline"),
        (["accept", _AMENDMENT, "cancel"], None, "accept", "accept"),
        (["accept", _AMENDMENT, "cancel"], None, "cancel", "cancel"),
        # A bare name: the rule is the proposed amendment.
        (
            ["accept", "acceptWithExecpolicyAmendment", "cancel"],
            ["accept", "acceptForSession", "decline", "cancel"],
            "acceptForSession",
            {
                "acceptWithExecpolicyAmendment": {
                    "execpolicy_amendment": ["touch", "approval_accept.txt"]
                }
            },
        ),
        # Codex's own session cache, when it offers it, wins over the amendment.
        (
            ["accept", "acceptForSession", _AMENDMENT, "decline"],
            ["accept", "acceptForSession", "decline"],
            "acceptForSession",
            "acceptForSession",
        ),
        # Nothing we can send for a network-policy amendment: not offered.
        (
            ["accept", {"applyNetworkPolicyAmendment": {}}, "cancel"],
            ["accept", "decline", "cancel"],
            "accept",
            "accept",
        ),
    ],
)
async def test_approval_decisions_are_offered_and_sent_in_each_providers_words(
    available: list[Any], offered: list[str] | None, decision: str, sent: Any
) -> None:
    async with scripted_runtime() as (runtime, process, events):
        process.emit(_real_approval(0, available))
        opened = await events.until(RequestOpened)
        if offered is not None:
            assert opened.available_decisions == offered
        assert decision in opened.available_decisions
        await runtime.respond(opened.native_request_ref, RequestAnswer(decision))  # type: ignore[arg-type]
        assert await process.sent() == {"id": 0, "result": {"decision": sent}}


async def test_user_input_answers_are_mapped() -> None:
    async with scripted_runtime() as (runtime, process, events):
        process.emit(
            {
                "id": 3,
                "method": "item/tool/requestUserInput",
                "params": {
                    "threadId": "th1",
                    "turnId": "tu1",
                    "itemId": "c",
                    "isBlocking": True,
                    "questions": [{"id": "q1", "header": "H", "question": "Which?"}],
                },
            }
        )
        opened = await events.until(RequestOpened)
        await runtime.respond(
            opened.native_request_ref, RequestAnswer("accept", answers={"q1": "blue"})
        )
        assert await process.sent() == {
            "id": 3,
            "result": {"answers": {"q1": {"answers": ["blue"]}}},
        }


async def test_auth_refresh_without_tokens_is_answered_with_an_error() -> None:
    async with scripted_runtime() as (runtime, process, events):
        process.emit(
            {
                "id": 5,
                "method": "account/chatgptAuthTokens/refresh",
                "params": {"reason": "unauthorized"},
            }
        )
        opened = await events.until(RequestOpened)
        assert opened.kind == "auth_refresh"
        await runtime.respond("5", RequestAnswer("accept"))
        reply = await process.sent()
        assert reply["id"] == 5 and "error" in reply


async def test_attestation_is_refused_automatically() -> None:
    async with scripted_runtime() as (_, process, events):
        process.emit({"id": 1, "method": "attestation/generate", "params": {}})
        diagnostic = await events.until(Diagnostic)
        assert diagnostic.code == "attestation_refused"
        reply = await process.sent()
        assert reply["id"] == 1 and reply["error"]["code"] == -32601


async def test_an_unknown_server_request_is_refused_at_once() -> None:
    # Newer Codex versions add server requests; one we do not handle must not
    # hold its turn forever waiting for an answer nobody will give.
    async with scripted_runtime() as (_, process, events):
        process.emit({"id": 3, "method": "item/someNewThing/request", "params": {"x": 1}})
        diagnostic = await events.until(Diagnostic)
        assert diagnostic.code == "unmapped_request"
        assert diagnostic.detail == {"method": "item/someNewThing/request", "requestId": 3}
        with trio.fail_after(2):
            reply = await process.sent()
        assert reply["id"] == 3 and reply["error"]["code"] == -32601
        assert "item/someNewThing/request" in reply["error"]["message"]


async def test_bad_lines_are_diagnostics_and_reading_goes_on() -> None:
    async with scripted_runtime() as (_, process, events):
        process.emit(OversizedLine(length=9_000_000, head=b'{"method":"item/agentMessage/delta"'))
        process.emit(b"garbage {{{")
        process.emit({"id": 42, "result": {}})  # answers nothing we asked
        process.emit(
            {"method": "item/agentMessage/delta", "params": {"itemId": "m", "delta": "still here"}}
        )
        codes = [(await events.until(Diagnostic)).code for _ in range(3)]
        assert codes == ["oversized_frame", "malformed_frame", "unexpected_response"]
        assert (await events.until(ItemDelta)).text == "still here"


async def test_request_timeout() -> None:
    async with scripted_runtime(request_timeout_s=0.2) as (runtime, process, _):
        with pytest.raises(ProviderTimeout):
            await runtime.open_thread(None)
        assert (await process.sent())["method"] == "thread/start"


async def test_exit_fails_pending_requests_and_reports_runtime_exited() -> None:
    async with scripted_runtime() as (runtime, process, events):

        async def die() -> None:
            await process.sent()
            process.exit(code=None, sig=9)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(die)
            with pytest.raises(ProviderGone):
                await runtime.open_thread(None)
        exited = await events.until(RuntimeExited)
        assert (exited.code, exited.signal) == (None, 9)
        with pytest.raises(ProviderGone):
            await runtime.read_thread("th1")


async def test_leaving_the_block_kills_and_reports_once() -> None:
    async with scripted_runtime() as (_, process, events):
        pass
    assert process._status is not None and process._status.signal == 9
    exits = [e for e in events.drain() if isinstance(e, RuntimeExited)]
    assert len(exits) == 1


async def test_close_is_graceful() -> None:
    async with scripted_runtime() as (runtime, process, events):
        await runtime.close()
        assert process.stdin_closed
        exited = await events.until(RuntimeExited)
        assert exited.code == 0


async def test_body_errors_propagate_unwrapped() -> None:
    with pytest.raises(StaleRequest):
        async with scripted_runtime() as (runtime, _, _):
            await runtime.respond("nope", RequestAnswer("accept"))


def test_launch_spec_carries_env_cwd_and_bound() -> None:
    spec = CodexAdapter().launch_spec(config(env={"CODEX_HOME": "/h"}))
    assert spec.env == {"CODEX_HOME": "/h"} and spec.cwd == "/work"
    assert spec.argv == ["codex", "app-server"] and spec.max_line_bytes > 0


def _delta(n: int) -> bytes:
    """A delta as Codex writes it (compact: the decoder's fast path), or spaced for odd ``n``."""
    params = {"threadId": "th1", "turnId": "t1", "itemId": "m1", "delta": f"<{n}>"}
    frame = {"method": "item/agentMessage/delta", "params": params}
    return json.dumps(frame, separators=(", ", ": ") if n % 2 else (",", ":")).encode()


@pytest.mark.parametrize("bound", [3, 4])  # reached on a fast-path delta, on a general one
async def test_a_full_queue_stops_the_reader_until_its_events_are_taken(bound: int) -> None:
    async with scripted_runtime(queue=EventQueue(high_water=bound)) as (_, process, events):
        await events.until(SessionReady)
        for n in range(10):
            process.emit(_delta(n))
        await trio.testing.wait_all_tasks_blocked()
        # The bound reached, the reader waits: the rest stays in the pipe.
        assert (len(events.queue), process.unread) == (bound, 10 - bound)
        events.drain()
        await trio.testing.wait_all_tasks_blocked()
        assert (len(events.queue), process.unread) == (bound, 10 - 2 * bound)
        while process.unread or len(events.queue):
            events.drain()
            await trio.testing.wait_all_tasks_blocked()
        texts = [e.text for e in events.seen if isinstance(e, ItemDelta)]
        assert texts == [f"<{n}>" for n in range(10)]


async def test_a_waiting_consumer_gets_an_event_without_waiting_for_more_frames() -> None:
    async with scripted_runtime() as (_, process, events):
        await events.until(SessionReady)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_emit_later, process)
            with trio.fail_after(1):
                batch = await events.queue.take()
        assert [(type(e), getattr(e, "text", None)) for e in batch] == [(ItemDelta, "<0>")]
        assert process.unread == 0


async def _emit_later(process: ScriptedProcess) -> None:
    await trio.testing.wait_all_tasks_blocked()
    process.emit(_delta(0))


async def test_a_read_is_queued_whole_then_the_reader_waits_for_room() -> None:
    # One read's events go in together: the queue exceeds its bound by at most a read.
    process = BatchedProcess()
    async with scripted_runtime(queue=EventQueue(high_water=3), process=process) as (
        _,
        _,
        events,
    ):
        await events.until(SessionReady)
        for n in range(5):
            process.emit(_delta(n))
        await trio.testing.wait_all_tasks_blocked()
        assert (len(events.queue), process.unread) == (5, 0)
        for n in range(5, 10):
            process.emit(_delta(n))
        await trio.testing.wait_all_tasks_blocked()
        assert (len(events.queue), process.unread) == (5, 5)  # the reader waits for room
        events.drain()
        await trio.testing.wait_all_tasks_blocked()
        assert (len(events.queue), process.unread) == (5, 0)
        events.drain()
        texts = [e.text for e in events.seen if isinstance(e, ItemDelta)]
        assert texts == [f"<{n}>" for n in range(10)]


async def test_a_reply_inside_a_read_keeps_its_place_among_the_events() -> None:
    process = BatchedProcess()
    async with scripted_runtime(process=process) as (runtime, _, events):
        await events.until(SessionReady)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.open_thread, None)
            request = await process.sent()
            process.emit(_delta(0))
            process.emit(
                json.dumps({"id": request["id"], "result": {"thread": {"id": "th1"}}}).encode()
            )
            process.emit(_delta(1))
        assert runtime.native_thread_ref == "th1"
        kinds = [type(await events.next()) for _ in range(3)]
        assert kinds == [ItemDelta, ThreadRefsLearned, ItemDelta]


async def test_an_attestation_inside_a_read_is_answered_in_order() -> None:
    process = BatchedProcess()
    raw = RecordingSink()
    async with scripted_runtime(process=process, raw=raw) as (_, _, events):
        await events.until(SessionReady)
        process.emit(_delta(0))
        process.emit(b'{"id":7,"method":"attestation/generate","params":{}}')
        process.emit(_delta(1))
        seen = [await events.next() for _ in range(3)]
        reply = await process.sent()
    assert [type(e) for e in seen] == [ItemDelta, Diagnostic, ItemDelta]
    assert reply["id"] == 7 and reply["error"]["code"] == -32601
    # Raw frames in the order they crossed the pipe: the answer before the next line.
    directions = [(d, b'"id":7' in line) for d, line in raw.records[-4:]]
    assert directions == [
        ("incoming", False),
        ("incoming", True),
        ("outgoing", True),
        ("incoming", False),
    ]


async def test_fork_runs_in_the_runtimes_cwd() -> None:
    """A fork with a worktree of its own: Codex must not keep the source thread's cwd."""
    async with scripted_runtime() as (runtime, process, _), trio.open_nursery() as nursery:
        nursery.start_soon(runtime.fork_thread, ResumeRefs("th1", "turn3"))
        request = await process.sent()
        assert request["method"] == "thread/fork"
        assert request["params"]["cwd"] == "/work"
        assert request["params"]["lastTurnId"] == "turn3"
        process.emit({"id": request["id"], "result": {"thread": {"id": "th2"}}})


async def test_the_runtime_reads_stdout_itself_as_claudes_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The read loop is the runtime's (no call from the client back into it), and
    # it reads through the same transport.line_reads as Claude's runtime.
    import adapters.codex.runtime as codex_runtime
    from adapters import transport
    from adapters.codex.client import CodexClient

    read: list[object] = []

    def recording(process: Any) -> transport.ReadLines:
        read.append(process)
        return transport.line_reads(process)

    monkeypatch.setattr(codex_runtime, "line_reads", recording)
    async with scripted_runtime() as (_, process, events):
        await events.until(SessionReady)
    assert read == [process]
    assert not hasattr(CodexClient, "run")
