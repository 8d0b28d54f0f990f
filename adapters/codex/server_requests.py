"""Server->client requests: what they ask (RequestOpened) and how we answer them.

Every request Codex can send in 0.169.0 is listed in :data:`REQUEST_KINDS` (or is
``attestation/generate``, which we refuse, as any method newer than this list).
Each request offers the t3orch decisions (:data:`~t3orch.domain.request.REQUEST_DECISIONS`)
its reply can carry, translated from Codex's ``availableDecisions``; answers are
translated back. Answers are built per method because
the reply shapes differ: v2 approvals take ``{"decision": accept|...}``, the
legacy ones a ``ReviewDecision``, permissions a granted profile, user input a
map of answers, a dynamic tool call its output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.protocol import RequestAnswer
from t3orch.domain.plan import UserInputQuestion
from t3orch.domain.request import REQUEST_DECISIONS, RequestDecision
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

#: Methods whose reply is ``{"decision": CommandExecution/FileChangeApprovalDecision}``.
_V2_APPROVALS = ("item/commandExecution/requestApproval", "item/fileChange/requestApproval")
#: The exec-policy amendment: Codex's "accept and remember this command".
AMENDMENT = "acceptWithExecpolicyAmendment"

#: What we can send per method when Codex lists nothing (its schema's full choice).
_DEFAULT_DECISIONS: dict[str, tuple[RequestDecision, ...]] = {
    "item/commandExecution/requestApproval": REQUEST_DECISIONS,
    "item/fileChange/requestApproval": REQUEST_DECISIONS,
    "execCommandApproval": REQUEST_DECISIONS,
    "applyPatchApproval": REQUEST_DECISIONS,
    "item/permissions/requestApproval": ("accept", "acceptForSession", "decline"),
    "item/tool/requestUserInput": ("accept", "decline"),
    "mcpServer/elicitation/request": ("accept", "decline", "cancel"),
    "item/tool/call": ("accept", "decline"),
    "account/chatgptAuthTokens/refresh": ("accept", "decline"),
}


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


def _native_decisions(params: Mapping[str, Any]) -> dict[str, Any]:
    """``availableDecisions`` by name, each with its payload (None for a plain string).

    The list mixes plain strings and one-key objects
    (``{"acceptWithExecpolicyAmendment": {"execpolicy_amendment": [...]}}``).
    """
    native: dict[str, Any] = {}
    value = params.get("availableDecisions")
    if isinstance(value, list):
        for entry in value:
            if isinstance(entry, str):
                native.setdefault(entry, None)
            elif isinstance(entry, dict) and len(entry) == 1:
                name, payload = next(iter(entry.items()))
                if isinstance(name, str):
                    native[name] = payload
    return native


def offered_decisions(method: str, params: Mapping[str, Any]) -> list[str]:
    """The t3orch decisions this request can be answered with, in vocabulary order.

    Where Codex lists ``availableDecisions`` (v2 approvals), they are translated:
    ``acceptForSession``, else the exec-policy amendment, is our ``acceptForSession``;
    a network-policy amendment has no word of ours and is not offered. ``decline``
    is always offered on a v2 approval: Codex accepts it though it does not list it
    (the item ends declined and the turn goes on). Nothing listed: everything the
    method's reply can carry.
    """
    native = _native_decisions(params)
    if method not in _V2_APPROVALS or not native:
        return list(_DEFAULT_DECISIONS.get(method, ()))
    ours = {"decline"}
    ours.update(d for d in ("accept", "decline", "cancel") if d in native)
    if "acceptForSession" in native or _amendment(params, native) is not None:
        ours.add("acceptForSession")
    return [d for d in REQUEST_DECISIONS if d in ours]


def _amendment(params: Mapping[str, Any], native: Mapping[str, Any]) -> list[str] | None:
    """The exec-policy amendment offered (the command prefix to allow), if any."""
    if AMENDMENT not in native:
        return None
    payload = native[AMENDMENT]
    rule = payload.get("execpolicy_amendment") if isinstance(payload, dict) else None
    if rule is None:  # a bare name: the rule is the one proposed with the request
        rule = params.get("proposedExecpolicyAmendment")
    if isinstance(rule, list) and rule and all(isinstance(part, str) for part in rule):
        return list(rule)
    return None


def _v2_decision(params: Mapping[str, Any], decision: RequestDecision) -> Any:
    """Our decision in a v2 approval's words (see :func:`offered_decisions`)."""
    if decision != "acceptForSession":
        return decision
    native = _native_decisions(params)
    if not native or "acceptForSession" in native:
        return "acceptForSession"
    rule = _amendment(params, native)
    if rule is None:
        raise AnswerRefused(-32000, "this request cannot be accepted for the session")
    return {AMENDMENT: {"execpolicy_amendment": rule}}


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
    decisions = offered_decisions(method, params)
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
    if method in _V2_APPROVALS:
        return {"decision": _v2_decision(params, decision)}
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
