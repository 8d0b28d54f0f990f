"""Reading a Claude transcript's outbound frames back into replay operations.

Each ``expect_outbound`` becomes the runtime call that sends it:

* ``initialize`` → open the thread (new, ``--resume`` or ``--fork-session`` by the
  segment's argv). A new session is opened under the session id the recording
  shows, so the replay's refs equal the recording's;
* a ``user`` frame → ``start_turn``; ``interrupt`` → ``interrupt_turn``;
* our ``control_response`` to a ``can_use_tool`` → ``respond`` with the answer
  that produces the recorded one (allow → accept, allow with
  ``updatedPermissions`` → acceptForSession, deny → decline, deny with
  ``interrupt`` → cancel, allow with ``answers`` → accept with those answers);
* answers to ``hook_callback`` and ``mcp_message`` come from the runtime's
  handlers, which a first operation (``use_recorded_answers``) sets to reply
  what the recording replied (and ``initialize`` carries the recorded hooks).

Guards: the plan runs a :class:`~adapters.claude.mapper.ClaudeMapper` over the
segment offline and guards every operation with the number of canonical events
of each type the frames before it produce. The live adapter is the same mapper
over the same frames, so the guard is exact rather than a heuristic per frame.

A segment that never sends ``initialize`` and whose first frame is an error
``result`` is a resume the CLI refused at start-up (``resume_unknown``): its
operation opens the thread expecting the ResumeError. The recorder keeps no
``--resume`` in that segment's argv, so the ref is the result's session id.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import msgspec

from adapters.claude.adapter import ClaudeAdapter
from adapters.claude.control import HookCall, McpCall, no_mcp_server
from adapters.claude.frames import ControlResponseFrame, ResultFrame, decode_line
from adapters.claude.mapper import ClaudeMapper
from adapters.claude.runtime import ClaudeRuntime
from adapters.errors import ResumeError
from adapters.protocol import Decision, RequestAnswer, ResumeRefs, RuntimeConfig
from adapters.replay import (
    Call,
    Interrupt,
    Need,
    Op,
    ReplayPlan,
    ReplayProvider,
    Respond,
    SegmentPlan,
    StartTurn,
    Step,
    When,
    register_replay_provider,
)
from adapters.transcript import (
    EmitInbound,
    EmitInboundRaw,
    ExpectOutbound,
    Segment,
    Transcript,
)
from t3orch.provider_events import ProviderEvent, ResumeFailed


class ReplayClaudeRuntime(ClaudeRuntime):
    """The runtime plus the operations only a transcript needs."""

    async def use_recorded_answers(
        self,
        hooks: dict[str, Any] | None,
        mcp_servers: list[str],
        answers: dict[str, dict[str, Any]],
    ) -> None:
        """Send the recorded ``initialize`` hooks; answer hooks and MCP as recorded.

        ``answers`` maps the CLI's request id to the recorded response payload.
        """
        recorded = dict(answers)

        async def hook(call: HookCall) -> Mapping[str, Any]:
            return recorded.get(call.request_id, {"continue": True})

        async def mcp(call: McpCall) -> Mapping[str, Any] | None:
            answer = recorded.get(call.request_id)
            if answer is None:
                return await no_mcp_server(call)
            reply = answer.get("mcp_response")
            return reply if isinstance(reply, dict) else None

        self._options = attrs.evolve(
            self._options,
            hooks=hooks,
            hook_handler=hook,
            mcp_servers=tuple(mcp_servers),
            mcp_handler=mcp,
        )

    async def open_thread_expecting_failure(self, native_thread_ref: str) -> None:
        """Resume a thread the recording shows the CLI refusing; the refusal is the point."""
        try:
            await self.open_thread(ResumeRefs(native_thread_ref))
        except ResumeError:
            return
        raise AssertionError(f"claude replay: resume of {native_thread_ref} did not fail")

    async def settle(self) -> None:
        """Nothing: the step exists for its guard (every recorded frame has been mapped)."""


def _flag(argv: Sequence[str], name: str) -> str | None:
    for index, arg in enumerate(argv[:-1]):
        if arg == name:
            return argv[index + 1]
    return None


def _user_text(frame: dict[str, Any]) -> str:
    content = (frame.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _answer(payload: dict[str, Any]) -> RequestAnswer:
    """The recorded ``can_use_tool`` answer as the RequestAnswer that produces it."""
    message = payload.get("message") if isinstance(payload.get("message"), str) else None
    if payload.get("behavior") == "allow":
        updated = payload.get("updatedInput")
        if isinstance(updated, dict) and isinstance(updated.get("answers"), dict):
            answers = {str(k): str(v) for k, v in updated["answers"].items()}
            return RequestAnswer(decision="accept", answers=answers)
        decision: Decision = "acceptForSession" if payload.get("updatedPermissions") else "accept"
        return RequestAnswer(decision=decision)
    return RequestAnswer(
        decision="cancel" if payload.get("interrupt") else "decline", message=message
    )


class _Simulation:
    """The segment's canonical events as the adapter will produce them."""

    def __init__(self, resuming: bool) -> None:
        self.mapper = ClaudeMapper()
        self.counts: Counter[type[Any]] = Counter()
        self.resuming = resuming
        #: CLI control requests seen: request id -> subtype.
        self.requests: dict[str, str] = {}

    def add(self, events: Sequence[ProviderEvent]) -> None:
        self.counts.update(type(event) for event in events)

    def inbound(self, line: bytes) -> None:
        decoded = decode_line(line)
        if decoded is None or isinstance(decoded, ControlResponseFrame):
            return
        if (
            isinstance(decoded, ResultFrame)
            and not self.mapper.turn_active
            and self.resuming
            and decoded.is_error
            and "No conversation found" in "; ".join(decoded.errors or [])
        ):
            self.add([ResumeFailed(native_thread_ref="", reason="not_found", message="")])
        raw = msgspec.json.decode(line)
        if isinstance(raw, dict) and raw.get("type") == "control_request":
            self.requests[str(raw.get("request_id"))] = str(
                (raw.get("request") or {}).get("subtype")
            )
        self.add(self.mapper.frame(decoded, None))

    def when(self, *extra: Need) -> When:
        needs = [Need(kind, count) for kind, count in self.counts.items() if count > 0]
        return When((*needs, *extra))


