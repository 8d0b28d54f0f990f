"""The mapper on hand-built frames: canonical events, item closing, determinism."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from adapters.codex.frames import Notification, ServerRequest, decode_frame
from adapters.codex.mapper import CodexMapper, resume_failure_reason
from t3orch.domain.run import TokenUsage
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    Compaction,
    DynamicTool,
    FileChange,
    Plan,
    Reasoning,
    Subagent,
    UserMessage,
    WebSearch,
)
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    PlanUpdated,
    ProviderEvent,
    RequestCancelled,
    RequestOpened,
    RequestResolved,
    SubagentEnded,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
    UsageUpdated,
)

T, TURN = "th1", "tu1"


def feed(mapper: CodexMapper, *frames: dict[str, Any]) -> list[ProviderEvent]:
    events: list[ProviderEvent] = []
    for n, frame in enumerate(frames):
        decoded = decode_frame(json.dumps(frame).encode())
        if isinstance(decoded, ServerRequest):
            events += mapper.server_request(decoded.id, decoded.method, decoded.params, f"r{n}")
        else:
            assert isinstance(decoded, Notification), frame
            events += mapper.notification(decoded.method, decoded.params, f"r{n}")
    return events


def note(method: str, **params: Any) -> dict[str, Any]:
    return {"method": method, "params": params, "emittedAtMs": 1}


def started(item: dict[str, Any]) -> dict[str, Any]:
    return note("item/started", item=item, threadId=T, turnId=TURN)


def completed(item: dict[str, Any]) -> dict[str, Any]:
    return note("item/completed", item=item, threadId=T, turnId=TURN)


def turn_started() -> dict[str, Any]:
    return note("turn/started", threadId=T, turn={"id": TURN, "status": "inProgress", "items": []})


def turn_completed(status: str = "completed", error: str | None = None) -> dict[str, Any]:
    turn = {
        "id": TURN,
        "status": status,
        "items": [],
        "error": {"message": error} if error else None,
    }
    return note("turn/completed", threadId=T, turn=turn)


def delta(method: str, item: str, text: str) -> dict[str, Any]:
    return note(method, threadId=T, turnId=TURN, itemId=item, delta=text)


def test_streamed_message_then_completion() -> None:
    events = feed(
        CodexMapper(),
        turn_started(),
        started({"type": "agentMessage", "id": "msg_1", "text": ""}),
        delta("item/agentMessage/delta", "msg_1", "ack"),
        delta("item/agentMessage/delta", "msg_1", ": hi"),
        completed({"type": "agentMessage", "id": "msg_1", "text": "ack: hi"}),
        turn_completed(),
    )
    assert events == [
        TurnStarted(raw_event_id="r0", native_turn_ref=TURN),
        ItemStarted(raw_event_id="r1", native_item_ref="msg_1", content=AssistantMessage(text="")),
        ItemDelta(raw_event_id="r2", native_item_ref="msg_1", text="ack"),
        ItemDelta(raw_event_id="r3", native_item_ref="msg_1", text=": hi"),
        ItemCompleted(
            raw_event_id="r4", native_item_ref="msg_1", content=AssistantMessage(text="ack: hi")
        ),
        TurnCompleted(raw_event_id="r5", native_turn_ref=TURN, status="completed"),
    ]


@pytest.mark.parametrize(
    "moderation",
    [
        None,
        # 0.169.0: display is {action, blockType?, ...}.
        {"moderated": False, "display": {"action": "show"}},
        # 0.171.0 reshapes display into a versioned, mode-tagged union.
        {
            "moderated": True,
            "display": {"mode": "hide", "replacement": {"text": "…"}, "version": 1},
        },
        {"moderated": True, "display": {"mode": "block", "reason": {"kind": "x"}, "version": 1}},
    ],
)
def test_agent_message_moderation_of_either_version_is_tolerated(
    moderation: dict[str, Any] | None,
) -> None:
    item = {"type": "agentMessage", "id": "msg_1", "text": "ack: hi", "moderation": moderation}
    events = feed(CodexMapper(), turn_started(), started({**item, "text": ""}), completed(item))
    assert not [e for e in events if isinstance(e, Diagnostic)]
    assert events[-1] == ItemCompleted(
        raw_event_id="r2", native_item_ref="msg_1", content=AssistantMessage(text="ack: hi")
    )


def test_a_notification_newer_than_the_pin_is_an_info_diagnostic() -> None:
    # 0.171.0 adds thread/search/partial (an answer to thread/search, which t3orch
    # does not call): kept as a low-level diagnostic, nothing else.
    (event,) = feed(CodexMapper(), note("thread/search/partial", threadId=T, results=[]))
    assert isinstance(event, Diagnostic) and (event.level, event.code) == ("info", "unmapped")


def test_interrupted_turn_closes_open_items_before_it_ends() -> None:
    events = feed(
        CodexMapper(),
        turn_started(),
        started({"type": "agentMessage", "id": "msg_1", "text": ""}),
        delta("item/agentMessage/delta", "msg_1", "slow 0 "),
        delta("item/agentMessage/delta", "msg_1", "slow 1"),
        turn_completed("interrupted"),
    )
    closing, end = events[-2], events[-1]
    assert closing == ItemCompleted(
        raw_event_id="r4",
        native_item_ref="msg_1",
        content=AssistantMessage(text="slow 0 slow 1"),
        status="interrupted",
    )
    assert isinstance(end, TurnCompleted) and end.status == "interrupted"


def test_request_still_open_at_turn_end_is_cancelled_first() -> None:
    mapper = CodexMapper()
    events = feed(
        mapper,
        turn_started(),
        started(
            {
                "type": "commandExecution",
                "id": "call_1",
                "command": "ls",
                "cwd": "/w",
                "status": "inProgress",
                "commandActions": [],
            }
        ),
        {
            "id": 0,
            "method": "item/commandExecution/requestApproval",
            "params": {
                "threadId": T,
                "turnId": TURN,
                "itemId": "call_1",
                "command": "ls",
                "reason": "why",
            },
        },
        turn_completed("interrupted"),
    )
    kinds = [type(e) for e in events]
    assert kinds[-3:] == [RequestCancelled, ItemCompleted, TurnCompleted]
    assert events[-3] == RequestCancelled(
        raw_event_id="r3", native_request_ref="0", reason="turn_ended"
    )
    assert mapper.open_request("0") is None


def test_request_lifecycle_and_answer_bookkeeping() -> None:
    mapper = CodexMapper()
    opened = feed(
        mapper,
        {
            "id": 0,
            "method": "item/commandExecution/requestApproval",
            "params": {
                "threadId": T,
                "turnId": TURN,
                "itemId": "call_1",
                "command": "/bin/bash -lc 'touch a'",
                "proposedExecpolicyAmendment": ["touch", "a"],
                "availableDecisions": [
                    "accept",
                    {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "a"]}},
                    "cancel",
                ],
            },
        },
    )[0]
    assert isinstance(opened, RequestOpened)
    assert (opened.kind, opened.native_request_ref, opened.native_item_ref) == (
        "command",
        "0",
        "call_1",
    )
    assert opened.summary == "/bin/bash -lc 'touch a'"
    # In t3orch's words: the amendment is "accept and remember"; decline works
    # though Codex does not list it.
    assert opened.available_decisions == ["accept", "acceptForSession", "decline", "cancel"]
    assert mapper.open_request("0") is not None
    mapper.answered("0", "accept")
    assert mapper.open_request("0") is None  # answered once: a second answer is stale
    resolved = feed(mapper, note("serverRequest/resolved", threadId=T, requestId=0))
    assert resolved == [
        RequestResolved(raw_event_id="r0", native_request_ref="0", decision="accept")
    ]


@pytest.mark.parametrize(
    ("method", "params", "kind"),
    [
        (
            "execCommandApproval",
            {"callId": "c", "command": ["ls"], "conversationId": T, "cwd": "/", "parsedCmd": []},
            "command",
        ),
        (
            "item/fileChange/requestApproval",
            {"threadId": T, "turnId": TURN, "itemId": "c"},
            "file-change",
        ),
        (
            "applyPatchApproval",
            {"callId": "c", "conversationId": T, "fileChanges": {}},
            "file-change",
        ),
        (
            "item/permissions/requestApproval",
            {
                "threadId": T,
                "turnId": TURN,
                "itemId": "c",
                "cwd": "/",
                "permissions": {"fileSystem": {"write": ["/x"]}},
            },
            "file-change",
        ),
        (
            "item/permissions/requestApproval",
            {
                "threadId": T,
                "turnId": TURN,
                "itemId": "c",
                "cwd": "/",
                "permissions": {"fileSystem": {"read": ["/x"]}},
            },
            "file-read",
        ),
        (
            "item/permissions/requestApproval",
            {
                "threadId": T,
                "turnId": TURN,
                "itemId": "c",
                "cwd": "/",
                "permissions": {"network": {"enabled": True}},
            },
            "command",
        ),
        (
            "item/tool/requestUserInput",
            {"threadId": T, "turnId": TURN, "itemId": "c", "isBlocking": True, "questions": []},
            "user_input",
        ),
        (
            "mcpServer/elicitation/request",
            {
                "threadId": T,
                "serverName": "s",
                "mode": "url",
                "message": "m",
                "url": "u",
                "elicitationId": "e",
            },
            "user_input",
        ),
        (
            "item/tool/call",
            {"threadId": T, "turnId": TURN, "callId": "c", "tool": "t", "arguments": {}},
            "dynamic_tool_call",
        ),
        ("account/chatgptAuthTokens/refresh", {"reason": "unauthorized"}, "auth_refresh"),
    ],
)
def test_request_kinds(method: str, params: dict[str, Any], kind: str) -> None:
    (event,) = feed(CodexMapper(), {"id": 7, "method": method, "params": params})
    assert isinstance(event, RequestOpened) and event.kind == kind


def test_user_input_questions_are_carried() -> None:
    params = {
        "threadId": T,
        "turnId": TURN,
        "itemId": "c",
        "isBlocking": True,
        "questions": [
            {"id": "q1", "header": "H", "question": "Which?", "options": [{"label": "a"}]}
        ],
    }
    (event,) = feed(
        CodexMapper(), {"id": 1, "method": "item/tool/requestUserInput", "params": params}
    )
    assert isinstance(event, RequestOpened) and event.questions is not None
    assert (event.questions[0].id, event.questions[0].question) == ("q1", "Which?")


def test_attestation_request_is_a_diagnostic() -> None:
    (event,) = feed(CodexMapper(), {"id": 4, "method": "attestation/generate", "params": {}})
    assert isinstance(event, Diagnostic) and event.code == "attestation_refused"


def test_item_contents() -> None:
    change = {
        "path": "/w/a.txt",
        "kind": {"type": "update", "move_path": None},
        "diff": "@@ -1 +1 @@\n-old\n+new\n+more\n",
    }
    items = [
        (
            {"type": "userMessage", "id": "u", "content": [{"type": "text", "text": "hi"}]},
            UserMessage(text="hi"),
        ),
        (
            {"type": "reasoning", "id": "r", "summary": ["s1", "s2"], "content": ["t"]},
            Reasoning(text="t", summary="s1\ns2"),
        ),
        (
            {
                "type": "commandExecution",
                "id": "c",
                "command": "ls",
                "cwd": "/w",
                "status": "completed",
                "exitCode": 2,
                "aggregatedOutput": "out",
                "commandActions": [],
            },
            CommandExecution(input="ls", output="out", exit_code=2, cwd="/w"),
        ),
        ({"type": "plan", "id": "p", "text": "# Plan"}, Plan(markdown="# Plan")),
        ({"type": "contextCompaction", "id": "k"}, Compaction(title="Context compacted")),
        ({"type": "webSearch", "id": "w", "query": "trio"}, WebSearch(query="trio")),
        (
            {
                "type": "mcpToolCall",
                "id": "m",
                "server": "srv",
                "tool": "look",
                "arguments": {"q": 1},
                "status": "completed",
                "result": {"ok": True},
            },
            DynamicTool(tool_name="srv/look", input={"q": 1}, output={"ok": True}),
        ),
        (
            {
                "type": "dynamicToolCall",
                "id": "d",
                "tool": "dyn",
                "arguments": [1],
                "status": "failed",
                "contentItems": None,
            },
            DynamicTool(tool_name="dyn", input=[1], output=None),
        ),
    ]
    for item, content in items:
        (event,) = feed(CodexMapper(), completed(item))
        assert isinstance(event, ItemCompleted) and event.content == content, item["type"]
    (event,) = feed(
        CodexMapper(),
        completed({"type": "fileChange", "id": "f", "status": "declined", "changes": [change]}),
    )
    assert isinstance(event, ItemCompleted) and event.status == "declined"
    assert isinstance(event.content, FileChange)
    assert (event.content.file_name, event.content.additions, event.content.deletions) == (
        "/w/a.txt",
        2,
        1,
    )
    assert event.content.changes[0].kind == "update"


def test_command_output_and_reasoning_channels() -> None:
    mapper = CodexMapper()
    events = feed(
        mapper,
        turn_started(),
        started({"type": "reasoning", "id": "r", "summary": [], "content": []}),
        delta("item/reasoning/summaryTextDelta", "r", "think"),
        note(
            "item/reasoning/summaryPartAdded", threadId=T, turnId=TURN, itemId="r", summaryIndex=1
        ),
        delta("item/reasoning/summaryTextDelta", "r", "more"),
        delta("item/reasoning/textDelta", "r", "raw"),
        started(
            {
                "type": "commandExecution",
                "id": "c",
                "command": "ls",
                "cwd": "/",
                "status": "inProgress",
                "commandActions": [],
            }
        ),
        delta("item/commandExecution/outputDelta", "c", "line\n"),
        turn_completed("interrupted"),
    )
    deltas = [(e.text, e.channel) for e in events if isinstance(e, ItemDelta)]
    assert deltas == [
        ("think", "summary"),
        ("\n\n", "summary"),
        ("more", "summary"),
        ("raw", None),
        ("line\n", None),
    ]
    closed = {e.native_item_ref: e.content for e in events if isinstance(e, ItemCompleted)}
    assert closed["r"] == Reasoning(text="raw", summary="think\n\nmore")
    assert closed["c"] == CommandExecution(input="ls", output="line\n", cwd="/")


def test_plan_update_is_a_todo_list() -> None:
    (event,) = feed(
        CodexMapper(),
        note(
            "turn/plan/updated",
            threadId=T,
            turnId=TURN,
            explanation="why",
            plan=[
                {"step": "a", "status": "completed"},
                {"step": "b", "status": "inProgress"},
                {"step": "c", "status": "pending"},
            ],
        ),
    )
    assert isinstance(event, PlanUpdated) and event.kind == "todo_list" and event.markdown == "why"
    assert [(s.id, s.text, s.status) for s in event.steps] == [
        ("1", "a", "completed"),
        ("2", "b", "running"),
        ("3", "c", "pending"),
    ]


def test_usage_is_attached_to_its_turn() -> None:
    usage = {"total": {"totalTokens": 5}, "last": {"totalTokens": 5}}
    events = feed(
        CodexMapper(),
        turn_started(),
        note("thread/tokenUsage/updated", threadId=T, turnId=TURN, tokenUsage=usage),
        note("account/rateLimits/updated", rateLimits={"limitId": "codex"}),
        turn_completed("failed", error="boom"),
    )
    assert isinstance(events[1], UsageUpdated) and isinstance(events[2], UsageUpdated)
    assert events[-1] == TurnCompleted(
        raw_event_id="r3",
        native_turn_ref=TURN,
        status="failed",
        error="boom",
        usage=usage,
        token_usage=TokenUsage(total_tokens=5),
    )


def test_diagnostics() -> None:
    events = feed(
        CodexMapper(),
        note("error", threadId=T, turnId=TURN, willRetry=False, error={"message": "down"}),
        note("error", threadId=T, turnId=TURN, willRetry=True, error={"message": "retrying"}),
        note("warning", message="unknown model"),
        note("configWarning", summary="no bwrap"),
        note("deprecationNotice", summary="old"),
        note("model/rerouted", threadId=T, turnId=TURN, fromModel="a", toModel="b", reason="x"),
        note("thread/status/changed", threadId=T, status={"type": "idle"}),
        note("never/heard/of", x=1),
    )
    assert all(isinstance(e, Diagnostic) for e in events)
    got = [(e.level, e.code) for e in events if isinstance(e, Diagnostic)]
    assert got == [
        ("error", "provider_error"),
        ("warning", "provider_error"),
        ("warning", "provider_warning"),
        ("warning", "config_warning"),
        ("info", "deprecation"),
        ("info", "model_rerouted"),
        ("info", "unmapped"),
        ("info", "unmapped"),
    ]


def test_unmapped_item_type_is_a_diagnostic() -> None:
    (event,) = feed(CodexMapper(), started({"type": "sleep", "id": "s", "durationMs": 5}))
    assert isinstance(event, Diagnostic) and event.code == "unmapped_item"


def test_bad_delta_params_are_a_diagnostic() -> None:
    events = feed(CodexMapper(), {"method": "item/agentMessage/delta", "params": {"delta": 5}})
    assert isinstance(events[0], Diagnostic) and events[0].code == "malformed_params"


def test_thread_refs_learned_once_per_thread() -> None:
    mapper = CodexMapper()
    first = mapper.response("thread/start", {}, {"thread": {"id": T}}, None, "r0")
    again = feed(mapper, note("thread/started", thread={"id": T}))
    fork = feed(mapper, note("thread/started", thread={"id": "th2", "forkedFromId": T}))
    assert first == [ThreadRefsLearned(raw_event_id="r0", native_thread_ref=T)]
    assert again == []
    assert fork == [
        ThreadRefsLearned(
            raw_event_id="r0", native_thread_ref="th2", forked_from_native_thread_ref=T
        )
    ]


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("thread 0190 already has an active writer", "owned_elsewhere"),
        ("thread not found: 0190", "not_found"),
        ("no rollout found for thread id 0190", "not_found"),
        ("invalid session id: invalid character: expected ...", "not_found"),
        ("something else broke", "error"),
    ],
)
def test_resume_failure_reasons(message: str, reason: str) -> None:
    assert resume_failure_reason(message) == reason


def test_same_frames_same_events() -> None:
    frames = [
        turn_started(),
        started({"type": "agentMessage", "id": "m", "text": ""}),
        delta("item/agentMessage/delta", "m", "x"),
        {
            "id": 0,
            "method": "item/tool/call",
            "params": {"threadId": T, "turnId": TURN, "callId": "c", "tool": "t", "arguments": {}},
        },
        note("unknown/thing"),
        turn_completed("interrupted"),
    ]
    assert feed(CodexMapper(), *frames) == feed(CodexMapper(), *frames)


def _collab(tool: str, status: str, receivers: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "type": "collabAgentToolCall",
        "id": f"c-{tool}",
        "tool": tool,
        "status": status,
        "senderThreadId": T,
        "receiverThreadIds": receivers,
        "agentsStates": {},
        **extra,
    }


def test_collab_spawn_is_a_subagent_and_the_child_threads_items_are_its_children() -> None:
    mapper = CodexMapper()
    child, child_turn = "th-child", "tu-child"
    events = feed(
        mapper,
        turn_started(),
        started(_collab("spawnAgent", "inProgress", [], prompt="look for x\nin src")),
        note(
            "thread/started",
            thread={"id": child, "parentThreadId": T, "agentNickname": "Ada", "turns": []},
        ),
        note("turn/started", threadId=child, turn={"id": child_turn, "status": "inProgress"}),
        note(
            "item/started",
            threadId=child,
            turnId=child_turn,
            item={"type": "agentMessage", "id": "cm1", "text": ""},
        ),
        note(
            "item/agentMessage/delta", threadId=child, turnId=child_turn, itemId="cm1", delta="hi"
        ),
        note(
            "turn/completed",
            threadId=child,
            turn={"id": child_turn, "status": "completed", "items": []},
        ),
        completed(
            _collab(
                "spawnAgent",
                "completed",
                [child],
                prompt="look for x\nin src",
                agentsStates={child: {"status": "completed", "message": "done"}},
            )
        ),
        started(_collab("wait", "inProgress", [child])),
    )
    spawn = events[1]
    assert isinstance(spawn, ItemStarted)
    assert spawn.content == Subagent(
        tool_name="collab/spawnAgent",
        description="look for x",
        prompt="look for x\nin src",
        output={},
    )
    # The child's thread is not a resume ref of ours, and its turn is not the app's.
    assert not any(isinstance(e, ThreadRefsLearned) for e in events)
    assert [type(e) for e in events].count(TurnStarted) == 1
    assert not any(isinstance(e, TurnCompleted) for e in events)
    codes = [e.code for e in events if isinstance(e, Diagnostic)]
    assert codes == ["subagent_thread_started", "subagent_turn_completed"]
    child_item = next(
        e for e in events if isinstance(e, ItemStarted) and e.native_item_ref == "cm1"
    )
    assert child_item.parent_native_item_ref == "c-spawnAgent"
    closed = next(e for e in events if isinstance(e, ItemCompleted) and e.native_item_ref == "cm1")
    assert closed.status == "interrupted" and closed.content == AssistantMessage(text="hi")
    done = next(
        e for e in events if isinstance(e, ItemCompleted) and e.native_item_ref == "c-spawnAgent"
    )
    assert isinstance(done.content, Subagent)
    assert done.content.child_native_thread_ref == child
    # Other collab tools stay tool calls of the parent thread.
    wait = events[-1]
    assert isinstance(wait, ItemStarted) and isinstance(wait.content, DynamicTool)
    assert wait.parent_native_item_ref is None


def test_collab_spawn_naming_its_child_before_the_child_thread_starts() -> None:
    mapper = CodexMapper()
    events = feed(
        mapper,
        turn_started(),
        started(_collab("spawnAgent", "inProgress", ["th-c"])),
        note(
            "item/started",
            threadId="th-c",
            turnId="tu-c",
            item={"type": "reasoning", "id": "r1", "summary": [], "content": []},
        ),
    )
    first = events[1]
    assert isinstance(first, ItemStarted) and isinstance(first.content, Subagent)
    assert first.content.child_native_thread_ref == "th-c"
    assert isinstance(events[2], ItemStarted)
    assert events[2].parent_native_item_ref == "c-spawnAgent"


def _spawn_returning_before_its_child_works(child: str, child_turn: str) -> list[dict[str, Any]]:
    """Real 0.169.0 order: the spawn completes ('pendingInit'), then the child's turn starts."""
    return [
        turn_started(),
        started(_collab("spawnAgent", "inProgress", [])),
        completed(
            _collab(
                "spawnAgent",
                "completed",
                [child],
                agentsStates={child: {"status": "pendingInit", "message": None}},
            )
        ),
        note("turn/started", threadId=child, turn={"id": child_turn, "status": "inProgress"}),
        note(
            "item/started",
            threadId=child,
            turnId=child_turn,
            item={"type": "agentMessage", "id": "cm1", "text": ""},
        ),
    ]


