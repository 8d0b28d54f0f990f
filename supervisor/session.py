"""``SessionRunner``: one live provider runtime serving one app thread.

It opens a durable ProviderSession, launches the provider through its adapter,
opens the provider thread as the core's plan says (``t3orch.runtime_plan``:
resume its native thread, fork a pending fork's source, or start fresh; when a
resume fails, a replacement seeded with a full-thread summary), then runs turns
on request. The adapter's events go to the core's ingest stream
(``t3orch.ingest.stream``), which commits them, the process's exit included;
this module keeps the process's life: spawn, stall watch, stop ladder, reaping.
Leaving ``run`` always leaves the process reaped (the adapter's teardown is
shielded).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import signal
import stat
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import attrs
import trio

from adapters.codex.multiplex import VirtualProcess
from adapters.diagnostics import RotatingRawLog, redact_text
from adapters.errors import AdapterError, ProviderGone, ProviderTimeout, ResumeError
from adapters.offset_lines import feed_offsets
from adapters.protocol import (
    NullRawSink,
    ProviderAdapter,
    ProviderRuntime,
    RawFrameSink,
    RequestAnswer,
    ResumeRefs,
    RuntimeConfig,
)
from adapters.transport import LaunchSpec, ProviderProcess
from supervisor.holder.client import HeldProcess, holder_ref
from supervisor.launcher import (
    LauncherFactory,
    RecordingLauncher,
    StoppableProcess,
    SupervisedLauncher,
    process_start_time,
)
from supervisor.leftovers import process_clock, stop_turn_leftovers
from supervisor.reattach import Reattach
from supervisor.shared_codex import SharedChild, SharedLauncher
from t3orch import timeline
from t3orch.commands.delivery import SEPARATOR
from t3orch.domain.provider import HolderRef, JournalPosition, ProviderThread
from t3orch.domain.vocab import ProviderKind
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.ingest.queue import EventQueue
from t3orch.ingest.stream import MAX_INGEST_BATCH, IngestStream
from t3orch.ingest.translate import describe_exit
from t3orch.provider_events import (
    Diagnostic,
    ProviderEvent,
    RequestCancelled,
    RequestOpened,
    RuntimeExited,
    TurnCompleted,
)
from t3orch.runtime_plan import ForkThread, ResumeThread, RuntimePlan, StartFresh, next_runtime
from t3orch.service import CoreService
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, ReadModel

log = logging.getLogger(__name__)

RawSinkFactory = Callable[[ProviderKind, str], RawFrameSink]

#: Providers whose runtimes fork a provider thread natively (the stand-in plays a
#: fixed transcript, so its forks are portable).
NATIVE_FORK_PROVIDERS = frozenset({"codex", "claude"})
#: The diagnostic code saying why a stored provider thread was not resumed.
_REPLACED_BECAUSE = {
    "settings_changed": "settings_incompatible",
    "handoff_overflow": "handoff_size_exceeded",
}
#: Bound on the graceful part of a stop (protocol close) before signals.
CLOSE_GRACE_S = 5.0
TERM_GRACE_S = 3.0
#: How long a provider may take to acknowledge an interrupt before the runtime is
#: stopped instead (Codex answers ``turn/interrupt`` at once; a hung one never does).
INTERRUPT_ANSWER_S = 5.0
#: How long a runtime stopped mid-turn waits for the provider to end the turn it
#: was asked to interrupt, before ending it itself and going down the ladder.
STOP_INTERRUPT_S = 3.0
#: A turn whose input could not be written to a provider that is gone waits this
#: long for the exit, whose status and stderr say why better than the write error.
EXIT_REPORT_GRACE_S = 2.0


class SessionFailed(Exception):
    """The runtime could not be started; the message says why."""


def _start_failure(exc: BaseException) -> BaseException | None:
    """The adapter or OS error behind a failed start, even when nurseries wrapped it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, (AdapterError, OSError)) else None


async def _enterable(cwd: str) -> None:
    """Raises the error a spawn in ``cwd`` would meet, before any provider sees it.

    A thread on a shared Codex process opens in its cwd without a spawn of its own, and
    the app-server (0.169.0) opens a thread in a directory that is gone without a word:
    its turns ran there. Every runtime is refused alike instead, naming the cwd.
    """
    mode = (await trio.to_thread.run_sync(os.stat, cwd)).st_mode
    if not stat.S_ISDIR(mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), cwd)


