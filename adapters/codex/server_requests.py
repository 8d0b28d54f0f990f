"""Server->client requests: what they ask (RequestOpened) and how we answer them.

Every request Codex can send in 0.169.0 is listed in :data:`REQUEST_KINDS` (or is
``attestation/generate``, which we refuse). Answers are built per method because
the reply shapes differ: v2 approvals take ``{"decision": accept|...}``, the
legacy ones a ``ReviewDecision``, permissions a granted profile, user input a
map of answers, a dynamic tool call its output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.protocol import RequestAnswer
from t3orch.domain.plan import UserInputQuestion
from t3orch.domain.vocab import RuntimeRequestKind
from t3orch.provider_events import RequestOpened

#: A request we answer with an error instead of asking anyone.
ATTESTATION = "attestation/generate"
#: JSON-RPC "method not found": what a request we do not handle is answered with.
METHOD_NOT_FOUND = -32601

#: Fixed kinds; ``item/permissions/requestApproval`` is classified by what it asks.
REQUEST_KINDS: dict[str, RuntimeRequestKind] = {
    "item/commandExecution/requestApproval": "command",
    "execCommandApproval": "command",
    "item/fileChange/requestApproval": "file-change",
    "applyPatchApproval": "file-change",
    "item/tool/requestUserInput": "user_input",
    "mcpServer/elicitation/request": "user_input",
    "item/tool/call": "dynamic_tool_call",
    "account/chatgptAuthTokens/refresh": "auth_refresh",
    "item/permissions/requestApproval": "command",
}

_APPROVAL_DECISIONS = ["accept", "acceptForSession", "decline", "cancel"]


def refusal(method: str) -> tuple[int, str] | None:
    """The JSON-RPC error we answer ``method`` with at once, or None if someone is asked.

    Codex waits for every server request's answer, so one we cannot ask anyone
    (attestation, or a method newer than this adapter) is refused the moment it
    arrives: left unanswered it would hold its turn forever.
    """
    if method == ATTESTATION:
        return METHOD_NOT_FOUND, "attestation unsupported"
    if method not in REQUEST_KINDS:
        return METHOD_NOT_FOUND, f"t3orch does not handle the server request {method}"
    return None


def permissions_kind(params: Mapping[str, Any]) -> RuntimeRequestKind:
    """Writes -> file-change, reads only -> file-read, otherwise (network ...) -> command."""
    permissions = params.get("permissions")
    fs = permissions.get("fileSystem") if isinstance(permissions, dict) else None
    if isinstance(fs, dict):
        accesses = {
            entry.get("access") for entry in fs.get("entries") or [] if isinstance(entry, dict)
        }
        if fs.get("write") or "write" in accesses:
            return "file-change"
        if fs.get("read") or "read" in accesses:
            return "file-read"
    return "command"


def request_kind(method: str, params: Mapping[str, Any]) -> RuntimeRequestKind | None:
    if method == "item/permissions/requestApproval":
        return permissions_kind(params)
    return REQUEST_KINDS.get(method)


def _decision_names(value: Any) -> list[str]:
    # availableDecisions mixes plain strings and one-key objects
    # ({"acceptWithExecpolicyAmendment": {...}}); keep the names.
    names: list[str] = []
    if isinstance(value, list):
        for entry in value:
            if isinstance(entry, str):
                names.append(entry)
            elif isinstance(entry, dict) and len(entry) == 1:
                names.append(next(iter(entry)))
    return names


def _summary(method: str, params: Mapping[str, Any]) -> str:
    command = params.get("command")
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    reason = params.get("reason")
    for candidate in (command, reason, params.get("message"), params.get("tool")):
        if isinstance(candidate, str) and candidate:
            return candidate
    if method in ("item/fileChange/requestApproval", "applyPatchApproval"):
        return "apply a patch"
    return method


def _questions(params: Mapping[str, Any]) -> list[UserInputQuestion] | None:
    raw = params.get("questions")
    if not isinstance(raw, list):
        return None
    questions = []
    for q in raw:
        if not isinstance(q, dict):
            continue
        options = q.get("options")
        questions.append(
            UserInputQuestion(
                id=str(q.get("id", "")),
                question=str(q.get("question", "")),
                header=q.get("header") if isinstance(q.get("header"), str) else None,
                options=[o for o in options if isinstance(o, dict)]
                if isinstance(options, list)
                else [],
            )
        )
    return questions


def request_opened(
    ref: str, method: str, params: Mapping[str, Any], kind: RuntimeRequestKind, raw_id: str | None
) -> RequestOpened:
    item = params.get("itemId") or params.get("callId")
    decisions = _decision_names(params.get("availableDecisions"))
    if not decisions and kind in ("command", "file-change", "file-read"):
        decisions = list(_APPROVAL_DECISIONS)
    return RequestOpened(
        raw_event_id=raw_id,
        native_request_ref=ref,
        kind=kind,
        native_item_ref=item if isinstance(item, str) else None,
        summary=_summary(method, params),
        detail={"method": method, "params": dict(params)},
        available_decisions=decisions,
        questions=_questions(params) if method == "item/tool/requestUserInput" else None,
    )


class AnswerRefused(Exception):
    """This answer cannot be expressed for that request: reply with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_LEGACY = {
    "accept": "approved",
    "acceptForSession": "approved_for_session",
    "cancel": "abort",
}


def answer_result(method: str, params: Mapping[str, Any], answer: RequestAnswer) -> Any:
    """The ``result`` of our reply to ``method``; raises :class:`AnswerRefused`."""
    decision = answer.decision
    accepted = decision in ("accept", "acceptForSession")
    if method in ("item/commandExecution/requestApproval", "item/fileChange/requestApproval"):
        return {"decision": decision}
    if method in ("execCommandApproval", "applyPatchApproval"):
        if decision == "decline":
            return {"decision": {"denied": {"rejection": answer.message or "declined by the user"}}}
        return {"decision": _LEGACY[decision]}
    if method == "item/permissions/requestApproval":
        asked = params.get("permissions") if accepted else None
        scope = "session" if decision == "acceptForSession" else "turn"
        return {"permissions": dict(asked) if isinstance(asked, dict) else {}, "scope": scope}
    if method == "item/tool/requestUserInput":
        answers = answer.answers if accepted and answer.answers else {}
        return {"answers": {qid: {"answers": [text]} for qid, text in answers.items()}}
    if method == "mcpServer/elicitation/request":
        action = "accept" if accepted else decision
        content = dict(answer.answers) if accepted and answer.answers else None
        return {"action": action, "content": content}
    if method == "item/tool/call":
        items = [{"type": "inputText", "text": answer.message}] if answer.message else []
        return {"contentItems": items, "success": accepted}
    if method == "account/chatgptAuthTokens/refresh":
        tokens = answer.answers or {}
        if accepted and tokens.get("accessToken") and tokens.get("chatgptAccountId"):
            return dict(tokens)
        raise AnswerRefused(-32000, "auth token refresh declined")
    raise AnswerRefused(-32601, f"t3orch does not answer {method}")