def _child_turn_completed(child: str, child_turn: str, status: str) -> dict[str, Any]:
    return note("turn/completed", threadId=child, turn={"id": child_turn, "status": status})


def test_a_spawned_child_outliving_its_parents_turn_ends_the_subagent_later() -> None:
    mapper = CodexMapper()
    child, child_turn = "th-child", "tu-child"
    events = feed(mapper, *_spawn_returning_before_its_child_works(child, child_turn))
    done = next(e for e in events if isinstance(e, ItemCompleted))
    # The call returned, the child has not worked yet: its subagent goes on.
    assert done.native_item_ref == "c-spawnAgent" and done.child_continues
    events = feed(mapper, turn_completed())
    (end,) = [e for e in events if isinstance(e, TurnCompleted)]
    assert end.continuing == ["c-spawnAgent"]
    # The parent's end closed none of the child's items.
    assert not any(isinstance(e, ItemCompleted) for e in events)
    events = feed(
        mapper,
        note(
            "item/completed",
            threadId=child,
            turnId=child_turn,
            item={"type": "agentMessage", "id": "cm1", "text": "done"},
        ),
        _child_turn_completed(child, child_turn, "completed"),
    )
    assert [type(e) for e in events] == [ItemCompleted, SubagentEnded, Diagnostic]
    end = events[1]
    assert isinstance(end, SubagentEnded)
    assert (end.native_item_ref, end.status, end.child_native_thread_ref) == (
        "c-spawnAgent",
        "completed",
        child,
    )
    assert not any(isinstance(e, TurnCompleted) for e in events)


