"""The Codex :class:`~adapters.protocol.ProviderRuntime`: one ``codex app-server`` process.

It hosts one *current* native thread (started, resumed or forked into); turns
run on it. Its reader (:meth:`CodexRuntime.run`, as Claude's in its runtime)
reads stdout a pipe read at a time (``transport.line_reads``), decodes the read,
and translates each frame with :class:`CodexMapper`, one ``match`` over the
frame structs; a read's events are queued before the reader next yields, so
canonical events leave in exactly the order the frames came and reach a waiting
consumer without waiting for later frames.

Reattached to a held process (``config.reattaching``), the reader starts with the
journal's replay, which rebuilds the mapper and the client's pending calls; what a
caller does waits for it (:class:`~adapters.replay_watch.ReplayWatch`, as Claude's).
"""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import trio

from adapters.codex.client import CodexClient
from adapters.codex.frames import (
    Delta,
    Frame,
    ItemCompletedFrame,
    ItemStartedFrame,
    Malformed,
    Notification,
    Response,
    ServerRequest,
    decode_frames,
)
from adapters.codex.frames import decode_params as _decode
from adapters.codex.mapper import CODEX_CAPABILITIES, CodexMapper, resume_failure_reason
from adapters.codex.server_requests import METHOD_NOT_FOUND, AnswerRefused, answer_result, refusal
from adapters.errors import AdapterError, ProviderProtocolError, ResumeError, StaleRequest
from adapters.protocol import RawFrameSink, RequestAnswer, ResumeRefs, RuntimeConfig
from adapters.replay_watch import HeldReplay, ReplayWatch
from adapters.transport import (
    DEFAULT_MAX_LINE_BYTES,
    ExitStatus,
    OversizedLine,
    ProviderProcess,
    line_reads,
)
from t3orch.domain.provider import ProviderCapabilities
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import Diagnostic, ProviderEvent, RuntimeExited


@attrs.frozen
class CodexOptions:
    """Codex-specific knobs; defaults follow the runtime mode of :class:`RuntimeConfig`."""

    client_name: str = "t3orch"
    client_title: str = "t3orch"
    client_version: str = "0.1.0"
    #: Overrides of what ``runtime_mode`` implies (``approvalPolicy`` / ``sandbox``).
    approval_policy: str | None = None
    sandbox: str | None = None
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    #: How long :meth:`CodexRuntime.close` waits for the exit after closing stdin.
    close_timeout_s: float = 5.0
    #: How long a process that closed its stdout may take to exit before it is killed.
    eof_exit_grace_s: float = 2.0

    def policy(self, config: RuntimeConfig) -> tuple[str, str]:
        if config.runtime_mode == "full-access":
            approval, sandbox = "never", "danger-full-access"
        else:
            approval, sandbox = "on-request", "workspace-write"
        return self.approval_policy or approval, self.sandbox or sandbox


