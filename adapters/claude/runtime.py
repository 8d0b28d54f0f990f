"""The Claude :class:`~adapters.protocol.ProviderRuntime`: one CLI process per thread.

The process is spawned by :meth:`ClaudeRuntime.open_thread` (its command line
depends on whether we resume), or, kept by a holder across a daemon restart,
attached to by :meth:`ClaudeRuntime.reattach` and rebuilt from its journal by
:meth:`ClaudeRuntime.adopt`'s replay; it is read by one reader task (``_read``: a pipe
read at a time, as Codex's reader in its runtime). Every frame goes through one
``match`` here and the :class:`~adapters.claude.mapper.ClaudeMapper` the moment it is read,
and the events it returns are put on the caller's
:class:`~t3orch.ingest.queue.EventQueue` at once (no await in between), so
canonical events come out in exactly the order things happened, whichever task
caused them. The reader stops reading while the queue is full, which keeps a
slow consumer from letting memory grow without bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import msgspec
import trio

from adapters.claude.control import (
    ControlChannel,
    HookCall,
    IncomingRequest,
    McpCall,
    allow,
    deny,
    mcp_response,
)
from adapters.claude.frames import (
    ControlCancelFrame,
    ControlRequestFrame,
    ControlResponseFrame,
    ResultFrame,
    decode_line,
    unanswerable_request_id,
)
from adapters.claude.mapper import CLAUDE_CAPABILITIES, ClaudeMapper
from adapters.claude.options import ClaudeOptions, build_argv
from adapters.claude.tools import auto_allowed
from adapters.errors import (
    AdapterError,
    NotSupported,
    ProviderGone,
    ResumeError,
    StaleRequest,
)
from adapters.protocol import RawFrameSink, RequestAnswer, ResumeRefs, RuntimeConfig
from adapters.replay_watch import HeldReplay, ReplayWatch
from adapters.transport import (
    LEFT_RUNNING,
    ExitStatus,
    LaunchSpec,
    OversizedLine,
    ProcessLauncher,
    ProviderProcess,
    line_reads,
)
from t3orch.domain.provider import ProviderCapabilities
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import Diagnostic, ProviderEvent, ResumeFailed


class _Written(msgspec.Struct):
    """A line the daemon wrote to the CLI, as far as a reattach's replay needs it."""

    type: str
    request_id: str | None = None
    request: dict[str, Any] | None = None
    response: dict[str, Any] | None = None


#: How long leaving the runtime waits for the process to be reaped.
TEARDOWN_TIMEOUT_S = 5.0
_NOT_FOUND = "No conversation found"


@attrs.define(eq=False)
class _Session:
    """One CLI process and everything scoped to it."""

    process: ProviderProcess
    control: ControlChannel
    mapper: ClaudeMapper
    #: The native thread ref we resume (None for a new session).
    resuming: str | None
    initialized: bool = False
    #: The error text of a result that came before any turn (a failed start).
    startup_error: str | None = None
    resume_failure: ResumeError | None = None
    #: Stopped by the runtime itself to start the next session's process.
    replaced: bool = False
    #: A reattach's replay (over at once without one): requests the runtime answers by
    #: itself wait in ``held_back`` until it is over, since the journal may hold an
    #: earlier answer; what a caller does waits for it too (``_caught_up``).
    replay: ReplayWatch = attrs.field(factory=lambda: ReplayWatch(None))
    held_back: list[IncomingRequest] = attrs.field(factory=list)
    exited: trio.Event = attrs.field(factory=trio.Event)

    @property
    def ends_the_runtime(self) -> bool:
        """Whether this process's exit is the runtime's.

        Not for a process the runtime replaced, nor for one whose resume failed: the
        CLI exits when it cannot resume, yet the runtime lives on (the caller opens a
        new thread on it, as the ResumeError contract says). Reporting that exit as
        RuntimeExited ended the supervisor's runtime under the fallback session.
        """
        return not self.replaced and self.resume_failure is None