def test_a_child_that_finished_before_its_spawn_returned_ends_with_the_spawn() -> None:
    # The stand-in's order (fixtures/standin/codex_subagent.ndjson): nothing goes on.
    mapper = CodexMapper()
    child, child_turn = "th-child", "tu-child"
    events = feed(
        mapper,
        turn_started(),
        started(_collab("spawnAgent", "inProgress", [child])),
        note("turn/started", threadId=child, turn={"id": child_turn, "status": "inProgress"}),
        _child_turn_completed(child, child_turn, "completed"),
        completed(_collab("spawnAgent", "completed", [child])),
        turn_completed(),
    )
    assert not any(isinstance(e, SubagentEnded) for e in events)
    done = next(e for e in events if isinstance(e, ItemCompleted))
    assert not done.child_continues
    assert next(e for e in events if isinstance(e, TurnCompleted)).continuing == []


def test_an_interrupted_parent_turn_does_not_carry_its_children_on() -> None:
    mapper = CodexMapper()
    child, child_turn = "th-child", "tu-child"
    feed(mapper, *_spawn_returning_before_its_child_works(child, child_turn))
    events = feed(mapper, turn_completed("interrupted"))
    assert next(e for e in events if isinstance(e, TurnCompleted)).continuing == []
    # Ingest interrupted the subagent with the turn: the child's end names nothing.
    events = feed(mapper, _child_turn_completed(child, child_turn, "interrupted"))
    assert not any(isinstance(e, SubagentEnded) for e in events)
    assert [e.code for e in events if isinstance(e, Diagnostic)] == ["subagent_turn_completed"]


