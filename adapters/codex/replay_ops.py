"""Reading a Codex transcript's outbound frames back into replay operations.

Each ``expect_outbound`` becomes the runtime call that sends it, guarded by the
canonical events the inbound frames before it imply: a later turn waits for the
earlier ``turn/completed``; an interrupt waits for the deltas that preceded it;
an answer waits for its ``RequestOpened``. ``initialize``/``initialized`` are
the adapter's own business and a reply to ``attestation/generate`` is automatic.
"""

from __future__ import annotations

from typing import Any

from adapters.codex.adapter import CodexAdapter
from adapters.codex.server_requests import AMENDMENT
from adapters.protocol import RequestAnswer, ResumeRefs, RuntimeConfig
from adapters.replay import (
    Call,
    Fork,
    Interrupt,
    Need,
    Op,
    OpenThread,
    ReplayPlan,
    ReplayProvider,
    Respond,
    SegmentPlan,
    StartTurn,
    SteerTurn,
    Step,
    When,
    register_replay_provider,
)
from adapters.transcript import EmitInbound, ExpectOutbound, Segment, Transcript
from t3orch.domain.request import REQUEST_DECISIONS
from t3orch.provider_events import ItemDelta, RequestOpened, TurnCompleted, TurnStarted

#: Inbound notifications that become exactly one ``ItemDelta`` each.
_DELTAS = frozenset(
    {
        "item/agentMessage/delta",
        "item/plan/delta",
        "item/reasoning/textDelta",
        "item/reasoning/summaryTextDelta",
        "item/commandExecution/outputDelta",
        "item/commandExecution/terminalInteraction",
        "item/fileChange/outputDelta",
        "item/fileChange/patchUpdated",
        "item/mcpToolCall/progress",
    }
)
_DECISIONS = REQUEST_DECISIONS


def _text(params: dict[str, Any]) -> str:
    parts = params.get("input")
    if not isinstance(parts, list):
        return ""
    texts = [
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    ]
    return "\n".join(texts)


def _answer(result: Any) -> RequestAnswer:
    """The recorded reply to a server request, as the answer that produces it."""
    if not isinstance(result, dict):
        return RequestAnswer(decision="decline")
    decision = result.get("decision") or result.get("action")
    if isinstance(decision, dict) and AMENDMENT in decision:
        return RequestAnswer(decision="acceptForSession")
    if isinstance(decision, str) and decision in _DECISIONS:
        return RequestAnswer(decision=decision)
    if isinstance(result.get("answers"), dict):
        answers = {
            qid: (value.get("answers") or [""])[0]
            for qid, value in result["answers"].items()
            if isinstance(value, dict)
        }
        return RequestAnswer(decision="accept", answers=answers)
    if "success" in result:
        texts = [c.get("text", "") for c in result.get("contentItems") or [] if isinstance(c, dict)]
        return RequestAnswer(
            decision="accept" if result["success"] else "decline", message="".join(texts) or None
        )
    return RequestAnswer(decision="accept")


class _Counts:
    """Canonical events implied by the inbound frames seen so far in a segment."""

    def __init__(self) -> None:
        self.turns_started = 0
        self.turns_completed = 0
        self.deltas = 0

    def see(self, frame: dict[str, Any]) -> None:
        method = frame.get("method")
        if "id" in frame and method is not None:
            return
        if method == "turn/started":
            self.turns_started += 1
        elif method == "turn/completed":
            self.turns_completed += 1
        elif method in _DELTAS:
            self.deltas += 1

    def when(self, *extra: Need) -> When:
        needs = [
            Need(TurnStarted, self.turns_started),
            Need(TurnCompleted, self.turns_completed),
            Need(ItemDelta, self.deltas),
            *extra,
        ]
        return When(tuple(need for need in needs if need.count > 0))


def _op(frame: dict[str, Any]) -> tuple[Op, tuple[Need, ...]] | None:
    method = frame.get("method")
    params = frame.get("params") if isinstance(frame.get("params"), dict) else {}
    assert isinstance(params, dict)
    if method is None:
        if "id" in frame and "result" in frame:
            ref = str(frame["id"])
            need = Need(RequestOpened, 1, {"native_request_ref": ref})
            return Respond(ref, _answer(frame["result"])), (need,)
        return None  # an error reply: only ever our automatic attestation refusal
    if method in ("initialize", "initialized"):
        return None
    if method == "thread/start":
        return OpenThread(None), ()
    if method == "thread/resume":
        return OpenThread(ResumeRefs(str(params.get("threadId", "")))), ()
    if method == "thread/fork":
        head = params.get("lastTurnId")
        refs = ResumeRefs(str(params.get("threadId", "")), head if isinstance(head, str) else None)
        return Fork(refs), ()
    if method == "turn/start":
        return StartTurn(_text(params)), ()
    if method == "turn/steer":
        return SteerTurn(_text(params)), ()
    if method == "turn/interrupt":
        return Interrupt(), ()
    if method == "thread/read":
        kwargs = {
            "native_thread_ref": params.get("threadId"),
            "include_turns": bool(params.get("includeTurns")),
        }
        return Call("read_thread", kwargs), ()
    if method == "thread/revert":
        kwargs = {
            "before_turn_ref": params.get("beforeTurnId"),
            "native_thread_ref": params.get("threadId"),
        }
        return Call("revert_thread", kwargs), ()
    raise ValueError(f"codex replay: no operation sends {method!r}")


def _refused_ids(segment: Segment) -> set[str]:
    """Ids of our requests the recorded server answered with an error."""
    return {
        str(step.frame["id"])
        for step in segment.steps
        if isinstance(step, EmitInbound)
        and "method" not in step.frame
        and "error" in step.frame
        and "id" in step.frame
    }


def _segment_plan(segment: Segment) -> SegmentPlan:
    counts = _Counts()
    refused = _refused_ids(segment)
    steps: list[Step] = []
    for step in segment.steps:
        if isinstance(step, EmitInbound):
            counts.see(step.frame)
        elif isinstance(step, ExpectOutbound):
            found = _op(step.frame)
            if found is not None:
                op, needs = found
                # Our request (not our reply to one of Codex's) that was refused.
                fails = "method" in step.frame and str(step.frame.get("id")) in refused
                steps.append(Step(op, counts.when(*needs), fails=fails))
    return SegmentPlan(tuple(steps))


def codex_plan(transcript: Transcript) -> ReplayPlan:
    return ReplayPlan(tuple(_segment_plan(segment) for segment in transcript.segments))


def codex_config(transcript: Transcript) -> RuntimeConfig:
    return RuntimeConfig(command=["codex"], env={}, cwd="/tmp/t3orch-fixture/work")


register_replay_provider(
    "codex", ReplayProvider(make_adapter=CodexAdapter, plan=codex_plan, config=codex_config)
)