class ClaudeRuntime:
    """Implements :class:`~adapters.protocol.ProviderRuntime` for the ``claude`` CLI."""

    def __init__(
        self,
        config: RuntimeConfig,
        launcher: ProcessLauncher,
        events: EventQueue,
        raw: RawFrameSink,
        options: ClaudeOptions,
        nursery: trio.Nursery,
    ) -> None:
        self._config = config
        self._launcher = launcher
        self._events = events
        self._raw = raw
        self._options = options
        self._nursery = nursery
        self._session: _Session | None = None
        self._sessions: list[_Session] = []
        #: The exit of a last process that did not end the runtime (a failed resume),
        #: reported as the runtime's own when nothing replaces it.
        self._held_exit: list[ProviderEvent] | None = None

    # -- ProviderRuntime ---------------------------------------------------------

    @property
    def capabilities(self) -> ProviderCapabilities:
        return CLAUDE_CAPABILITIES

    @property
    def pid(self) -> int | None:
        return self._session.process.pid if self._session is not None else None

    async def open_thread(self, resume: ResumeRefs | None, *, session_id: str | None = None) -> str:
        """Spawn the CLI for a new session, or resuming ``resume``; send ``initialize``.

        A new session gets the id ``session_id`` (default: a fresh UUID from the
        options' factory) through ``--session-id``, so the ref is known before
        the first turn. Raises :class:`ResumeError` (after queueing ResumeFailed)
        when the CLI cannot resume.
        """
        if resume is None:
            new_id = session_id or self._options.session_id_factory()
            argv = build_argv(self._config, self._options, session_id=new_id)
            await self._start(argv, self._mapper(native_thread_ref=new_id), None)
            return new_id
        ref = resume.native_thread_ref
        argv = build_argv(
            self._config,
            self._options,
            resume=ref,
            resume_at=resume.native_conversation_head_ref,
        )
        mapper = self._mapper(native_thread_ref=ref, head=resume.native_conversation_head_ref)
        await self._start(argv, mapper, ref)
        return ref

    async def reattach(self) -> None:
        """The CLI already runs, kept by a holder across a daemon restart: attach to it
        (the launcher's one launch; its spec is not used). Nothing is sent to set it up,
        nothing is read until :meth:`adopt`."""
        spec = LaunchSpec(
            argv=list(self._config.command), env=self._config.env, cwd=self._config.cwd
        )
        process = await self._launcher.launch(spec)
        session = self._new_session(process, self._mapper(native_thread_ref=None), None)
        session.initialized = True  # by the daemon that started it
        if isinstance(process, HeldReplay):
            session.replay = ReplayWatch(process)
            session.replay.on_handed_out = lambda: self._release_held_back(session)
            process.on_input = lambda _offset, line: self._replayed_input(session, line)

    def adopt(self, native_thread_ref: str | None, native_turn_ref: str | None) -> None:
        """Reattached: the CLI hosts session ``native_thread_ref`` (Claude's turns have no
        native ref). The reader starts with the journal's replay, which rebuilds the
        mapper (turn, items, open requests, head) and the control channel's requests
        from both directions, as when they happened."""
        session = self._session
        if session is None or not session.initialized or self._sessions != [session]:
            raise AdapterError("claude: adopt: no held process attached (open it reattaching)")
        session.mapper = self._mapper(native_thread_ref=native_thread_ref)
        self._nursery.start_soon(self._read, session)

    async def fork_thread(self, resume: ResumeRefs, *, session_id: str | None = None) -> str:
        """A new process resuming ``resume`` under a new session id (``--fork-session``).

        The runtime hosts one process: the fork replaces the current one (closed
        gracefully first).
        """
        new_id = session_id or self._options.session_id_factory()
        argv = build_argv(
            self._config,
            self._options,
            session_id=new_id,
            resume=resume.native_thread_ref,
            resume_at=resume.native_conversation_head_ref,
            fork=True,
        )
        mapper = self._mapper(native_thread_ref=new_id, forked_from=resume.native_thread_ref)
        await self._start(argv, mapper, resume.native_thread_ref)
        return new_id

    async def start_turn(self, text: str) -> None:
        session = await self._caught_up()
        if session.mapper.turn_active:
            raise NotSupported("claude: a turn is already running; Claude cannot steer it")
        # TurnStarted goes out before the frame: the CLI's answer cannot overtake it.
        self._push(session.mapper.user_sent())
        frame = {
            "type": "user",
            "session_id": "",
            "parent_tool_use_id": None,
            "message": {"role": "user", "content": text},
        }
        await self._send(session, frame)

    async def steer_turn(self, text: str) -> None:
        raise NotSupported("claude: no native way to add input to a running turn")

    async def interrupt_turn(self) -> None:
        session = await self._caught_up()
        if not session.mapper.turn_active:
            return
        self._push(session.mapper.interrupt_sent())
        await session.control.request("interrupt")

    async def respond(self, native_request_ref: str, answer: RequestAnswer) -> None:
        session = await self._caught_up()
        request = session.control.incoming(native_request_ref)
        if request is None or request.body.subtype != "can_use_tool":
            raise StaleRequest(f"claude: request {native_request_ref} is not waiting")
        if answer.decision == "cancel":
            # A deny with interrupt ends the turn: its error result is an interrupt.
            self._push(session.mapper.interrupt_sent())
        await session.control.answer(native_request_ref, _permission_answer(request, answer))
        self._push(session.mapper.request_answered(native_request_ref, answer.decision))

    async def close(self) -> None:
        """Close stdin and wait for the exit; kill if it takes longer than the bound."""
        session = self._session
        if session is None:
            return
        await self._stop(session, graceful=True)
        self._report_held_exit()

    # -- beyond the protocol ------------------------------------------------------

    async def set_permission_mode(self, mode: str) -> None:
        await self._live().control.request("set_permission_mode", {"mode": mode})

    async def set_model(self, model: str | None) -> None:
        await self._live().control.request("set_model", {"model": model})

    @property
    def native_conversation_head_ref(self) -> str | None:
        return self._session.mapper.head if self._session is not None else None

    # -- process lifetime ---------------------------------------------------------

    def _mapper(
        self,
        *,
        native_thread_ref: str | None,
        forked_from: str | None = None,
        head: str | None = None,
    ) -> ClaudeMapper:
        return ClaudeMapper(
            native_thread_ref=native_thread_ref,
            forked_from=forked_from,
            head=head,
            full_access=self._full_access,
        )

    @property
    def _full_access(self) -> bool:
        return self._config.runtime_mode == "full-access"

    async def _start(self, argv: list[str], mapper: ClaudeMapper, resuming: str | None) -> None:
        if self._session is not None:
            self._session.replaced = True
            await self._stop(self._session, graceful=True)
        self._held_exit = None
        spec = LaunchSpec(argv=argv, env=self._config.env, cwd=self._config.cwd)
        process = await self._launcher.launch(spec)
        session = self._new_session(process, mapper, resuming)
        await self._nursery.start(self._read, session)
        hooks = (
            {k: [dict(m) for m in v] for k, v in self._options.hooks.items()}
            if self._options.hooks
            else None
        )
        try:
            await session.control.request("initialize", {"hooks": hooks})
        except ProviderGone:
            if session.resuming is None:
                raise
            # A resume that fails ends the process before `initialize` is
            # answered; the reader has classified it by the time it has exited.
            with trio.move_on_after(self._config.request_timeout_s):
                await session.exited.wait()
            raise session.resume_failure or ResumeError(
                session.resuming, "error", "claude exited before initialize was answered"
            ) from None
        session.initialized = True

    def _new_session(
        self, process: ProviderProcess, mapper: ClaudeMapper, resuming: str | None
    ) -> _Session:
        session = _Session(
            process=process,
            control=ControlChannel(
                lambda frame: self._send(session, frame), timeout_s=self._config.request_timeout_s
            ),
            mapper=mapper,
            resuming=resuming,
        )
        self._session = session
        self._sessions.append(session)
        return session

    async def _stop(self, session: _Session, *, graceful: bool) -> None:
        if graceful and not session.exited.is_set():
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await session.process.close_stdin()
            with trio.move_on_after(self._options.close_timeout_s):
                await session.exited.wait()
        if not session.exited.is_set():
            await session.process.kill()
            with trio.move_on_after(TEARDOWN_TIMEOUT_S):
                await session.exited.wait()

    async def shutdown(self) -> None:
        """Kill every process; wait (bounded) until its reader has queued the exit (shielded).

        A process left running for the next daemon (``LEFT_RUNNING``: a held CLI the
        daemon leaves to its holder) is not killed and never exits here: its output
        does not end, so waiting for its reader held every daemon restart the whole
        bound (5 s) per Claude runtime.
        """
        for session in self._sessions:
            if not session.exited.is_set():
                await session.process.kill()
        with trio.move_on_after(TEARDOWN_TIMEOUT_S):
            for session in self._sessions:
                await _exited_or_left(session)
        self._report_held_exit()

    async def _caught_up(self) -> _Session:
        """The live session, once a reattach's replay has rebuilt its state (bounded: a
        replay whose end is not seen yet does not hold a caller past the request bound)."""
        session = self._live()
        if not session.replay.over:
            await session.replay.wait(self._config.request_timeout_s)
            session = self._live()
        return session

    def _live(self) -> _Session:
        session = self._session
        if session is None:
            raise AdapterError("claude: no thread open (call open_thread first)")
        if session.exited.is_set():
            raise ProviderGone("claude: the process has exited")
        return session

    async def _send(self, session: _Session, frame: Mapping[str, Any]) -> None:
        line = msgspec.json.encode(frame)
        self._raw.record("outgoing", line)
        try:
            await session.process.send_line(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ProviderGone("claude: the process has exited (stdin closed)") from exc

    # -- events -------------------------------------------------------------------

    def _push(self, events: list[ProviderEvent]) -> None:
        # Never waits, whichever task pushes (an answer must not block on a slow
        # consumer); a full queue makes the reader wait instead, before its next line.
        self._events.put_all(events)

    # -- the reader ---------------------------------------------------------------

    async def _read(
        self, session: _Session, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The reader: a pipe read of stdout at a time (as Codex's, ``transport.line_reads``),
        each line translated and its events queued before the next is looked at."""
        task_status.started()
        read = session.replay.reads(line_reads(session.process))
        try:
            while True:
                await self._events.room()
                lines = await read()
                if not lines:
                    break
                for line in lines:
                    self._on_line(session, line)
                self._release_held_back(session)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # stdout went away with the process
        finally:
            with trio.CancelScope(shield=True):
                await self._on_exit(session)

    def _on_line(self, session: _Session, line: bytes | OversizedLine) -> None:
        # Synchronous from the raw record to the queued events: nothing can
        # interleave, so event order is frame order.
        recorded = line.head if isinstance(line, OversizedLine) else line
        raw_id = self._raw.record("incoming", recorded)
        decoded = decode_line(line)
        match decoded:
            case None:
                return
            case ControlResponseFrame(response=response):
                if not session.control.on_response(decoded):
                    self._push([_diag("claude.unmatched_response", response.request_id, raw_id)])
                return
            case ControlRequestFrame(request_id=request_id, request=body):
                events = session.mapper.frame(decoded, raw_id)
                # Registered before RequestOpened is queued: a consumer that answers
                # the moment it sees the event finds the request waiting.
                self._dispatch(session, session.control.open_incoming(request_id, body))
                self._push(events)
                return
            case Diagnostic():
                refused = unanswerable_request_id(decoded)
                if refused is not None:
                    self._nursery.start_soon(
                        self._refuse,
                        session,
                        refused,
                        f"Invalid control request: {decoded.message}",
                    )
            case ResultFrame() if not session.mapper.turn_active:
                self._note_startup_error(session, decoded)
            case ControlCancelFrame(request_id=request_id):
                session.control.cancel_incoming(request_id)
        self._push(session.mapper.frame(decoded, raw_id))

    def _note_startup_error(self, session: _Session, frame: ResultFrame) -> None:
        if not frame.is_error:
            return
        message = "; ".join(frame.errors or []) or frame.result or frame.subtype
        session.startup_error = message
        if session.resuming is not None and _NOT_FOUND in message:
            self._resume_failed(session, "not_found", message)

    def _resume_failed(self, session: _Session, reason: str, message: str) -> None:
        if session.resume_failure is not None or session.resuming is None:
            return
        session.resume_failure = ResumeError(session.resuming, reason, message)
        self._push(
            [
                ResumeFailed(
                    native_thread_ref=session.resuming,
                    reason="not_found" if reason == "not_found" else "error",
                    message=message,
                )
            ]
        )

    async def _on_exit(self, session: _Session) -> None:
        status: ExitStatus | None = None
        with trio.move_on_after(TEARDOWN_TIMEOUT_S):
            status = await session.process.wait()
        if status is None:  # stdout ended but the process lives on: end it
            await session.process.kill()
            with trio.move_on_after(TEARDOWN_TIMEOUT_S):
                status = await session.process.wait()
        if status is None:
            status = ExitStatus(code=None, signal=None)
        stderr = session.process.stderr_tail()
        session.control.fail_all(ProviderGone(f"claude {status.describe()}"))
        if session.resuming is not None and not session.initialized:
            # Died before `initialize` was answered: the resume did not happen.
            if _NOT_FOUND in stderr:
                self._resume_failed(session, "not_found", _last_line(stderr, _NOT_FOUND))
            else:
                message = session.startup_error or f"claude {status.describe()}: {stderr[-500:]}"
                self._resume_failed(session, "error", message)
        if session.ends_the_runtime:
            self._push(session.mapper.exited(status, stderr))
        else:
            message = f"claude {status.describe()}" + (f": {stderr[-500:]}" if stderr else "")
            self._push([_info("claude.session_process_exited", message)])
            if session is self._session:
                # Said when the runtime ends with no process after it (close, shutdown).
                self._held_exit = session.mapper.exited(status, stderr)
        session.exited.set()

    def _report_held_exit(self) -> None:
        held, self._held_exit = self._held_exit, None
        if held is not None:
            self._push(held)

    # -- a reattach's replay -------------------------------------------------------------

    def _replayed_input(self, session: _Session, line: bytes) -> None:
        """A line an earlier daemon wrote to this CLI, in journal order with what it read:
        the bookkeeping it did when it sent it, done again (the events go where the
        replay's go: muted while the log has them)."""
        try:
            written = msgspec.json.decode(line, type=_Written)
        except msgspec.DecodeError:
            return
        mapper, control = session.mapper, session.control
        match written:
            case _Written(type="user"):
                self._push(mapper.user_sent())
            case _Written(type="control_request", request_id=str(request_id), request=request):
                subtype = str((request or {}).get("subtype"))
                if subtype == "interrupt":
                    self._push(mapper.interrupt_sent())
                control.replayed_request(request_id, subtype)
            case _Written(type="control_response", response=dict(response)):
                request_id = str(response.get("request_id"))
                control.replayed_answer(request_id)
                if mapper.awaits_answer(request_id):
                    decision = _replayed_decision(response)
                    if decision == "cancel":
                        self._push(mapper.interrupt_sent())
                    self._push(mapper.request_answered(request_id, decision))
        session.replay.moved()
        if not session.replay.handed_out:
            self._nursery.start_soon(self._release_after_input, session)

    def _release_held_back(self, session: _Session) -> None:
        """Once the replay is over, answer the requests it held back that the journal
        did not show answered (the earlier daemon died before it did)."""
        if not session.replay.handed_out or not session.held_back:
            return
        held_back, session.held_back = session.held_back, []
        for request in held_back:
            if session.control.incoming(request.request_id) is request:
                self._dispatch(session, request)

    async def _release_after_input(self, session: _Session) -> None:
        # Run once the reader has taken the input (a replay may end on one).
        await trio.lowlevel.checkpoint()
        self._release_held_back(session)

    # -- requests the CLI sends -------------------------------------------------------

    def _dispatch(self, session: _Session, request: IncomingRequest) -> None:
        if not session.replay.handed_out:
            session.held_back.append(request)
            return
        subtype = request.body.subtype
        if subtype == "hook_callback":
            self._nursery.start_soon(self._answer_hook, session, request)
        elif subtype == "mcp_message":
            self._nursery.start_soon(self._answer_mcp, session, request)
        elif subtype == "can_use_tool":
            body = request.body
            if auto_allowed(self._full_access, body.tool_name or ""):
                payload = allow(body.input if isinstance(body.input, dict) else {})
                self._nursery.start_soon(self._answer, session, request, payload)
        else:
            self._nursery.start_soon(
                self._answer_error, session, request, f"Unsupported control request: {subtype}"
            )
        # other can_use_tool requests wait for respond()

    async def _answer(
        self, session: _Session, request: IncomingRequest, payload: dict[str, Any]
    ) -> None:
        with contextlib.suppress(StaleRequest, ProviderGone):
            await session.control.answer(request.request_id, payload)

    async def _answer_hook(self, session: _Session, request: IncomingRequest) -> None:
        body = request.body
        call = HookCall(
            request_id=request.request_id,
            callback_id=body.callback_id or "",
            tool_use_id=body.tool_use_id,
            input=body.input if isinstance(body.input, dict) else {},
        )
        await self._run_handler(
            session, request, lambda: self._options.hook_handler(call), lambda out: dict(out)
        )

    async def _answer_mcp(self, session: _Session, request: IncomingRequest) -> None:
        body = request.body
        call = McpCall(
            request_id=request.request_id,
            server_name=body.server_name or "",
            message=body.message or {},
        )
        await self._run_handler(
            session, request, lambda: self._options.mcp_handler(call), mcp_response
        )

    async def _run_handler(
        self,
        session: _Session,
        request: IncomingRequest,
        handler: Callable[[], Any],
        wrap: Callable[[Any], dict[str, Any]],
    ) -> None:
        try:
            output = await handler()
        except Exception as exc:  # a handler bug must not take the runtime down
            self._push([_diag("claude.handler_failed", f"{request.body.subtype}: {exc!r}", None)])
            await self._answer_error(session, request, f"handler failed: {exc}")
            return
        # Withdrawn by the CLI, or the process is gone: nobody to answer.
        with contextlib.suppress(StaleRequest, ProviderGone):
            await session.control.answer(request.request_id, wrap(output))

    async def _refuse(self, session: _Session, request_id: str | int, message: str) -> None:
        with contextlib.suppress(ProviderGone):
            await session.control.refuse(request_id, message)

    async def _answer_error(
        self, session: _Session, request: IncomingRequest, message: str
    ) -> None:
        with contextlib.suppress(StaleRequest, ProviderGone):
            await session.control.answer_error(request.request_id, message)


def _permission_answer(request: IncomingRequest, answer: RequestAnswer) -> dict[str, Any]:
    body = request.body
    tool_input = body.input if isinstance(body.input, dict) else {}
    if answer.decision == "accept":
        if answer.answers is not None:
            # AskUserQuestion: the answers ride on the input, keyed by question text.
            return allow({**tool_input, "answers": dict(answer.answers)})
        return allow(tool_input)
    if answer.decision == "acceptForSession":
        return allow(tool_input, body.permission_suggestions)
    if answer.decision == "cancel":
        return deny(answer.message or "The user cancelled this tool call.", interrupt=True)
    return deny(answer.message or "The user declined this tool call.")


def _replayed_decision(response: Mapping[str, Any]) -> str:
    """The decision a journaled answer to a permission request was (the inverse of
    :func:`_permission_answer`)."""
    answer = response.get("response")
    if response.get("subtype") != "success" or not isinstance(answer, dict):
        return "decline"
    if answer.get("behavior") == "allow":
        return "acceptForSession" if answer.get("updatedPermissions") else "accept"
    return "cancel" if answer.get("interrupt") else "decline"


def _diag(code: str, message: str, raw_id: str | None) -> Diagnostic:
    return Diagnostic(level="warning", code=code, message=message, raw_event_id=raw_id)


def _info(code: str, message: str) -> Diagnostic:
    return Diagnostic(level="info", code=code, message=message, raw_event_id=None)


def _last_line(text: str, needle: str) -> str:
    for line in reversed(text.splitlines()):
        if needle in line:
            return line.strip()
    return needle


async def _exited_or_left(session: _Session) -> None:
    """Until the session's reader has queued its exit, or its process says it was left
    running (then no exit comes)."""
    if session.exited.is_set():
        return
    async with trio.open_nursery() as nursery:

        async def exited() -> None:
            await session.exited.wait()
            nursery.cancel_scope.cancel()

        async def left() -> None:
            if await session.process.wait() == LEFT_RUNNING:
                nursery.cancel_scope.cancel()

        nursery.start_soon(exited)
        nursery.start_soon(left)