def test_a_failed_child_turn_fails_its_subagent() -> None:
    mapper = CodexMapper()
    child, child_turn = "th-child", "tu-child"
    feed(mapper, *_spawn_returning_before_its_child_works(child, child_turn))
    events = feed(mapper, _child_turn_completed(child, child_turn, "failed"))
    (end,) = [e for e in events if isinstance(e, SubagentEnded)]
    assert end.status == "failed"
    closed = next(e for e in events if isinstance(e, ItemCompleted))
    assert closed.native_item_ref == "cm1" and closed.status == "interrupted"


def test_every_mapped_notification_is_dispatched_by_the_match() -> None:
    from adapters.codex.mapper import (
        DIAGNOSTIC_NOTIFICATIONS,
        HANDLED_NOTIFICATIONS,
        MAPPED_NOTIFICATIONS,
    )

    assert HANDLED_NOTIFICATIONS.isdisjoint(DIAGNOSTIC_NOTIFICATIONS)
    for method in sorted(MAPPED_NOTIFICATIONS):
        events = CodexMapper().notification(method, msgspec.Raw(b"{}"), None)
        codes = [e.code for e in events if isinstance(e, Diagnostic)]
        assert "unmapped" not in codes, method
    (unknown,) = CodexMapper().notification("thread/brandNew", msgspec.Raw(b"{}"), None)
    assert isinstance(unknown, Diagnostic) and unknown.code == "unmapped"