def _open_op(segment: Segment) -> Op:
    argv = segment.argv
    resume = _flag(argv, "--resume")
    session_id = _flag(argv, "--session-id") or _recorded_session(segment)
    if resume is not None and "--fork-session" in argv:
        return Call("fork_thread", {"resume": ResumeRefs(resume), "session_id": session_id})
    if resume is not None:
        return Call("open_thread", {"resume": ResumeRefs(resume)})
    return Call("open_thread", {"resume": None, "session_id": session_id})


def _recorded_session(segment: Segment) -> str | None:
    for step in segment.steps:
        frame = step.frame if isinstance(step, EmitInbound) else {}
        if frame.get("type") == "system" and frame.get("subtype") == "init":
            session = frame.get("session_id")
            return session if isinstance(session, str) else None
    return None


def _refused_resume(segment: Segment) -> str | None:
    """The session id of a resume the CLI refused before reading any input."""
    if any(isinstance(s, ExpectOutbound) for s in segment.steps):
        return None
    for step in segment.steps:
        if isinstance(step, EmitInbound):
            frame = step.frame
            if frame.get("type") == "result" and frame.get("is_error"):
                session = frame.get("session_id")
                return _flag(segment.argv, "--resume") or (
                    session if isinstance(session, str) else None
                )
            return None
    return None


