"""Codex ``ThreadItem`` dicts -> canonical :data:`ItemContent` and item status.

Item payloads are decoded as plain dicts (they are rare next to deltas and
carry many optional fields that change between Codex versions); every lookup
tolerates a missing or null field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    Compaction,
    DynamicTool,
    FileChange,
    FileChangeEntry,
    ItemContent,
    Plan,
    Reasoning,
    Subagent,
    UserMessage,
    WebSearch,
)
from t3orch.domain.vocab import TurnItemStatus

#: Item types that have a canonical content (everything else is a diagnostic).
MAPPED_ITEM_TYPES = frozenset(
    {
        "userMessage",
        "agentMessage",
        "reasoning",
        "commandExecution",
        "fileChange",
        "mcpToolCall",
        "dynamicToolCall",
        "webSearch",
        "plan",
        "contextCompaction",
        "collabAgentToolCall",
        "imageView",
    }
)

_STATUS: dict[str, TurnItemStatus] = {
    "completed": "completed",
    "failed": "failed",
    "declined": "declined",
    "interrupted": "interrupted",
    "cancelled": "cancelled",
    # A completed item that still says inProgress has nothing more to come.
    "inProgress": "completed",
}


def item_status(item: dict[str, Any]) -> TurnItemStatus:
    status = item.get("status")
    if isinstance(status, str):
        return _STATUS.get(status, "completed")
    return "completed"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _lines(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(part for part in value if isinstance(part, str))
    return _str(value)


def user_text(item: dict[str, Any]) -> str:
    parts = item.get("content")
    if not isinstance(parts, list):
        return ""
    texts = [
        part["text"]
        for part in parts
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


def file_change(changes: Any) -> FileChange:
    entries: list[FileChangeEntry] = []
    additions = deletions = 0
    if isinstance(changes, list):
        for change in changes:
            if not isinstance(change, dict):
                continue
            kind = change.get("kind")
            kind_name = kind.get("type") if isinstance(kind, dict) else kind
            diff = change.get("diff") if isinstance(change.get("diff"), str) else None
            entries.append(
                FileChangeEntry(path=_str(change.get("path")), kind=_str(kind_name), diff=diff)
            )
            if diff and "@@" not in diff and kind_name in ("add", "delete"):
                # Codex sends a whole added/deleted file as plain content, not a hunk.
                count = len(diff.splitlines())
                additions += count if kind_name == "add" else 0
                deletions += count if kind_name == "delete" else 0
            elif diff:
                for line in diff.splitlines():
                    if line.startswith("+") and not line.startswith("+++"):
                        additions += 1
                    elif line.startswith("-") and not line.startswith("---"):
                        deletions += 1
    diffs = [entry.diff for entry in entries if entry.diff]
    return FileChange(
        file_name=entries[0].path if entries else "",
        additions=additions if entries else None,
        deletions=deletions if entries else None,
        diff_str="\n".join(diffs) if diffs else None,
        changes=entries,
    )


def item_content(item: dict[str, Any]) -> ItemContent | None:
    """The canonical content of a Codex item, or ``None`` for an unmapped item type."""
    match item.get("type"):
        case "agentMessage":
            return AssistantMessage(text=_str(item.get("text")))
        case "userMessage":
            return UserMessage(text=user_text(item))
        case "reasoning":
            return Reasoning(text=_lines(item.get("content")), summary=_lines(item.get("summary")))
        case "commandExecution":
            exit_code = item.get("exitCode")
            cwd = item.get("cwd")
            return CommandExecution(
                input=_str(item.get("command")),
                output=_str(item.get("aggregatedOutput")),
                exit_code=exit_code if isinstance(exit_code, int) else None,
                cwd=cwd if isinstance(cwd, str) else None,
            )
        case "fileChange":
            return file_change(item.get("changes"))
        case "mcpToolCall":
            server, tool = _str(item.get("server")), _str(item.get("tool"))
            output = item.get("result") if item.get("error") is None else {"error": item["error"]}
            return DynamicTool(
                tool_name=f"{server}/{tool}" if server else tool,
                input=item.get("arguments"),
                output=output,
            )
        case "dynamicToolCall":
            return DynamicTool(
                tool_name=_str(item.get("tool")) or None,
                input=item.get("arguments"),
                output=item.get("contentItems"),
            )
        case "collabAgentToolCall" if item.get("tool") == "spawnAgent":
            return spawned_agent(item)
        case "collabAgentToolCall":
            return DynamicTool(
                tool_name=f"collab/{_str(item.get('tool'))}",
                input={
                    "prompt": item.get("prompt"),
                    "receiverThreadIds": item.get("receiverThreadIds"),
                },
                output=item.get("agentsStates"),
            )
        case "imageView":
            return DynamicTool(tool_name="view_image", input={"path": item.get("path")})
        case "webSearch":
            results = item.get("results")
            return WebSearch(
                query=_str(item.get("query")),
                output="" if results is None else _results_text(results),
            )
        case "plan":
            return Plan(markdown=_str(item.get("text")))
        case "contextCompaction":
            return Compaction(title="Context compacted")
        case _:
            return None


def spawned_agent(item: dict[str, Any]) -> Subagent:
    """A collab ``spawnAgent`` call: the new agent's thread is the first receiver.

    The other collab tools (``wait``, ``sendInput``, ``closeAgent``, ...) stay
    generic tool calls of the thread that made them.
    """
    receivers = item.get("receiverThreadIds")
    child = receivers[0] if isinstance(receivers, list) and receivers else None
    prompt = item.get("prompt")
    model = item.get("model")
    return Subagent(
        tool_name="collab/spawnAgent",
        description=_str(prompt).split("\n", 1)[0][:200],
        prompt=prompt if isinstance(prompt, str) else None,
        agent_type=model if isinstance(model, str) else None,
        child_native_thread_ref=child if isinstance(child, str) else None,
        output=item.get("agentsStates"),
    )


def _results_text(results: Any) -> str:
    return msgspec.json.encode(results).decode()