class CodexRuntime:
    def __init__(
        self,
        process: ProviderProcess,
        config: RuntimeConfig,
        events: EventQueue,
        raw: RawFrameSink,
        options: CodexOptions | None = None,
    ) -> None:
        self._process = process
        self._config = config
        self._events = events
        self._put = events.put
        self._put_all = events.put_all
        self._record = raw.record
        self._options = options or CodexOptions()
        self.mapper = CodexMapper(model=config.model)
        self._delta = self.mapper.delta
        self.client = CodexClient(process, raw, request_timeout_s=config.request_timeout_s)
        held = process if config.reattaching and isinstance(process, HeldReplay) else None
        self._replay = ReplayWatch(held)
        if held is not None:
            # The calls an earlier daemon made, in journal order with the frames.
            held.on_input = self._replayed_input
        self._thread: str | None = None
        self._turn: str | None = None
        self.exit_status: ExitStatus | None = None
        self.exited = trio.Event()
        self._exit_reported = False

    # --- ProviderRuntime -------------------------------------------------------

    @property
    def capabilities(self) -> ProviderCapabilities:
        return CODEX_CAPABILITIES

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def native_thread_ref(self) -> str | None:
        return self._thread

    @property
    def active_turn_ref(self) -> str | None:
        """The turn started by :meth:`start_turn` while Codex has not completed it."""
        if self._turn is None or self.mapper.turn_finished(self._turn):
            return None
        return self._turn

    async def initialize(self) -> None:
        """``initialize`` then ``initialized``: once per process, before anything else."""
        client_info = {
            "name": self._options.client_name,
            "title": self._options.client_title,
            "version": self._options.client_version,
        }
        await self.client.request("initialize", {"clientInfo": client_info})
        await self.client.notify("initialized")

    async def open_thread(self, resume: ResumeRefs | None) -> str:
        approval, sandbox = self._options.policy(self._config)
        if resume is None:
            params: dict[str, Any] = {
                "cwd": self._config.cwd,
                "approvalPolicy": approval,
                "sandbox": sandbox,
            }
            if self._config.model:
                params["model"] = self._config.model
            result = await self.client.request("thread/start", params)
        else:
            ref = resume.native_thread_ref
            params = {
                "threadId": ref,
                # Without it 0.169.0 returns every turn plus a deprecationNotice.
                "excludeTurns": True,
                "approvalPolicy": approval,
                "sandbox": sandbox,
            }
            if self._config.model:
                # A model chosen since the thread started applies to the resumed one
                # (t3orch resumes across a model change: docs/decisions-lineage.md).
                params["model"] = self._config.model
            try:
                result = await self.client.request("thread/resume", params)
            except ProviderProtocolError as exc:
                raise ResumeError(ref, resume_failure_reason(exc.message), exc.message) from exc
        self._thread = _thread_id(result, "thread/start" if resume is None else "thread/resume")
        self._turn = None
        return self._thread

    def adopt(self, native_thread_ref: str | None, native_turn_ref: str | None) -> None:
        self._thread = native_thread_ref
        self._turn = native_turn_ref

    async def start_turn(self, text: str) -> None:
        await self._caught_up()
        thread = self._require_thread("turn/start")
        params = {"threadId": thread, "input": [{"type": "text", "text": text}]}
        result = await self.client.request("turn/start", params)
        turn = result.get("turn") if isinstance(result, dict) else None
        turn_id = turn.get("id") if isinstance(turn, dict) else None
        self._turn = turn_id if isinstance(turn_id, str) else None

    async def steer_turn(self, text: str) -> None:
        await self._caught_up()
        thread = self._require_thread("turn/steer")
        turn = self.active_turn_ref
        if turn is None:
            raise AdapterError("codex: turn/steer: no turn is running")
        params = {
            "threadId": thread,
            "expectedTurnId": turn,
            "input": [{"type": "text", "text": text}],
        }
        await self.client.request("turn/steer", params)

    async def interrupt_turn(self) -> None:
        """Ask Codex to stop; its reply only acknowledges, ``turn/completed`` ends the turn."""
        await self._caught_up()
        thread = self._require_thread("turn/interrupt")
        turn = self.active_turn_ref
        if turn is None:
            return  # nothing running: already as stopped as it gets
        await self.client.request("turn/interrupt", {"threadId": thread, "turnId": turn})

    async def respond(self, native_request_ref: str, answer: RequestAnswer) -> None:
        await self._caught_up()
        request = self.mapper.open_request(native_request_ref)
        if request is None or self.client.gone:
            raise StaleRequest(f"codex: request {native_request_ref} is not waiting for an answer")
        # Marked before the first await: a concurrent second answer is stale.
        self.mapper.answered(native_request_ref, answer.decision)
        try:
            result = answer_result(request.method, request.params, answer)
        except AnswerRefused as refused:
            await self.client.reply_error(request.request_id, refused.code, refused.message)
            return
        await self.client.reply(request.request_id, result)

    async def fork_thread(self, resume: ResumeRefs) -> str:
        """``thread/fork``; the fork becomes this runtime's current thread.

        Codex loads the fork in this process (another process resuming it would
        meet "already has an active writer"), so turns on it run here.
        ``native_conversation_head_ref``, when set, is the last turn to keep.
        """
        approval, sandbox = self._options.policy(self._config)
        params: dict[str, Any] = {
            "threadId": resume.native_thread_ref,
            "excludeTurns": True,
            # The fork runs in this runtime's cwd (a `fork --worktree` has its own);
            # without it the fork keeps the source thread's.
            "cwd": self._config.cwd,
            "approvalPolicy": approval,
            "sandbox": sandbox,
        }
        if resume.native_conversation_head_ref:
            params["lastTurnId"] = resume.native_conversation_head_ref
        result = await self.client.request("thread/fork", params)
        self._thread = _thread_id(result, "thread/fork")
        self._turn = None
        return self._thread

    async def read_thread(
        self, native_thread_ref: str | None = None, *, include_turns: bool = False
    ) -> dict[str, Any]:
        """``thread/read``: the thread's metadata (and turns, when asked)."""
        thread = native_thread_ref or self._require_thread("thread/read")
        result = await self.client.request(
            "thread/read", {"threadId": thread, "includeTurns": include_turns}
        )
        return result if isinstance(result, dict) else {}

    async def revert_thread(
        self, before_turn_ref: str, native_thread_ref: str | None = None
    ) -> dict[str, Any]:
        """``thread/revert`` (0.169.0's rollback): drop ``before_turn_ref`` and later turns.

        Only the conversation history changes; files on disk are not reverted.
        """
        thread = native_thread_ref or self._require_thread("thread/revert")
        result = await self.client.request(
            "thread/revert", {"threadId": thread, "beforeTurnId": before_turn_ref}
        )
        return result if isinstance(result, dict) else {}

    async def close(self) -> None:
        """Graceful stop: close stdin and wait (bounded) for the process to exit."""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self._process.close_stdin()
        with trio.move_on_after(self._options.close_timeout_s):
            await self.exited.wait()

    # --- reader side -----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read and translate frames until stdout ends, then report the exit."""
        task_status.started()
        read = self._replay.reads(line_reads(self._process))
        try:
            while lines := await read():
                await self._on_read(lines, decode_frames(lines))
        finally:
            self.client.closed()
        status: ExitStatus | None = None
        with trio.move_on_after(self._options.eof_exit_grace_s):
            status = await self._process.wait()
        if status is None:
            # Stdout is the only way Codex talks to us: a process that closed it but
            # lives on is a dead runtime that would hold its turn forever. Kill it.
            grace = self._options.eof_exit_grace_s
            self._put(
                Diagnostic(
                    level="error",
                    code="stdout_closed",
                    message=f"codex closed its stdout but was still running {grace:g} s later; "
                    "killed",
                )
            )
            await self._process.kill()
            status = await self._process.wait()
        await self.report_exit(status)

    async def report_exit(self, status: ExitStatus) -> None:
        """Emit :class:`RuntimeExited` once (also used by the adapter's forced teardown)."""
        if self._exit_reported:
            return
        self._exit_reported = True
        self.exit_status = status
        # Nothing is read after the exit: no reason to wait for room.
        self._put(
            RuntimeExited(
                code=status.code, signal=status.signal, stderr_tail=self._process.stderr_tail()
            )
        )
        self.exited.set()
        await trio.lowlevel.checkpoint()

    async def _on_read(self, lines: list[bytes | OversizedLine], frames: list[Frame]) -> None:
        """Record, translate and queue one read's frames, in order.

        No await per frame: a frame's events are appended to a local list and the
        whole read's go to the queue at once, before the reader yields (the
        consumer, woken by the first of them, runs only then anyway). The awaits
        left are the answer to a request we refuse (the events before it are
        queued first, as the diagnostic after it) and, once per read, room in a
        full queue: a slow consumer stops the reader within one read of the bound.
        """
        record = self._record
        delta = self._delta
        mapper = self.mapper
        events: list[ProviderEvent] = []
        add = events.append
        try:
            for line, frame in zip(lines, frames, strict=True):
                if type(line) is bytes:
                    raw_id = record("incoming", line)
                else:
                    assert isinstance(line, OversizedLine)
                    raw_id = record("incoming", line.head)
                # Cases are tried in order: the streamed deltas (most frames) first.
                match frame:
                    case Delta(params=params):
                        add(delta(params.item_id, params.delta, raw_id))
                    case Notification(method=method, params=params):
                        events += mapper.notification(method, params, raw_id)
                    case ItemStartedFrame(params=item):
                        events += mapper.item_started(item, raw_id)
                    case ItemCompletedFrame(params=item):
                        events += mapper.item_completed(item, raw_id)
                    case Response():
                        self._on_response(frame, raw_id, events)
                    case ServerRequest(id=request_id, method=method, params=params):
                        opened = mapper.server_request(request_id, method, params, raw_id)
                        refused = refusal(method)
                        if refused is not None:
                            # Answered before the next line is read: Codex holds the
                            # turn until it hears back.
                            self._put_all(events)
                            events.clear()
                            await self.client.reply_error(request_id, *refused)
                        events += opened
                    case Malformed(code=code, reason=reason, head=head, length=length):
                        events += mapper.bad_line(code, reason, head, length, raw_id)
        finally:
            full = self._put_all(events)
        if full:
            await self._events.room()

    def _on_response(self, frame: Response, raw_id: str, events: list[ProviderEvent]) -> None:
        call = self.client.answered(frame)
        if call is None:
            events += self.mapper.unexpected_response(frame.id, raw_id)
            return
        result = _decode(frame.result) if frame.result is not None else None
        events += self.mapper.response(call.method, call.params, result, frame.error, raw_id)
        # Its waiter runs once the reader yields: after these events are queued.
        self.client.settle(call, frame)

    async def _caught_up(self) -> None:
        """Once a reattach's replay has rebuilt the mapper and the pending calls (bounded
        by the request timeout): an answer to a request it has not reached was stale."""
        await self._replay.wait(self._config.request_timeout_s)

    def _replayed_input(self, offset: int, line: bytes) -> None:
        self.client.replayed(offset, line)
        self._replay.moved()

    def _require_thread(self, method: str) -> str:
        if self._thread is None:
            raise AdapterError(f"codex: {method}: no thread is open (call open_thread first)")
        return self._thread


def _thread_id(result: Any, method: str) -> str:
    thread = result.get("thread") if isinstance(result, dict) else None
    ref = thread.get("id") if isinstance(thread, dict) else None
    if not isinstance(ref, str):
        raise ProviderProtocolError(method, None, f"reply without thread.id: {result!r}")
    return ref


__all__ = ["METHOD_NOT_FOUND", "CodexOptions", "CodexRuntime"]