def _why_not_started(
    cause: BaseException, exit_event: RuntimeExited | None, cwd: str | None = None
) -> str:
    """One line on why a runtime did not start, for the run's and the session's lastError.

    A provider that died on its own says more by its exit and stderr than the write
    or read that found it gone; a binary that cannot be run is named, and so is a work
    dir that cannot be entered (the spawn's error names it as if it were the binary).
    """
    summary = None if exit_event is None else describe_exit(exit_event)
    if isinstance(cause, ProviderGone) and summary is not None and summary.error is not None:
        return summary.error
    if isinstance(cause, OSError) and cause.filename is not None:
        why = cause.strerror or str(cause)
        if cwd is not None and os.path.abspath(cause.filename) == os.path.abspath(cwd):
            hint = "t3orch thread set --cwd changes it"
            return f"the thread's cwd {cwd} cannot be entered: {why} ({hint})"
        return f"cannot run {cause.filename}: {why}"
    stderr = summary.stderr if summary is not None else ""
    return str(cause) + (f"; stderr: {stderr}" if stderr else "")


@attrs.define
class _Announced:
    """A session's launcher that tells the session of each process it spawns."""

    inner: SupervisedLauncher
    runner: SessionRunner
    raw: RawFrameSink

    async def launch(self, spec: LaunchSpec) -> ProviderProcess:
        process = await self.inner.launch(spec)
        self.runner._spawned(process, self.raw)
        return process

    @property
    def current(self) -> StoppableProcess | None:
        return self.inner.current