def _recorded_answers(segment: Segment) -> Call:
    """What the recording's client told initialize, and answered to hooks and MCP."""
    hooks: dict[str, Any] | None = None
    answers: dict[str, dict[str, Any]] = {}
    for step in segment.steps:
        if not isinstance(step, ExpectOutbound):
            continue
        frame = step.frame
        request = frame.get("request") or {}
        if frame.get("type") == "control_request" and request.get("subtype") == "initialize":
            found = request.get("hooks")
            hooks = found if isinstance(found, dict) else None
        elif frame.get("type") == "control_response":
            response = frame.get("response") or {}
            payload = response.get("response")
            if isinstance(payload, dict):
                answers[str(response.get("request_id"))] = payload
    servers: list[str] = []
    config = _flag(segment.argv, "--mcp-config")
    if config is not None:
        try:
            servers = list((json.loads(config).get("mcpServers") or {}).keys())
        except (ValueError, AttributeError):
            servers = []
    return Call(
        "use_recorded_answers", {"hooks": hooks, "mcp_servers": servers, "answers": answers}
    )


def _segment_plan(segment: Segment) -> SegmentPlan:
    refused = _refused_resume(segment)
    if refused is not None:
        return SegmentPlan(
            (Step(Call("open_thread_expecting_failure", {"native_thread_ref": refused})),)
        )
    sim = _Simulation(resuming=_flag(segment.argv, "--resume") is not None)
    steps: list[Step] = [Step(_recorded_answers(segment))]
    for step in segment.steps:
        if isinstance(step, EmitInbound):
            sim.inbound(msgspec.json.encode(step.frame))
        elif isinstance(step, EmitInboundRaw):
            for line in step.line.encode("utf-8").split(b"\n"):
                sim.inbound(line)
        elif isinstance(step, ExpectOutbound):
            frame = step.frame
            kind = frame.get("type")
            if kind == "control_request":
                subtype = (frame.get("request") or {}).get("subtype")
                if subtype == "initialize":
                    steps.append(Step(_open_op(segment), sim.when()))
                elif subtype == "interrupt":
                    steps.append(Step(Interrupt(), sim.when()))
                    sim.add(sim.mapper.interrupt_sent())
                else:
                    raise ValueError(f"claude replay: no operation sends {subtype!r}")
            elif kind == "user":
                steps.append(Step(StartTurn(_user_text(frame)), sim.when()))
                sim.add(sim.mapper.user_sent())
            elif kind == "control_response":
                response = frame.get("response") or {}
                request_id = str(response.get("request_id"))
                if sim.requests.get(request_id) != "can_use_tool":
                    continue  # hook / MCP answers come from the runtime's handlers
                answer = _answer(response.get("response") or {})
                steps.append(Step(Respond(request_id, answer), sim.when()))
                if answer.decision == "cancel":
                    sim.add(sim.mapper.interrupt_sent())
                sim.add(sim.mapper.request_answered(request_id, answer.decision))
            else:
                raise ValueError(f"claude replay: no operation sends a {kind!r} frame")
    # Hook and MCP answers are not operations, so the driver could close stdin
    # while the CLI still waits for one: wait until the whole segment has played.
    steps.append(Step(Call("settle"), sim.when()))
    return SegmentPlan(tuple(steps))


def claude_plan(transcript: Transcript) -> ReplayPlan:
    return ReplayPlan(tuple(_segment_plan(segment) for segment in transcript.segments))


def claude_config(transcript: Transcript) -> RuntimeConfig:
    return RuntimeConfig(
        command=["claude"],
        env={},
        cwd="/tmp/t3orch-fixture/work",
        model=_flag(transcript.header.argv, "--model"),
    )


def make_replay_adapter() -> ClaudeAdapter:
    return ClaudeAdapter(runtime_class=ReplayClaudeRuntime)


register_replay_provider(
    "claude",
    ReplayProvider(make_adapter=make_replay_adapter, plan=claude_plan, config=claude_config),
)
