"""The mapper on hand-built frames: the cases the recordings show and a few they cannot."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.claude.mapper import ClaudeMapper
from adapters.transport import ExitStatus
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    DynamicTool,
    FileChange,
    FileSearch,
    Reasoning,
    Subagent,
    WebSearch,
)
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    PlanUpdated,
    RequestCancelled,
    RequestOpened,
    RequestResolved,
    RuntimeExited,
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
    UsageUpdated,
)

from .support import (
    SESSION,
    assistant,
    block_start,
    can_use_tool,
    feed,
    init,
    result,
    stream,
    text,
    text_delta,
    tool_result,
    tool_use,
    types,
)


def started_mapper() -> tuple[ClaudeMapper, list[object]]:
    mapper = ClaudeMapper(native_thread_ref=SESSION)
    events: list[object] = [*mapper.user_sent()]
    events += feed(mapper, init())
    return mapper, events


def test_first_init_gives_session_ready_and_refs_then_only_changes() -> None:
    mapper = ClaudeMapper(native_thread_ref=SESSION)
    first = mapper.user_sent() + feed(mapper, init())
    assert types(first) == ["turn.started", "session.ready", "thread.refs"]
    ready = first[1]
    assert isinstance(ready, SessionReady)
    assert (ready.provider_version, ready.native_session_ref) == ("2.1.327", SESSION)
    assert ready.capabilities.native_turn_ids is False and ready.capabilities.steer is False
    refs = first[2]
    assert isinstance(refs, ThreadRefsLearned)
    assert (refs.native_thread_ref, refs.native_conversation_head_ref) == (SESSION, None)
    feed(mapper, result())
    # Second turn: init again, but nothing new to say about the session.
    second = mapper.user_sent() + feed(mapper, init())
    assert types(second) == ["turn.started"]


def test_init_without_a_user_frame_still_opens_a_turn() -> None:
    mapper = ClaudeMapper()
    assert types(feed(mapper, init()))[0] == "turn.started"
    # A second init within the same turn opens nothing new.
    assert feed(mapper, init()) == []


def test_session_id_other_than_the_one_asked_for_is_a_warning() -> None:
    mapper = ClaudeMapper(native_thread_ref="asked")
    events = mapper.user_sent() + feed(mapper, init("got"))
    warnings = [e for e in events if isinstance(e, Diagnostic)]
    assert [w.code for w in warnings] == ["claude.session_id_mismatch"]
    assert [e.native_thread_ref for e in events if isinstance(e, ThreadRefsLearned)] == ["got"]


def test_text_and_tool_use_of_one_message_arrive_as_separate_frames_and_fold() -> None:
    """The shape of every recorded tool turn: text block, then tool block, same message id."""
    mapper, _ = started_mapper()
    events = feed(
        mapper,
        stream("m1", {"type": "message_start", "message": {"id": "m1"}}),
        block_start("m1", 0, {"type": "text", "text": ""}),
        text_delta("m1", 0, "Running "),
        text_delta("m1", 0, "it."),
        assistant("m1", text("Running it."), "a1"),
        stream("m1", {"type": "content_block_stop", "index": 0}),
        block_start("m1", 1, {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}),
        assistant("m1", tool_use("toolu_1", "Bash", {"command": "touch x"}), "a2"),
        stream("m1", {"type": "content_block_stop", "index": 1}),
    )
    assert types(events) == [
        "item.started",
        "item.delta",
        "item.delta",
        "item.completed",
        "item.started",
    ]
    assert [e.native_item_ref for e in events if isinstance(e, ItemStarted)] == ["m1#0", "toolu_1"]
    completed = events[3]
    assert isinstance(completed, ItemCompleted)
    assert completed.content == AssistantMessage(text="Running it.")
    tool = events[4]
    assert isinstance(tool, ItemStarted) and tool.content == CommandExecution(input="touch x")
    assert mapper.head == "a2"


def test_split_frames_without_partial_messages_use_frame_order() -> None:
    mapper, _ = started_mapper()
    events = feed(
        mapper,
        assistant("m1", text("first"), "a1"),
        assistant("m1", {"type": "thinking", "thinking": "hmm"}, "a2"),
        assistant("m1", text("second"), "a3"),
    )
    completed = [e for e in events if isinstance(e, ItemCompleted)]
    assert [(c.native_item_ref, c.content) for c in completed] == [
        ("m1#0", AssistantMessage(text="first")),
        ("m1#1", Reasoning(text="hmm")),
        ("m1#2", AssistantMessage(text="second")),
    ]
    # Each item is started before it completes.
    assert types(events) == ["item.started", "item.completed"] * 3


def test_thinking_deltas_and_late_deltas_of_a_completed_block() -> None:
    mapper, _ = started_mapper()
    events = feed(
        mapper,
        block_start("m1", 0, {"type": "thinking", "thinking": ""}),
        stream(
            "m1",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "a"},
            },
        ),
        assistant("m1", {"type": "thinking", "thinking": "a"}, "a1"),
        stream(
            "m1",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "b"},
            },
        ),
    )
    assert types(events) == ["item.started", "item.delta", "item.completed"]
    assert isinstance(events[1], ItemDelta) and events[1].text == "a"


def test_tool_result_completes_the_tool_item_with_output_and_exit_status() -> None:
    mapper, _ = started_mapper()
    feed(mapper, assistant("m1", tool_use("t1", "Bash", {"command": "false"}), "a1"))
    ok = feed(
        mapper,
        tool_result(
            "t1", "hi", tool_use_result={"stdout": "hi", "stderr": "", "interrupted": False}
        ),
    )
    assert isinstance(ok[0], ItemCompleted)
    assert ok[0].status == "completed"
    assert ok[0].content == CommandExecution(input="false", output="hi", exit_code=0)

    feed(mapper, assistant("m2", tool_use("t2", "Bash", {"command": "exit 3"}), "a2"))
    failed = feed(mapper, tool_result("t2", "Exit code 3\nboom", is_error=True))
    assert isinstance(failed[0], ItemCompleted)
    assert failed[0].status == "failed"
    assert isinstance(failed[0].content, CommandExecution) and failed[0].content.exit_code == 3


def test_tool_result_for_an_unknown_tool_is_a_warning() -> None:
    mapper, _ = started_mapper()
    events = feed(mapper, tool_result("nope", "x"))
    assert isinstance(events[0], Diagnostic) and events[0].code == "claude.unknown_tool_result"


@pytest.mark.parametrize(
    ("name", "tool_input", "content"),
    [
        ("Glob", {"pattern": "**/*.py", "path": "src"}, FileSearch(query="**/*.py", path="src")),
        ("Grep", {"pattern": "TODO"}, FileSearch(query="TODO")),
        ("LS", {"path": "/tmp"}, FileSearch(query="/tmp", path="/tmp")),
        ("Read", {"file_path": "a.py"}, DynamicTool(tool_name="Read", input={"file_path": "a.py"})),
        ("WebSearch", {"query": "trio"}, WebSearch(query="trio")),
        ("WebFetch", {"url": "http://x"}, WebSearch(query="http://x")),
        (
            "mcp__t3__echo",
            {"text": "x"},
            DynamicTool(tool_name="mcp__t3__echo", input={"text": "x"}),
        ),
        ("Task", {"prompt": "p"}, Subagent(tool_name="Task", prompt="p")),
        (
            "Agent",
            {"description": "d", "prompt": "p", "subagent_type": "Explore"},
            Subagent(tool_name="Agent", description="d", prompt="p", agent_type="Explore"),
        ),
    ],
)
def test_tool_names_map_to_items(name: str, tool_input: dict[str, object], content: object) -> None:
    mapper, _ = started_mapper()
    events = feed(mapper, assistant("m1", tool_use("t1", name, tool_input), "a1"))
    assert isinstance(events[0], ItemStarted)
    assert events[0].content == content


@pytest.mark.parametrize("name", ["Edit", "Write", "MultiEdit", "NotebookEdit"])
def test_edit_tools_are_file_changes(name: str) -> None:
    mapper, _ = started_mapper()
    key = "notebook_path" if name == "NotebookEdit" else "file_path"
    events = feed(
        mapper,
        assistant(
            "m1", tool_use("t1", name, {key: "a.py", "old_string": "a", "new_string": "b"}), "a1"
        ),
    )
    assert isinstance(events[0], ItemStarted)
    content = events[0].content
    assert isinstance(content, FileChange) and content.file_name == "a.py"
    assert [c.path for c in content.changes] == ["a.py"]


def test_todo_write_is_a_todo_list_plan_not_an_item() -> None:
    mapper, _ = started_mapper()
    todos = [
        {"content": "read", "status": "completed", "activeForm": "reading"},
        {"content": "write", "status": "in_progress", "activeForm": "writing"},
        {"content": "test", "status": "pending", "activeForm": "testing"},
    ]
    events = feed(mapper, assistant("m1", tool_use("t1", "TodoWrite", {"todos": todos}), "a1"))
    assert len(events) == 1 and isinstance(events[0], PlanUpdated)
    plan = events[0]
    assert plan.kind == "todo_list" and plan.native_item_ref == "t1"
    assert [(s.id, s.text, s.status) for s in plan.steps] == [
        ("1", "read", "completed"),
        ("2", "write", "running"),
        ("3", "test", "pending"),
    ]
    # Its result closes nothing and warns of nothing.
    assert feed(mapper, tool_result("t1", "Todos have been modified")) == []


def test_exit_plan_mode_is_a_proposed_plan() -> None:
    mapper, _ = started_mapper()
    events = feed(
        mapper, assistant("m1", tool_use("t1", "ExitPlanMode", {"plan": "# Plan\n1. do"}), "a1")
    )
    assert isinstance(events[0], PlanUpdated)
    assert (events[0].kind, events[0].markdown) == ("proposed_plan", "# Plan\n1. do")


@pytest.mark.parametrize(
    ("tool", "kind"),
    [
        ("Bash", "command"),
        ("Read", "file-read"),
        ("Glob", "file-read"),
        ("Grep", "file-read"),
        ("LS", "file-read"),
        ("Edit", "file-change"),
        ("Write", "file-change"),
        ("MultiEdit", "file-change"),
        ("NotebookEdit", "file-change"),
        ("AskUserQuestion", "user_input"),
        ("WebFetch", "dynamic_tool_call"),
        ("mcp__t3__echo", "dynamic_tool_call"),
        ("ExitPlanMode", "dynamic_tool_call"),
    ],
)
def test_can_use_tool_kind_by_tool_name(tool: str, kind: str) -> None:
    mapper, _ = started_mapper()
    events = feed(mapper, can_use_tool("r1", tool, {"command": "touch x"}, "t1"))
    assert isinstance(events[0], RequestOpened)
    assert (events[0].kind, events[0].native_request_ref, events[0].native_item_ref) == (
        kind,
        "r1",
        "t1",
    )


def test_ask_user_question_carries_its_questions() -> None:
    mapper, _ = started_mapper()
    question = {
        "question": "Which colour?",
        "header": "Colour",
        "options": [
            {"label": "red", "description": "warm"},
            {"label": "blue", "description": "cool"},
        ],
        "multiSelect": False,
    }
    events = feed(mapper, can_use_tool("r1", "AskUserQuestion", {"questions": [question]}, "t1"))
    opened = events[0]
    assert isinstance(opened, RequestOpened) and opened.kind == "user_input"
    assert opened.questions is not None
    assert [(q.id, q.question, q.header) for q in opened.questions] == [
        ("Which colour?", "Which colour?", "Colour")
    ]
    assert "acceptForSession" not in opened.available_decisions


def test_accept_for_session_is_offered_only_with_suggested_rules() -> None:
    # acceptForSession sends the CLI's permission_suggestions back as the rules
    # to remember; a prompt without any has nothing to remember.
    mapper, _ = started_mapper()
    bare = can_use_tool("r1", "Bash", {"command": "touch x"}, "t1")
    suggested = can_use_tool("r2", "Bash", {"command": "touch y"}, "t2")
    suggested["request"]["permission_suggestions"] = [
        {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "touch y *"}]}
    ]
    opened = [e for e in feed(mapper, bare, suggested) if isinstance(e, RequestOpened)]
    assert [o.available_decisions for o in opened] == [
        ["accept", "decline", "cancel"],
        ["accept", "acceptForSession", "decline", "cancel"],
    ]


def test_is_error_with_subtype_success_is_a_failed_turn() -> None:
    """Backend down: the CLI says `success` and `is_error: true`; is_error wins."""
    mapper, _ = started_mapper()
    synthetic = assistant(
        "x",
        text("API Error: 500 fake failure"),
        "a-synth",
        error="server_error",
        is_api_error_message=True,
    )
    synthetic["message"]["model"] = "<synthetic>"
    events = feed(
        mapper,
        synthetic,
        result(is_error=True, terminal_reason="api_error", result="API Error: 500 fake failure"),
    )
    assert types(events) == ["diagnostic", "usage.updated", "turn.completed"]
    assert isinstance(events[0], Diagnostic) and events[0].code == "claude.api_error"
    done = events[-1]
    assert isinstance(done, TurnCompleted)
    assert done.status == "failed" and done.error == "API Error: 500 fake failure"
    # The synthetic message is not the conversation head.
    assert mapper.head is None


def test_result_carries_usage_and_cost() -> None:
    mapper, _ = started_mapper()
    events = feed(mapper, result())
    usage = next(e for e in events if isinstance(e, UsageUpdated)).usage
    assert usage["input_tokens"] == 10 and usage["total_cost_usd"] == 0.0001
    done = events[-1]
    assert isinstance(done, TurnCompleted) and done.status == "completed" and done.usage == usage


def test_aborted_tools_with_a_cancelled_request_is_an_interrupted_turn() -> None:
    """Interrupt while can_use_tool waits: cancel request, rejected tool result, aborted_tools."""
    mapper, _ = started_mapper()
    feed(
        mapper,
        assistant("m1", tool_use("t1", "Bash", {"command": "touch x"}), "a1"),
        can_use_tool("r1", "Bash", {"command": "touch x"}, "t1"),
    )
    mapper.interrupt_sent()
    events = feed(
        mapper,
        {"type": "control_cancel_request", "request_id": "r1"},
        tool_result(
            "t1",
            "The user doesn't want to proceed",
            is_error=True,
            tool_use_result="User rejected tool use",
        ),
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [text("[Request interrupted by user for tool use]")],
            },
        },
        result(subtype="error_during_execution", is_error=True, terminal_reason="aborted_tools"),
    )
    assert types(events) == [
        "request.cancelled",
        "item.completed",
        "thread.refs",
        "usage.updated",
        "turn.completed",
    ]
    cancelled = events[0]
    assert isinstance(cancelled, RequestCancelled) and cancelled.native_request_ref == "r1"
    item = events[1]
    assert isinstance(item, ItemCompleted) and item.status == "interrupted"
    done = events[-1]
    assert isinstance(done, TurnCompleted) and done.status == "interrupted" and done.error is None


def test_a_reply_cut_off_by_an_interrupt_ends_interrupted() -> None:
    # The real 2.1.327 order (fixtures/claude/interrupt_streaming.ndjson): the
    # interrupt's response, the partial assistant message marked `aborted`, the
    # CLI's interrupt marker, the stream's own stop events, then the result.
    mapper, _ = started_mapper()
    mapper.interrupt_sent()
    feed(
        mapper, block_start("m1", 0, {"type": "text", "text": ""}), text_delta("m1", 0, "chunk 0 ")
    )
    events = feed(
        mapper,
        assistant("m1", text("chunk 0 "), "u1", aborted=True),
        {
            "type": "user",
            "message": {"role": "user", "content": [text("[Request interrupted by user]")]},
            "session_id": SESSION,
        },
        stream("m1", {"type": "content_block_stop", "index": 0}),
        stream("m1", {"type": "message_stop"}),
        result(
            subtype="error_during_execution", is_error=True, terminal_reason="aborted_streaming"
        ),
    )
    (item,) = [e for e in events if isinstance(e, ItemCompleted)]
    assert (item.native_item_ref, item.status) == ("m1#0", "interrupted")
    assert isinstance(item.content, AssistantMessage) and item.content.text == "chunk 0 "
    assert isinstance(events[-1], TurnCompleted) and events[-1].status == "interrupted"


def test_a_complete_reply_still_ends_completed() -> None:
    mapper, _ = started_mapper()
    feed(mapper, block_start("m1", 0, {"type": "text", "text": ""}), text_delta("m1", 0, "all"))
    (item,) = feed(mapper, assistant("m1", text("all"), "u1"))
    assert isinstance(item, ItemCompleted) and item.status == "completed"


def test_aborted_streaming_without_the_partial_message_closes_the_open_item() -> None:
    # Not what 2.1.327 sends, but a result must still close what is open.
    mapper, _ = started_mapper()
    feed(mapper, block_start("m1", 0, {"type": "text", "text": ""}), text_delta("m1", 0, "chunk"))
    events = feed(
        mapper,
        result(
            subtype="error_during_execution", is_error=True, terminal_reason="aborted_streaming"
        ),
    )
    item = events[0]
    assert (
        isinstance(item, ItemCompleted)
        and item.native_item_ref == "m1#0"
        and item.status == "interrupted"
    )
    assert isinstance(events[-1], TurnCompleted) and events[-1].status == "interrupted"


def test_error_during_execution_after_our_interrupt_is_interrupted_without_terminal_reason() -> (
    None
):
    mapper, _ = started_mapper()
    mapper.interrupt_sent()
    events = feed(
        mapper, result(subtype="error_during_execution", is_error=True, terminal_reason="")
    )
    assert isinstance(events[-1], TurnCompleted) and events[-1].status == "interrupted"


def test_declined_tool_item_is_declined_and_the_request_resolved() -> None:
    mapper, _ = started_mapper()
    feed(
        mapper,
        assistant("m1", tool_use("t1", "Bash", {"command": "touch x"}), "a1"),
        can_use_tool("r1", "Bash", {"command": "touch x"}, "t1"),
    )
    resolved = mapper.request_answered("r1", "decline")
    assert resolved == [RequestResolved(native_request_ref="r1", decision="decline")]
    events = feed(mapper, tool_result("t1", "no", is_error=True))
    assert isinstance(events[0], ItemCompleted) and events[0].status == "declined"


def test_cancel_of_an_unknown_request_is_ignored() -> None:
    mapper, _ = started_mapper()
    assert feed(mapper, {"type": "control_cancel_request", "request_id": "hook-1"}) == []


def test_hook_and_mcp_requests_have_no_canonical_events_unknown_ones_warn() -> None:
    mapper, _ = started_mapper()
    quiet = feed(
        mapper,
        {
            "type": "control_request",
            "request_id": "h",
            "request": {"subtype": "hook_callback", "callback_id": "x"},
        },
        {
            "type": "control_request",
            "request_id": "m",
            "request": {"subtype": "mcp_message", "server_name": "s"},
        },
    )
    assert quiet == []
    loud = feed(
        mapper, {"type": "control_request", "request_id": "z", "request": {"subtype": "teleport"}}
    )
    assert isinstance(loud[0], Diagnostic) and loud[0].code == "claude.unknown_control_request"


def test_exit_mid_turn_closes_items_requests_and_the_turn() -> None:
    mapper, _ = started_mapper()
    feed(
        mapper,
        assistant("m1", tool_use("t1", "Bash", {"command": "sleep 9"}), "a1"),
        can_use_tool("r1", "Bash", {"command": "sleep 9"}, "t1"),
    )
    events = mapper.exited(ExitStatus(code=None, signal=9), "bye")
    assert types(events) == [
        "item.completed",
        "request.cancelled",
        "turn.completed",
        "runtime.exited",
    ]
    assert isinstance(events[0], ItemCompleted) and events[0].status == "failed"
    assert isinstance(events[2], TurnCompleted) and events[2].status == "failed"
    assert events[3] == RuntimeExited(code=None, signal=9, stderr_tail="bye")


def test_result_without_a_turn_is_a_diagnostic() -> None:
    mapper = ClaudeMapper()
    events = feed(
        mapper,
        result(subtype="error_during_execution", is_error=True, errors=["No conversation found"]),
    )
    assert isinstance(events[0], Diagnostic) and events[0].code == "claude.result_without_turn"


def test_head_is_reported_before_the_turn_completes() -> None:
    mapper, _ = started_mapper()
    events = feed(mapper, assistant("m1", text("hi"), "head-1"), result())
    refs = [e for e in events if isinstance(e, ThreadRefsLearned)]
    assert [r.native_conversation_head_ref for r in refs] == ["head-1"]
    assert types(events).index("thread.refs") < types(events).index("turn.completed")


def test_fork_reports_where_it_came_from_once() -> None:
    mapper = ClaudeMapper(native_thread_ref="new", forked_from="old")
    events = mapper.user_sent() + feed(
        mapper, init("new"), assistant("m", text("x"), "h"), result()
    )
    refs = [e for e in events if isinstance(e, ThreadRefsLearned)]
    assert [r.forked_from_native_thread_ref for r in refs] == ["old", None]


def test_rate_limit_and_unknown_system_frames_are_info_diagnostics() -> None:
    mapper, _ = started_mapper()
    events = feed(
        mapper,
        {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}},
        {"type": "system", "subtype": "brand_new"},
        {"type": "system", "subtype": "status", "status": "requesting"},
    )
    assert [(e.level, e.code) for e in events if isinstance(e, Diagnostic)] == [
        ("info", "claude.rate_limit"),
        ("info", "claude.system"),
    ]


def test_same_frames_give_the_same_events() -> None:
    def run() -> list[object]:
        mapper, events = started_mapper()
        events += feed(
            mapper,
            block_start("m1", 0, {"type": "text", "text": ""}),
            text_delta("m1", 0, "a"),
            assistant("m1", text("a"), "a1"),
            assistant("m1", tool_use("t1", "Bash", {"command": "ls"}), "a2"),
            can_use_tool("r1", "Bash", {"command": "ls"}, "t1"),
        )
        events += mapper.request_answered("r1", "accept")
        events += feed(mapper, tool_result("t1", "x"), result())
        return events

    assert run() == run()
    assert any(isinstance(e, TurnStarted) for e in run())


def test_full_access_opens_no_request_except_questions() -> None:
    mapper = ClaudeMapper(full_access=True)
    mapper.user_sent()
    assert feed(mapper, can_use_tool("r1", "Bash", {"command": "touch x"}, "t1")) == []
    asked = feed(mapper, can_use_tool("r2", "AskUserQuestion", {"questions": []}, "t2"))
    assert isinstance(asked[0], RequestOpened) and asked[0].kind == "user_input"
    # The auto-answered request is not left open at the end of the turn.
    assert [type(e) for e in feed(mapper, result())].count(RequestCancelled) == 1


def test_task_tool_is_a_subagent_and_its_frames_are_its_children() -> None:
    mapper, _ = started_mapper()
    spawn = feed(
        mapper,
        assistant(
            "m1",
            tool_use("task1", "Task", {"description": "look", "prompt": "find x"}),
            "a1",
        ),
    )
    assert spawn == [
        ItemStarted(
            native_item_ref="task1",
            content=Subagent(tool_name="Task", description="look", prompt="find x"),
        )
    ]
    child = feed(
        mapper,
        assistant("m2", text("child says"), "a2", parent_tool_use_id="task1"),
        assistant(
            "m2", tool_use("t2", "Bash", {"command": "ls"}), "a3", parent_tool_use_id="task1"
        ),
    )
    started = [e for e in child if isinstance(e, ItemStarted)]
    assert [e.native_item_ref for e in started] == ["m2#0", "t2"]
    assert all(e.parent_native_item_ref == "task1" for e in started)
    done = feed(mapper, tool_result("task1", "x is in y.py"))
    assert done == [
        ItemCompleted(
            native_item_ref="task1",
            content=Subagent(
                tool_name="Task", description="look", prompt="find x", output="x is in y.py"
            ),
        )
    ]


def _task_started(task_id: str, tool_use_id: str) -> dict[str, Any]:
    # As Claude 2.1.327 sends it (fixtures/lineage/claude_subagent_*.claude.ndjson).
    return {
        "type": "system",
        "subtype": "task_started",
        "task_id": task_id,
        "tool_use_id": tool_use_id,
        "description": "write child.txt",
        "subagent_type": "general-purpose",
        "task_type": "local_agent",
        "uuid": "u-task",
        "session_id": "s1",
    }


def test_task_started_names_the_subagents_child_thread() -> None:
    mapper, _ = started_mapper()
    feed(mapper, assistant("m1", tool_use("ag1", "Agent", {"prompt": "p"}), "a1"))
    [note] = feed(mapper, _task_started("abc123", "ag1"))
    assert isinstance(note, Diagnostic) and note.code == "claude.system"
    assert note.detail == {"subtype": "task_started", "task_id": "abc123", "tool_use_id": "ag1"}
    [done] = feed(mapper, tool_result("ag1", "report"))
    assert isinstance(done, ItemCompleted) and isinstance(done.content, Subagent)
    assert done.content.child_native_thread_ref == "abc123"
    # A subagent the turn's end closes carries it too; an unknown tool use changes nothing.
    feed(mapper, assistant("m2", tool_use("ag2", "Agent", {"prompt": "q"}), "a2"))
    feed(mapper, _task_started("def456", "ag2"), _task_started("zzz", "nope"))
    closed = [e for e in feed(mapper, result()) if isinstance(e, ItemCompleted)]
    assert [e.content.child_native_thread_ref for e in closed] == ["def456"]  # type: ignore[union-attr]