@attrs.define(eq=False)
class SessionRunner:
    core: CoreService
    reader: ReadModel
    thread_id: str
    provider: ProviderKind
    adapter: ProviderAdapter
    config: RuntimeConfig
    raw_factory: RawSinkFactory = lambda kind, session: NullRawSink()
    #: The run whose dispatch opened this runtime (consumes a resume-fallback handoff).
    first_run_id: str | None = None
    #: A runtime a holder kept across a daemon restart, to pick up instead of opening one.
    reattach: Reattach | None = None

    #: How the provider is launched (default: a real child process).
    launcher_factory: LauncherFactory | None = None
    runtime: ProviderRuntime | None = None
    launcher: SupervisedLauncher | None = None
    last_activity: float = -math.inf
    exited: trio.Event = attrs.field(factory=trio.Event)
    exit_event: RuntimeExited | None = None
    #: The turn the exit ended (it was active then), if any.
    exit_turn: TurnBinding | None = None
    #: When the exit was committed (trio time).
    exit_committed_at: float | None = None
    stop_reason: str | None = None
    #: A steering restart waiting for the interrupted turn to end: (attempt, input).
    restart: tuple[TurnBinding, str] | None = None
    #: Recover a run whose provider crashed mid-turn as a new attempt (configurable).
    recover_runs: bool = False
    #: A provider thread whose delta handoffs would pass this many characters is not
    #: resumed: a fresh one gets a full summary (``daemon.max_delta_handoff_chars``).
    delta_handoff_limit: int | None = None
    #: Called at a completed turn's barrier, before its terminal event (checkpoints).
    #: The completion barrier (the checkpoint): thread, run, and a wait for the turn's
    #: events' commit; returns the record that commits with the turn's end.
    on_turn_ending: (
        Callable[[str, str, Callable[[], Awaitable[None]]], Awaitable[Decide | None]] | None
    ) = None
    #: Called once a subagent's end is committed: (thread, run, child native thread ref).
    on_subagent_ended: Callable[[str, str, str | None], Awaitable[None]] | None = None
    #: The ``provider_recovery`` attempt prepared when this runtime crashed mid-turn.
    recovery: TurnBinding | None = None
    #: This runtime started its provider thread's conversation afresh, over one that was
    #: never confirmed (:meth:`_start_afresh`): a recovered attempt is told the history.
    started_afresh: bool = False
    #: No frame for this long during a turn is a stall: reported (G3).
    stall_after_s: float = 60.0
    #: No frame for this long (in all) during a turn, with no request waiting for the
    #: user, ends the turn ``failed`` and kills the runtime (``daemon.stall_timeout_s``;
    #: None: never).
    stall_timeout_s: float | None = 600.0
    stalls: int = 0
    #: When the active turn was sent (process_clock): what an interrupted turn left running
    #: is what the provider started since (supervisor/leftovers.py).
    turn_sent_at: float | None = None
    _tasks: trio.Nursery | None = None
    _stop: trio.Event = attrs.field(factory=trio.Event)
    #: The queue the adapter puts events on: a turn the provider will never end is
    #: ended through it, so the stream settles it in order like any other end.
    _events: EventQueue | None = None
    #: The turn :meth:`abandon_turn` has ended (queued its end), until the stream settles it.
    _abandoned: TurnBinding | None = None
    #: Why this runtime interrupts its turn itself (it is stopping under it).
    _interrupting_for: str | None = None
    #: :meth:`leave_held` was called: the provider stays with its holder for the next daemon.
    _left_held: bool = False
    #: The session's binding until its ingest stream exists (then the stream's).
    _binding: SessionBinding | None = attrs.field(default=None, init=False)
    #: The core's ingest stream of this runtime's events (created by ``run``).
    _stream: IngestStream | None = attrs.field(default=None, init=False)

    @property
    def binding(self) -> SessionBinding | None:
        return self._binding

    @binding.setter
    def binding(self, binding: SessionBinding | None) -> None:
        # A replaced provider thread (resume fallback): later events are bound to it.
        self._binding = binding
        if self._stream is not None and binding is not None:
            self._stream.binding = binding

    @property
    def active_turn(self) -> TurnBinding | None:
        return None if self._stream is None else self._stream.active_turn

    @property
    def last_event_at(self) -> float:
        return -math.inf if self._stream is None else self._stream.last_event_at

    @property
    def session_id(self) -> str | None:
        return None if self.binding is None else self.binding.provider_session_id

    @property
    def busy(self) -> bool:
        return self.active_turn is not None

    @property
    def stopping(self) -> bool:
        """Asked to stop (or gone): it serves no further turn."""
        return self._stop.is_set() or self.exited.is_set()

    async def run(
        self, *, task_status: trio.TaskStatus[SessionRunner] = trio.TASK_STATUS_IGNORED
    ) -> None:
        # Never idle while starting (bounded by the request timeouts): a sweep that
        # lands during a slow start must not reap it. Set for real once the thread is open.
        self.last_activity = math.inf
        plan: RuntimePlan | None = None
        if self.reattach is not None:
            # Its session, provider thread and turn are the log's: nothing is opened.
            binding = self.reattach.binding
            self.binding = binding
            self.config = attrs.evolve(self.config, reattaching=True)
        else:
            binding = await self.core.open_session(self.thread_id, provider=self.provider)
            self.binding = binding
            if isinstance(self._plan(), ResumeThread):
                binding = await self._unless_unusable(binding)
            plan = self._plan()
            if isinstance(plan, ResumeThread):
                self.config = attrs.evolve(self.config, resuming=True)
        events = EventQueue(MAX_INGEST_BATCH)
        self._events = events
        stream = IngestStream(
            self.core,
            binding,
            self,
            turn_barrier=self.on_turn_ending is not None,
            subagent_barrier=self.on_subagent_ended is not None,
        )
        self._stream = stream
        if self.reattach is not None and self.reattach.turn is not None:
            # Before the replay's first event reaches the stream.
            stream.turn_started(self.reattach.turn)
            self.turn_sent_at = process_clock()
        raw = self.raw_factory(self.provider, binding.provider_session_id)
        started = False
        not_started: str | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                inner = (
                    self.launcher_factory(self.provider, nursery)
                    if self.launcher_factory is not None
                    else RecordingLauncher(nursery)
                )
                if isinstance(inner, SharedLauncher):
                    # Its ids on the process carry its session: a held journal says whose.
                    inner.tag = binding.provider_session_id
                    if isinstance(plan, ResumeThread):
                        # A shared process that has the thread loaded must take it back.
                        inner.affinity = plan.native_thread_ref
                self.launcher = _Announced(inner, self, raw)
                await nursery.start(stream.run, events)
                if hasattr(raw, "on_failure"):
                    raw.on_failure = self._raw_log_failed(nursery, binding.provider_session_id)
                    failed = getattr(raw, "failed", None)
                    if isinstance(failed, str):
                        raw.on_failure(failed)  # it could not even open its files
                try:
                    if self.reattach is None:
                        await _enterable(self.config.cwd)
                    async with self.adapter.open_runtime(
                        self.config, self.launcher, events, raw
                    ) as rt:
                        self.runtime = rt
                        recorded = await self._record_process(rt, binding)
                        if self.reattach is not None:
                            rt.adopt(self.reattach.native_thread_ref, self.reattach.native_turn_ref)
                        else:
                            assert plan is not None
                            await self._open_thread(rt, plan)
                            if self.launcher.current is not recorded:
                                # Claude spawns its process as the thread opens (and a
                                # failed resume spawns another): the one that hosts it.
                                await self._record_process(rt, binding)
                        self.last_activity = trio.current_time()
                        started = True
                        task_status.started(self)
                        with trio.CancelScope() as watch:
                            nursery.start_soon(self._cancel_on_exit, watch)
                            nursery.start_soon(self._stall_watch)
                            await self._stop.wait()
                        turn = self.active_turn
                        mid_turn = turn is not None and turn is not self._abandoned
                        if self._left_held:
                            pass  # its turn goes on in the holder; the next daemon reattaches
                        elif mid_turn and not self.exited.is_set():
                            await self._interrupt_for_stop()
                        if not self.exited.is_set() and not self._left_held:
                            await self._graceful_close(rt)
                except BaseException as exc:
                    cause = _start_failure(exc)
                    if started or cause is None:
                        raise
                    # The exit (with its stderr) is queued by now: let the stream take it.
                    events.close()
                    with trio.CancelScope(shield=True):
                        await self._wait_stream()
                    not_started = _why_not_started(cause, self.exit_event, self.config.cwd)
                    log.warning(
                        "provider %s did not start (session %s, thread %s): %s",
                        self.provider,
                        binding.provider_session_id,
                        self.thread_id,
                        not_started,
                    )
                    raise SessionFailed(
                        f"{self.provider} runtime failed to start: {not_started}"
                    ) from cause
                finally:
                    events.close()
                    with trio.CancelScope(shield=True):
                        await self._wait_stream()
                nursery.cancel_scope.cancel()
        finally:
            self.runtime = None
            close = getattr(raw, "close", None)
            if close is not None:
                close()
            if self.exit_event is None and not self._left_held:
                # Shut down before the adapter reported an exit (daemon shutdown), or
                # no process ever ran (its binary is missing): record the release
                # ourselves, shielded so it survives cancellation.
                gone = (
                    RuntimeExited(code=None, signal=None, error=not_started)
                    if not_started is not None
                    else RuntimeExited(code=0, signal=None, stderr_tail="released: daemon shutdown")
                )
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await stream.commit([gone])
            # Its turn is over too, however the stream ended (``wait_turn`` waits on it).
            stream.turn_done.set()
            self.exited.set()

    async def _record_process(
        self, rt: ProviderRuntime, binding: SessionBinding
    ) -> StoppableProcess | None:
        """The runtime's process (and its holder: the next start reattaches to it), in the
        log; returns the launcher's process it recorded."""
        assert self.launcher is not None
        current = self.launcher.current
        await self.core.record_process(
            binding.provider_session_id,
            rt.pid,
            process_start_time(rt.pid),
            _holder_of(current),
        )
        return current

    def _raw_log_failed(self, nursery: trio.Nursery, session_id: str) -> Callable[[str], None]:
        """A raw log that cannot be written is said once, as a session diagnostic.

        The raw log has logged it already; past the runtime's life there is no one
        to note it to, and the log line is all there is.
        """

        def note(why: str) -> None:
            with contextlib.suppress(RuntimeError):  # the nursery has closed
                nursery.start_soon(self.core.note, session_id, "warning", "raw_log_unwritable", why)

        return note

    def _spawned(self, process: ProviderProcess, raw: RawFrameSink) -> None:
        """A provider process started: say so, and send its stderr to the session's
        stderr file from its first byte (``t3orch logs``)."""
        log.info(
            "provider %s spawned: pid %s, session %s, thread %s",
            self.provider,
            process.pid,
            self.session_id,
            self.thread_id,
        )
        tee = getattr(process, "tee_stderr", None)
        sink = getattr(raw, "stderr", None)
        if callable(tee) and callable(sink):
            tee(sink)
        if self._events is None or not isinstance(process, HeldProcess | VirtualProcess):
            return
        if process.holder_id is None:
            return  # a thread on a shared process that is not held: no journal
        feed_offsets(process, process.holder_id, self._events)
        if isinstance(raw, RotatingRawLog):
            # The muted replay's frames are in the raw log already (recorded by the
            # daemon that read them first): not a second time.
            raw.replaying = lambda events=self._events: events.muted

    async def _unless_unusable(self, binding: SessionBinding) -> SessionBinding:
        """Before resuming: a fresh provider thread when the stored one is not to be resumed.

        Its settings conflict with the run's (a changed cwd), or its delta handoffs
        would pass the configured size. Decided before the process starts, so it
        is started fresh, not resumed.
        """
        if self.first_run_id is None:
            return binding
        fresh = await self.core.replace_if_unusable(
            self.thread_id,
            binding.provider_session_id,
            self.first_run_id,
            self.delta_handoff_limit or None,
        )
        if fresh is None:
            return binding
        # The summary is a handoff in the log: the run's first attempt sends it.
        self.binding, why, tag = fresh
        code = _REPLACED_BECAUSE[tag]
        await self.core.note(binding.provider_session_id, "info", code, why)
        return self.binding

    async def _stall_watch(self) -> None:
        """A turn with no frames for ``stall_after_s`` is reported; past ``stall_timeout_s``
        it ends ``failed`` and the runtime is killed (a turn waiting for the user is not
        stalled: the provider waits for us)."""
        reported_for: float | None = None
        while not self.exited.is_set():
            quiet_since = self._quiet_since()
            await trio.sleep_until(quiet_since + self._next_stall_check(quiet_since))
            now = trio.current_time()
            quiet_since = self._quiet_since()
            quiet = now - quiet_since
            if self.active_turn is None or quiet < self.stall_after_s or self.waits_for_user():
                if quiet >= self.stall_after_s:
                    # Idle past the window: sleep_until above would return at once and
                    # spin. A turn starting during this sleep is still checked in time.
                    await trio.sleep(self.stall_after_s)
                continue
            if reported_for != quiet_since:
                reported_for = quiet_since
                self.stalls += 1
                await self.core.note(
                    self.session_id,
                    "warning",
                    "turn_stalled",
                    f"no frame from {self.provider} for {quiet:.1f}s during a turn",
                )
            if self.stall_timeout_s is None or quiet < self.stall_timeout_s:
                if self.stall_timeout_s is None:
                    await trio.sleep(self.stall_after_s)
                continue
            reason = (
                f"no frame from {self.provider} for {quiet:.0f}s during the turn "
                f"(daemon.stall_timeout_s = {self.stall_timeout_s:g}): the provider is hung; "
                "its runtime was killed"
            )
            await self.core.note(self.session_id, "error", "turn_stall_timeout", reason)
            # Stopping before the turn ends: its end must not hand the next run to this runtime.
            self.stop("stalled")
            await self.abandon_turn("failed", reason)
            child = self.launcher.current if self.launcher else None
            if child is not None:
                # A hung process may not read stdin or handle SIGTERM (a stopped one
                # cannot): kill the group rather than wait for the ladder's rungs.
                child.signal_group(signal.SIGKILL)
            return

    def _quiet_since(self) -> float:
        return max(self.last_event_at, self.last_activity)

    def _next_stall_check(self, quiet_since: float) -> float:
        """Seconds after ``quiet_since`` the watch looks next: the warning, then the timeout."""
        now = trio.current_time()
        stalled = self.active_turn is not None and now - quiet_since >= self.stall_after_s
        if self.stall_timeout_s is not None and stalled:
            return max(self.stall_timeout_s, self.stall_after_s)
        return self.stall_after_s

    def waits_for_user(self) -> bool:
        """A request of this thread is waiting for an answer: the silence is ours."""
        return bool(self.reader.pending_requests(self.thread_id))

    async def abandon_turn(self, status: Literal["failed", "interrupted"], reason: str) -> None:
        """End the active turn ourselves, because its provider will not (hung, or deaf
        to an interrupt): its end goes through the event queue, so the ingest stream
        commits it after everything the provider sent before, and the turn's waiters wake.

        The caller stops the runtime; whatever the provider says about the turn later
        is not bound to it any more.
        """
        turn = self.active_turn
        if turn is None or self._events is None or self._events.closed:
            return
        # No await before this: a stop() just before must find the turn already ended.
        self._abandoned = turn
        self._events.put(TurnCompleted(native_turn_ref=None, status=status, error=reason))
        with trio.move_on_after(10):
            await self.wait_turn()

    async def _cancel_on_exit(self, scope: trio.CancelScope) -> None:
        await self.exited.wait()
        self._stop.set()
        scope.cancel()

    def _plan(self) -> RuntimePlan:
        """The core's plan for this runtime's provider thread (resume, fork, fresh)."""
        assert self.binding is not None and self.binding.provider_thread_id is not None
        return next_runtime(
            self.reader,
            thread_id=self.thread_id,
            provider_thread_id=self.binding.provider_thread_id,
            provider=self.provider,
            cwd=self.config.cwd,
            first_run_id=self.first_run_id,
            forks_natively=self.provider in NATIVE_FORK_PROVIDERS,
        )

    async def _open_thread(self, rt: ProviderRuntime, plan: RuntimePlan) -> None:
        assert self.binding is not None
        match plan:
            case ForkThread():
                await self._open_fork(rt, plan)
                return
            case ResumeThread(native_thread_ref=ref, head_ref=head):
                resume: ResumeRefs | None = ResumeRefs(ref, head)
            case StartFresh():
                resume = None
                await self._start_afresh()
        try:
            await rt.open_thread(resume)
        except ResumeError as exc:
            if self.first_run_id is None:
                raise
            await self.core.note(
                self.binding.provider_session_id, "warning", f"resume_failed.{exc.reason}", str(exc)
            )
            # The summary is a handoff in the log: the run's first attempt sends it.
            self.binding = await self.core.replace_provider_thread(
                self.thread_id, self.binding.provider_session_id, self.first_run_id, str(exc)
            )
            await rt.open_thread(None)

    async def _start_afresh(self) -> None:
        """A fresh start on a provider thread that had a conversation (never confirmed by a
        completed turn, so not resumed): what that one was told is told again."""
        assert self.binding is not None and self.binding.provider_thread_id is not None
        pt = self.reader.get(ProviderThread, self.binding.provider_thread_id)
        if pt is not None and pt.native_thread_ref is not None:
            await self.core.forget_conversation(pt.id)
            self.started_afresh = True

    async def _open_fork(self, rt: ProviderRuntime, fork: ForkThread) -> None:
        """Resolve a fork lazily, now that its first run's provider is known."""
        assert self.binding is not None and self.first_run_id is not None
        pt_id = self.binding.provider_thread_id
        assert pt_id is not None
        source = fork.source
        reason = "the provider cannot fork the source natively"
        if source is not None:
            try:
                ref = await rt.fork_thread(ResumeRefs(source.native_thread_ref, source.turn_ref))
            except AdapterError as exc:
                reason = f"native fork failed: {exc}"
                await self.core.note(
                    self.binding.provider_session_id, "warning", "fork_native_failed", reason
                )
            else:
                await self.core.resolve_fork_native(fork.transfer_id, pt_id, ref)
                return
        # The source's history is a handoff in the log: the run's first attempt sends it.
        await self.core.resolve_fork_portable(fork.transfer_id, pt_id, self.first_run_id, reason)
        await rt.open_thread(None)

    async def _interrupt_for_stop(self) -> None:
        """Stopped mid-turn (a daemon stop after its drain): the turn is interrupted —
        by the provider when it takes the interrupt in time, else here — rather than
        left to fail with the process the ladder is about to end."""
        reason = f"the runtime was stopped during the turn ({self.stop_reason})"
        self._interrupting_for = reason  # the provider's own interrupted end says why too
        with trio.move_on_after(STOP_INTERRUPT_S):
            with contextlib.suppress(AdapterError, SessionFailed):
                await self.interrupt()
            await self.wait_turn()
        await self.abandon_turn("interrupted", reason)

    async def _graceful_close(self, rt: ProviderRuntime) -> None:
        """The stop ladder: protocol close, then SIGTERM, then SIGKILL to the group.

        A provider that just ignored an interrupt would ignore the close as well: its
        ladder starts at the closing of stdin with a short grace, then the signals.
        """
        deaf = self.stop_reason == "interrupt_failed"
        with trio.move_on_after(0.1 if deaf else CLOSE_GRACE_S):
            with contextlib.suppress(AdapterError):
                await rt.close()
            if self.exited.is_set():
                return
        child = self.launcher.current if self.launcher else None
        if child is not None and child.status is None:
            log.info(
                "provider %s pid %s still runs after its protocol close (%s): signalling its group",
                self.provider,
                child.pid,
                self.stop_reason,
            )
            result = await child.stop(grace_close=0.1, grace_term=TERM_GRACE_S, grace_kill=2.0)
            if result.status is None:
                log.error(
                    "provider %s (pid %s) survived SIGKILL: reported as a leak",
                    self.provider,
                    child.pid,
                )
            elif result.stage != "close":
                log.info(
                    "provider %s pid %s stopped by %s",
                    self.provider,
                    child.pid,
                    "SIGKILL" if result.stage == "kill" else "SIGTERM",
                )

    # -- work ------------------------------------------------------------------

    async def start_turn(
        self,
        run_id: str,
        text: str,
        *,
        turn: TurnBinding | None = None,
        handoff: str | None = None,
    ) -> TurnBinding:
        """Begin an attempt of ``run_id`` (or use ``turn``, already begun, with the
        ``handoff`` prepared with it) and send its input, after that handoff.

        The handoff is all the context it carries: what the provider thread missed,
        and a summary its runtime was opened with (a resume fallback, a portable fork),
        all read from the log as the attempt began (``prepare_handoff``)."""
        rt = self.runtime
        if rt is None or self.exited.is_set() or self.binding is None:
            raise SessionFailed(f"the {self.provider} runtime is not running")
        assert self.binding.provider_thread_id is not None
        if turn is None:
            # What this provider thread missed (a provider switch) is materialized now.
            handoff, turn = await self.core.begin_attempt_with_handoff(
                run_id, self.binding.provider_thread_id, self.journal_position()
            )
        assert self._stream is not None
        self._stream.turn_started(turn, sent=False)
        self.last_activity = trio.current_time()
        self.turn_sent_at = process_clock()
        if handoff:
            text = SEPARATOR.join([handoff, text])
        try:
            timeline.stamp("provider.start_turn")
            await rt.start_turn(text)
            self._stream.turn_sent()
            timeline.stamp("provider.started")
        except AdapterError as exc:
            why = str(exc)
            if isinstance(exc, ProviderGone):
                with trio.move_on_after(EXIT_REPORT_GRACE_S):
                    await self.exited.wait()
                if self.exit_turn is turn:
                    return turn  # its exit ended the turn, saying how and with its stderr
                if self.exit_event is not None:
                    why = describe_exit(self.exit_event).error or why
            # Bound to this turn by name: an exit ingested meanwhile (bound to no turn,
            # as it began before this one) has cleared ``active_turn``.
            assert self.binding is not None
            failed = TurnCompleted(
                native_turn_ref=None, status="failed", error=f"turn could not start: {why}"
            )
            await self._stream.end_unstarted_turn(turn, failed)
        return turn

    async def wait_turn(self) -> None:
        """Until the active turn ends, or the runtime does (which ends every turn).

        One event, no tasks: the runtime's end sets the turn's event as well (the
        stream's record of the exit, or this runner's teardown)."""
        stream = self._stream
        if stream is None:
            await self.exited.wait()
        elif not self.exited.is_set():
            await stream.turn_done.wait()

    async def interrupt(self) -> None:
        """Ask the provider to interrupt its turn; it must acknowledge within a bound.

        Raises AdapterError (a ProviderTimeout when it did not answer in time).
        """
        if self.runtime is None:
            raise SessionFailed("no live runtime to interrupt")
        with trio.move_on_after(INTERRUPT_ANSWER_S) as bound:
            await self.runtime.interrupt_turn()
        if bound.cancelled_caught:
            raise ProviderTimeout(
                f"{self.provider} did not acknowledge the interrupt within {INTERRUPT_ANSWER_S:g} s"
            )

    async def interrupt_or_stop(self) -> Literal["interrupting", "stopped"]:
        """Interrupt the active turn; when the provider does not take it, the turn ends
        ``interrupted`` here and the runtime goes down the stop ladder."""
        try:
            await self.interrupt()
            return "interrupting"
        except (AdapterError, SessionFailed) as exc:
            reason = f"the provider did not take the interrupt ({exc}); its runtime was stopped"
        await self.core.note(self.session_id, "warning", "interrupt_escalated", reason)
        self.stop("interrupt_failed")
        await self.abandon_turn("interrupted", reason)
        return "stopped"

    async def steer(self, text: str) -> None:
        if self.runtime is None:
            raise SessionFailed("no live runtime to steer")
        await self.runtime.steer_turn(text)

    async def respond(self, native_request_ref: str, answer: RequestAnswer) -> None:
        if self.runtime is None:
            raise SessionFailed("the runtime holding this request is gone")
        self.last_activity = trio.current_time()
        await self.runtime.respond(native_request_ref, answer)

    def stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        self._stop.set()

    @property
    def left_held(self) -> bool:
        return self._left_held

    def journal_position(self) -> JournalPosition | None:
        """How far this runtime has read its holder's journal (None: not held): a turn
        begun now has its input journaled after it (``ProviderTurn.begun_after``)."""
        held = _held_lines(self.launcher.current if self.launcher else None)
        if held is None or held.holder_id is None:
            return None
        return JournalPosition(holder_id=held.holder_id, offset=held.delivered)

    def leave_held(self) -> bool:
        """The daemon exits and leaves a held provider running: what the log has is kept,
        nothing more is committed (the next daemon replays the rest from the journal), the
        provider is sent nothing that would stop it. False when it is not held (or gone)."""
        # A thread on a held shared process leaves through its member; the process stays
        # with its holder (the pool leaves it).
        held = _held_lines(self.launcher.current if self.launcher else None)
        if held is None or self.exited.is_set() or self._events is None:
            return False
        self._left_held = True
        # Events queued so far are committed, with the offset of the last line they came
        # from (the reader maps a read whole before it yields); later ones are not.
        held.report_delivered()
        self._events.muted = True
        held.on_mute = None
        held.leave_running()
        self.stop("daemon_exit")
        return True

    # -- what the ingest stream tells the runtime's owner (StreamOwner) ----------

    def observed(self, event: ProviderEvent) -> None:
        self._log_event(event)

    def working(self) -> None:
        self.last_activity = trio.current_time()

    def turn_closing(self) -> None:
        # Idle from the turn's end: stamped before its commit, so anyone who sees
        # the ended run also sees the runtime's new idle start.
        self.last_activity = trio.current_time()

    def interrupted_by_us(self) -> str | None:
        return self._interrupting_for

    async def turn_barrier(
        self, run_id: str, committed: Callable[[], Awaitable[None]]
    ) -> Decide | None:
        if self.on_turn_ending is None:
            return None
        return await self.on_turn_ending(self.thread_id, run_id, committed)

    async def subagent_ended(self, run_id: str, child_native_thread_ref: str | None) -> None:
        if self.on_subagent_ended is not None:
            await self.on_subagent_ended(self.thread_id, run_id, child_native_thread_ref)

    async def exiting(self, event: RuntimeExited) -> None:
        if self._should_recover(event):
            await self._prepare_recovery()

    def turn_ended(self, turn: TurnBinding | None, event: TurnCompleted) -> None:
        if turn is not None and event.status == "interrupted":
            self._stop_leftovers(turn.run_id)

    def runtime_exited(self, event: RuntimeExited, turn: TurnBinding | None) -> None:
        self.exit_event = event
        self.exit_turn = turn
        self.exit_committed_at = trio.current_time()
        self.exited.set()

    def _stop_leftovers(self, run_id: str) -> None:
        """An interrupted turn's commands must not go on unbeknown: stop them, say so."""
        rt, since, tasks = self.runtime, self.turn_sent_at, self._tasks
        if rt is None or rt.pid is None or since is None or tasks is None:
            return
        pid, until = rt.pid, process_clock()
        child = self.launcher.current if self.launcher else None
        shared = isinstance(child, SharedChild) and child.threads_on_process > 1
        within = self.config.cwd if shared else None

        async def stop() -> None:
            try:
                left = await stop_turn_leftovers(pid, since, until, within=within)
                message = left.describe(run_id)
                if message is not None:
                    log.warning("%s", message)
                    await self.core.note(
                        self.session_id, "warning", "interrupted_turn_commands", message
                    )
            except Exception:
                # Best effort beside the runtime: a failure here must not end the session.
                log.exception("stopping what interrupted run %s left running failed", run_id)

        tasks.start_soon(stop)

    def _log_event(self, event: ProviderEvent) -> None:
        """The lifecycle steps worth a line in the daemon's log (journald: one each)."""
        if isinstance(event, RuntimeExited):
            summary = describe_exit(event)
            child = self.launcher.current if self.launcher else None
            failed = summary.error is not None
            log.log(
                logging.WARNING if failed and not self.stop_reason else logging.INFO,
                "provider %s pid %s %s (%s), session %s, thread %s%s",
                self.provider,
                child.pid if child is not None else "-",
                summary.description,
                self.stop_reason or ("crash" if failed else "exit"),
                self.session_id,
                self.thread_id,
                f"; stderr: {summary.stderr}" if failed and summary.stderr else "",
            )
        elif isinstance(event, RequestOpened):
            log.info(
                "provider %s asks the user: %s request (native %s), session %s, thread %s: %s",
                self.provider,
                event.kind,
                event.native_request_ref,
                self.session_id,
                self.thread_id,
                redact_text(" ".join(event.summary.split())[:200]) or "-",
            )
        elif isinstance(event, RequestCancelled):
            log.info(
                "provider %s withdrew request (native %s), session %s: %s",
                self.provider,
                event.native_request_ref,
                self.session_id,
                redact_text(" ".join(event.reason.split())[:200]),
            )
        elif isinstance(event, Diagnostic) and event.level != "info":
            log.warning(
                "provider %s %s: %s: %s (session %s)",
                self.provider,
                event.level,
                event.code,
                redact_text(" ".join(event.message.split())[:300]),
                self.session_id,
            )

    def _should_recover(self, event: RuntimeExited) -> bool:
        crashed = event.signal is not None or event.code not in (0, None)
        return (
            self.recover_runs and crashed and self.active_turn is not None and not self.stop_reason
        )

    async def _prepare_recovery(self) -> None:
        """Before the crash is recorded, move the run to a new ``provider_recovery`` attempt.

        The crashed attempt then ends ``failed`` while the run stays open; the manager
        starts the new attempt on a new runtime (the same recovery path as any other).
        """
        active = self.active_turn
        if active is None or self.binding is None or self.binding.provider_thread_id is None:
            return
        try:
            turn = await self.core.begin_attempt(
                active.run_id,
                self.binding.provider_thread_id,
                "provider_recovery",
                self.journal_position(),
            )
        except CommandRejected:
            return
        self.recovery = turn

    async def _wait_stream(self) -> None:
        if self._stream is None:
            return
        with trio.move_on_after(10):
            await self._stream.done.wait()

    def describe(self) -> dict[str, Any]:
        child = self.launcher.current if self.launcher else None
        return {
            "threadId": self.thread_id,
            "provider": self.provider,
            "providerSessionId": self.session_id,
            "busy": self.busy,
            "pid": self.runtime.pid if self.runtime else None,
            # The shared codex process it is on (issue 21), else its own.
            "process": child.process_name if isinstance(child, SharedChild) else None,
        }


def _held_lines(current: object) -> HeldProcess | VirtualProcess | None:
    """The held lines a runtime reads (its holder's process, or its thread's member of a
    held shared process); None when not held."""
    if isinstance(current, HeldProcess):
        return current
    if isinstance(current, SharedChild) and current.holder is not None:
        return None if current.member.left else current.member
    return None


def _holder_of(current: object) -> HolderRef | None:
    """The holder a runtime's provider runs under (recorded on its ProviderSession)."""
    if isinstance(current, HeldProcess):
        return holder_ref(current)
    if isinstance(current, SharedChild):
        return current.holder
    return None
