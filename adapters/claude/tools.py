"""Claude tool names → canonical item content and runtime-request kinds.

Decisions:

* ``Bash`` is a command (``CommandExecution``); Claude reports no exit code for a
  success, so a successful run is exit 0 and a failed one takes the code from the
  ``Exit code N`` line the CLI puts first in the result, when there is one.
* ``Glob``/``Grep``/``LS`` search the tree → ``FileSearch`` (query = the
  pattern, or the directory for LS). ``Read`` reads one known file: calling it a
  search would misstate it, so it stays a generic ``DynamicTool`` (its *request*
  kind is still ``file-read``).
* ``Edit``/``Write``/``MultiEdit``/``NotebookEdit`` → ``FileChange``.
* ``WebSearch``/``WebFetch`` → ``WebSearch`` (the query, or the URL fetched).
* ``TodoWrite`` and ``ExitPlanMode`` are plan artifacts, not items: they become
  ``PlanUpdated`` (``todo_list`` / ``proposed_plan``).
* ``Task`` (``Agent`` in newer CLIs) runs a subagent → ``Subagent``
  (description, prompt, ``subagent_type``); the subagent's own frames carry
  ``parent_tool_use_id`` = this tool use, so its items are children of it. Its
  ``tool_result`` (the subagent's final report) is the item's ``output``.
* anything else (``AskUserQuestion``, MCP tools ``mcp__server__tool``, tools
  added later) → ``DynamicTool`` with the native name and input.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import msgspec

from t3orch.domain.plan import PlanStep, UserInputQuestion
from t3orch.domain.turn_items import (
    CommandExecution,
    DynamicTool,
    FileChange,
    FileChangeEntry,
    FileSearch,
    ItemContent,
    Subagent,
    WebSearch,
)
from t3orch.domain.vocab import PlanStepStatus, RuntimeRequestKind

SEARCH_TOOLS = frozenset({"Glob", "Grep", "LS"})
READ_TOOLS = frozenset({"Read", "Glob", "Grep", "LS"})
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
WEB_TOOLS = frozenset({"WebSearch", "WebFetch"})
TODO_TOOL = "TodoWrite"
PLAN_EXIT_TOOL = "ExitPlanMode"
QUESTION_TOOL = "AskUserQuestion"
SUBAGENT_TOOLS = frozenset({"Task", "Agent"})

_EXIT_CODE = re.compile(r"^Exit code (-?\d+)")
_TODO_STATUS: dict[str, PlanStepStatus] = {
    "pending": "pending",
    "in_progress": "running",
    "completed": "completed",
}


@attrs.frozen
class PlanTool:
    """A tool call that is a plan artifact rather than an item."""

    kind: str  # "todo_list" | "proposed_plan"
    steps: tuple[PlanStep, ...] = ()
    markdown: str | None = None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _args(tool_input: Any) -> dict[str, Any]:
    return tool_input if isinstance(tool_input, dict) else {}


def tool_content(name: str, tool_input: Any) -> ItemContent | PlanTool:
    """What a ``tool_use`` block becomes."""
    args = _args(tool_input)
    match name:
        case "Bash":
            return CommandExecution(input=_str(args.get("command")))
        case _ if name in SEARCH_TOOLS:
            query = args.get("pattern") if name != "LS" else args.get("path")
            return FileSearch(query=_str(query), path=_opt_str(args.get("path")))
        case _ if name in EDIT_TOOLS:
            return _file_change(name, args)
        case "WebSearch":
            return WebSearch(query=_str(args.get("query")))
        case "WebFetch":
            return WebSearch(query=_str(args.get("url")))
        case _ if name == TODO_TOOL:
            return PlanTool("todo_list", steps=tuple(todo_steps(args)))
        case _ if name == PLAN_EXIT_TOOL:
            return PlanTool("proposed_plan", markdown=_str(args.get("plan")))
        case _ if name in SUBAGENT_TOOLS:
            return Subagent(
                tool_name=name,
                description=_str(args.get("description")),
                prompt=_opt_str(args.get("prompt")),
                agent_type=_opt_str(args.get("subagent_type")),
            )
        case _:
            return DynamicTool(tool_name=name, input=tool_input)


def _file_change(name: str, args: dict[str, Any]) -> FileChange:
    path = _str(args.get("file_path") or args.get("notebook_path"))
    if name == "Edit":
        return FileChange(
            file_name=path,
            old_str=_opt_str(args.get("old_string")),
            new_str=_opt_str(args.get("new_string")),
            changes=[FileChangeEntry(path=path, kind="update")],
        )
    if name == "Write":
        return FileChange(
            file_name=path,
            new_str=_opt_str(args.get("content")),
            changes=[FileChangeEntry(path=path, kind="write")],
        )
    if name == "NotebookEdit":
        kind = _str(args.get("edit_mode")) or "replace"
        return FileChange(
            file_name=path,
            new_str=_opt_str(args.get("new_source")),
            changes=[FileChangeEntry(path=path, kind=kind)],
        )
    # MultiEdit: several edits of one file.
    return FileChange(file_name=path, changes=[FileChangeEntry(path=path, kind="update")])


def todo_steps(args: dict[str, Any]) -> list[PlanStep]:
    todos = args.get("todos")
    steps: list[PlanStep] = []
    for position, todo in enumerate(todos if isinstance(todos, list) else []):
        if not isinstance(todo, dict):
            continue
        # Current CLIs send no todo ids; the position is the stable ordinal.
        step_id = _str(todo.get("id")) or str(position + 1)
        status = _TODO_STATUS.get(_str(todo.get("status")), "pending")
        steps.append(PlanStep(id=step_id, text=_str(todo.get("content")), status=status))
    return steps


def request_kind(name: str) -> RuntimeRequestKind:
    """The RuntimeRequest kind of a ``can_use_tool`` for tool ``name``."""
    if name == "Bash":
        return "command"
    if name in READ_TOOLS:
        return "file-read"
    if name in EDIT_TOOLS:
        return "file-change"
    if name == QUESTION_TOOL:
        return "user_input"
    return "dynamic_tool_call"


def auto_allowed(full_access: bool, name: str) -> bool:
    """Whether a ``can_use_tool`` is answered by the adapter itself, with no request.

    ``full-access`` is implemented here rather than with ``--permission-mode
    bypassPermissions``: the CLI refuses that mode when run as root ("cannot be used
    with root/sudo privileges"), which is how a system service often runs. A question
    to the user is never auto-answered: only a person can answer it.
    """
    return full_access and name != QUESTION_TOOL


def request_summary(name: str, tool_input: Any, description: str | None) -> str:
    """One line for a person deciding on the request."""
    args = _args(tool_input)
    if name == "Bash":
        return _str(args.get("command")) or description or name
    if name in EDIT_TOOLS or name == "Read":
        return f"{name} {_str(args.get('file_path') or args.get('notebook_path'))}".strip()
    return description or name


def questions(tool_input: Any) -> list[UserInputQuestion]:
    """AskUserQuestion's questions; each is keyed by its own text (how the CLI wants answers)."""
    found = _args(tool_input).get("questions")
    result: list[UserInputQuestion] = []
    for item in found if isinstance(found, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            continue
        options = [o for o in item.get("options") or [] if isinstance(o, dict)]
        result.append(
            UserInputQuestion(
                id=item["question"],
                question=item["question"],
                header=_opt_str(item.get("header")),
                options=options,
            )
        )
    return result


def result_text(content: Any) -> str:
    """The text of a ``tool_result`` block's content (a string or a block list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def completed_content(
    content: ItemContent, text: str, is_error: bool, tool_use_result: Any
) -> ItemContent:
    """The item content once its result is known."""
    match content:
        case CommandExecution():
            return _command_result(content, text, is_error, tool_use_result)
        case FileSearch():
            return FileSearch(query=content.query, path=content.path, output=text)
        case WebSearch():
            return WebSearch(query=content.query, output=text)
        case DynamicTool():
            output = tool_use_result if tool_use_result is not None else text
            return DynamicTool(tool_name=content.tool_name, input=content.input, output=output)
        case Subagent():
            return msgspec.structs.replace(content, output=text or tool_use_result)
        case _:
            return content


def _command_result(
    content: CommandExecution, text: str, is_error: bool, tool_use_result: Any
) -> CommandExecution:
    output = text
    if isinstance(tool_use_result, dict) and "stdout" in tool_use_result:
        output = _str(tool_use_result.get("stdout"))
        stderr = _str(tool_use_result.get("stderr"))
        if stderr:
            output = f"{output}\n{stderr}" if output else stderr
        if is_error and not output:
            output = text
    exit_code: int | None = 0
    if is_error:
        found = _EXIT_CODE.match(text)
        exit_code = int(found.group(1)) if found else None
    return CommandExecution(
        input=content.input, output=output, exit_code=exit_code, cwd=content.cwd
    )
