"""``SessionManager``: dispatches runs to live runtimes and keeps them supervised.

One runner per app thread at most. A queued run is dispatched when its thread
has no active run: the thread's runtime is reused, or reopened from the stored
resume refs (the one recovery path, whatever released the last one — reaper,
crash, daemon restart). A runner's failure becomes events and a restart count,
never an exception in the daemon: after ``intensity`` crashes in ``window_s``
the thread's session stays ``error`` until the user sends again.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import attrs
import trio

from adapters.errors import AdapterError, NotSupported, StaleRequest
from adapters.protocol import ProviderAdapter, RequestAnswer
from supervisor.checkpointing import Checkpointer
from supervisor.holder.client import ReattachLauncher, stop_holder
from supervisor.holder.layout import describe_held
from supervisor.launcher import LauncherFactory
from supervisor.providers import ProviderSettings, adapter_for, runtime_config
from supervisor.reattach import Reattach, begun_handoff
from supervisor.session import RawSinkFactory, SessionFailed, SessionRunner
from supervisor.shared_codex import (
    HolderSettings,
    SharedChild,
    SharedCodexPool,
    held_with_threads,
    shared_key,
)
from t3orch.domain.run import Run
from t3orch.domain.thread import AppThread
from t3orch.domain.turn_items import UserMessage
from t3orch.domain.vocab import ProviderKind, RuntimeMode
from t3orch.ids import TurnItemId, derived_id
from t3orch.ingest.binding import SessionBinding, TurnBinding
from t3orch.provider_versions import describe
from t3orch.service import CommandResult, CoreService
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import Decide, ReadModel

log = logging.getLogger(__name__)
#: A thread's runs that are not over: queued, or being dispatched or worked on.
_OPEN_RUNS = ("queued", "starting", "running", "waiting")

#: Bound on retiring a runtime after a provider switch (its whole stop ladder).
RETIRE_TIMEOUT_S = 20.0


@attrs.frozen
class _Begun:
    """A run sent to an idle runtime: its attempt, begun in the send's commit."""

    runner: SessionRunner
    turn: TurnBinding
    handoff: str | None
    #: The user's message, as sent (not read back).
    text: str


def _unwrapped(exc: BaseException) -> BaseException:
    """``exc`` without the single-exception groups nurseries wrap around it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _session_failed(exc: BaseException) -> SessionFailed | None:
    """The SessionFailed behind ``exc``, through the single-exception groups nurseries add."""
    exc = _unwrapped(exc)
    return exc if isinstance(exc, SessionFailed) else None


@attrs.frozen
class RestartPolicy:
    intensity: int = 3
    window_s: float = 60.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0

    def backoff(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return float(min(self.backoff_max_s, self.backoff_initial_s * 2 ** (failures - 1)))


@attrs.frozen
class ReaperPolicy:
    idle_timeout_s: float = 1800.0
    #: Background work (a pending request, a running turn) defers release at most this long.
    background_cap_s: float = 4 * 3600.0
    sweep_interval_s: float = 300.0


@attrs.define
class _Crashes:
    """The restarts of one runtime lineage: a thread's own processes, or the shared
    processes of one compatibility key (a crash of one with 5 threads is one restart)."""

    times: deque[float] = attrs.field(factory=deque)
    held: bool = False
    #: The shared processes whose crash is counted already (each once, not per thread).
    seen: set[str] = attrs.field(factory=set)


@attrs.define(eq=False)
class SessionManager:
    core: CoreService
    reader: ReadModel
    providers: dict[str, ProviderSettings]
    raw_factory: RawSinkFactory | None = None
    restart: RestartPolicy = RestartPolicy()
    reaper: ReaperPolicy = ReaperPolicy()
    #: A turn silent this long is reported as stalled (G3); silent for
    #: ``stall_timeout_s`` (with nothing waiting for the user) it ends ``failed`` and
    #: its runtime is killed. None: never (a long silent command is not always a hang).
    stall_after_s: float = 60.0
    stall_timeout_s: float | None = 600.0
    #: A run whose provider crashed mid-turn goes on as a ``provider_recovery``
    #: attempt on a new runtime (within the restart intensity) instead of failing.
    recover_runs: bool = False
    #: How runtimes launch their provider (tests: replayed transcripts); default real processes.
    launcher_factory: LauncherFactory | None = None
    #: ``providers.codex.max_threads_per_process``: above 1, Codex threads with
    #: compatible settings share ``codex app-server`` processes (supervisor/shared_codex.py).
    codex_threads_per_process: int = 1
    #: The provider kinds whose runtimes share processes: Codex's, and the stand-in's in
    #: tests that launch it with ``--threads`` (it then hosts many threads the same way).
    shared_kinds: frozenset[str] = frozenset({"codex"})
    #: Where shared processes are held (live restore on), else they are the daemon's.
    codex_holders: HolderSettings | None = None
    #: The shared Codex processes (while the manager runs, when sharing is on).
    codex_pool: SharedCodexPool | None = None
    #: The state dir whose holders ``status`` lists (None: no holders).
    state_dir: Path | None = None
    #: ``daemon.max_delta_handoff_chars``: past it a return gets a fresh provider thread.
    delta_handoff_limit: int | None = None
    started_at: float = 0.0
    runners: dict[str, SessionRunner] = attrs.field(factory=dict)
    #: Restart ledgers by lineage (a thread id, or ``shared:<key>``): see ``_Crashes``.
    crashes: dict[str, _Crashes] = attrs.field(factory=dict)
    #: The lineage each thread's last runtime belonged to (a thread's own by default).
    _lineage: dict[str, str] = attrs.field(factory=dict)
    released: int = 0
    _nursery: trio.Nursery | None = None
    _wake: dict[str, trio.Event] = attrs.field(factory=dict)
    _dispatching: set[str] = attrs.field(factory=set)
    #: Set once a runner's supervisor has finished releasing it (crash counted).
    _release_done: dict[SessionRunner, trio.Event] = attrs.field(factory=dict)
    on_release: Callable[[SessionRunner, str], None] | None = None
    #: A graceful stop is letting running turns end: no run is started or accepted.
    draining: bool = False
    #: Which adapter drives a provider kind (tests drive every kind with the stand-in).
    adapter_factory: Callable[[ProviderKind], ProviderAdapter] = adapter_for
    checkpointer: Checkpointer = attrs.field(
        default=attrs.Factory(lambda self: Checkpointer(self.core, self.reader), takes_self=True)
    )

    async def run(
        self, *, task_status: trio.TaskStatus[SessionManager] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.started_at = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.codex_threads_per_process > 1:
                    pool = SharedCodexPool(self.codex_threads_per_process, self.codex_holders)
                    self.codex_pool = await nursery.start(pool.run)
                nursery.start_soon(self._reap_loop)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self.codex_pool = None

    # -- commands (the API's Operations) ---------------------------------------

    async def send_message(
        self,
        thread_id: str,
        text: str,
        *,
        command_id: str | None = None,
        mode: Literal["queue", "steer"] = "queue",
    ) -> CommandResult:
        runner = self.runners.get(thread_id)
        if mode == "steer" and runner is not None and runner.active_turn is not None:
            return await self._steer(runner, runner.active_turn, text, command_id)
        if self.draining:
            # Queued now, it would be settled ``interrupted`` by the next start: refuse
            # it instead, so the client knows to send it again.
            raise CommandRejected(
                "daemon_stopping",
                "the daemon is stopping (running turns are finishing); "
                "no new run is accepted — send it again once the daemon is back",
            )
        self._release_hold(thread_id)
        if runner is not None and self._idle_for_a_send(runner):
            return await self._send_and_start(runner, text, command_id)
        result = await self.core.send_message(thread_id, text, command_id=command_id)
        if not result.duplicate:
            self.kick(thread_id)
        return result

    def _idle_for_a_send(self, runner: SessionRunner) -> bool:
        """The thread's runtime is live and idle, serves its settings, and nothing of
        the thread is queued, working or being dispatched."""
        thread_id = runner.thread_id
        binding = runner.binding
        crashes = self.crashes.get(self._lineage.get(thread_id, thread_id))
        return (
            thread_id not in self._dispatching
            and not runner.stopping
            and runner.runtime is not None
            and not runner.busy
            and runner.restart is None
            and runner.recovery is None
            and binding is not None
            and binding.provider_thread_id is not None
            and (crashes is None or not crashes.held)
            and self._outdated(runner) is None
            # An indexed read of the thread's open runs, not a decode of all its runs:
            # a send's cost must not grow with the thread's history.
            and not self.reader.select_by_status(Run, _OPEN_RUNS, thread_id=thread_id)
        )

    async def _send_and_start(
        self, runner: SessionRunner, text: str, command_id: str | None
    ) -> CommandResult:
        """The send, its handoff and its first attempt in one commit, then the turn.

        What dispatch would do for the run (``_dispatch``), without the send's own
        commit before the attempt's: one fsync before ``turn/start``, not two. The
        thread is claimed first (as dispatching), so a send meanwhile queues behind.
        The turn starts once the commit is visible, during its fsync (a daemon crash
        after it keeps the run; see ``CoreService.send_and_begin``); the caller is
        answered once it is durable.
        """
        thread_id = runner.thread_id
        assert runner.binding is not None and runner.binding.provider_thread_id is not None
        assert self._nursery is not None, "the session manager is not running"
        self._dispatching.add(thread_id)
        started = False
        try:
            # Shielded: a caller gone meanwhile (its connection closed) must not leave a
            # begun attempt that nobody starts (its run would hold the thread's queue).
            with trio.CancelScope(shield=True):
                sent = await self.core.send_and_begin(
                    thread_id,
                    text,
                    runner.binding.provider_thread_id,
                    command_id=command_id,
                    begun_after=runner.journal_position(),
                )
                begun = None
                if sent.turn is not None:
                    begun = _Begun(runner, sent.turn, sent.handoff, text)
                # Its first pass writes ``turn/start`` while this waits for the fsync.
                self._nursery.start_soon(self._dispatch_loop, thread_id, begun)
                started = True
                await sent.durable()
        except BaseException:
            if not started:
                self._dispatching.discard(thread_id)
            raise
        return sent.result

    async def _steer(
        self, runner: SessionRunner, active: TurnBinding, text: str, command_id: str | None
    ) -> CommandResult:
        """Add input to the active run: natively, or by interrupt-and-restart.

        The input is recorded on the run as a user message either way. A provider
        that cannot steer gets a new attempt of the same run (``steering_restart``)
        whose input carries the original message and the new one; the interrupted
        attempt ends ``superseded`` and the run goes on.
        """
        recorded = await self.core.add_run_input(active.run_id, text, command_id=command_id)
        if recorded.duplicate:
            return recorded
        try:
            await runner.steer(text)
            return CommandResult({"runId": active.run_id, "steered": "native"}, recorded.sequence)
        except NotSupported:
            pass
        except (AdapterError, SessionFailed) as exc:
            # The provider refused, died or did not answer within its request bound.
            raise CommandRejected(
                "steer_failed",
                f"the provider did not take the steer: {exc} (the message is recorded on "
                f"run {active.run_id}; the provider may not have seen it)",
            ) from exc
        assert runner.binding is not None and runner.binding.provider_thread_id is not None
        run = self.reader.get(Run, active.run_id)
        original = self._user_text(run) if run is not None else ""
        restart = await self.core.begin_attempt(
            active.run_id,
            runner.binding.provider_thread_id,
            "steering_restart",
            runner.journal_position(),
        )
        runner.restart = (restart, f"{original}\n\n{text}")
        try:
            await runner.interrupt()
        except (AdapterError, SessionFailed) as exc:
            raise CommandRejected("steer_failed", f"could not interrupt to steer: {exc}") from exc
        return CommandResult(
            {"runId": active.run_id, "steered": "restart", "attemptId": restart.attempt_id},
            self.reader.last_sequence(),
        )

    async def interrupt_run(self, run_id: str, *, command_id: str | None = None) -> CommandResult:
        run = self.reader.get(Run, run_id)
        if run is None:
            raise CommandRejected("unknown_run", f"no run {run_id!r}")
        runner = self.runners.get(run.thread_id)
        if runner is None or runner.active_turn is None or runner.active_turn.run_id != run_id:
            raise CommandRejected(
                "run_not_active", f"run {run_id} is {run.status}; nothing to interrupt"
            )
        # A provider that does not take the interrupt (hung, stopped, deaf) is stopped:
        # the run ends ``interrupted`` all the same, and the next run gets a new runtime.
        outcome = await runner.interrupt_or_stop()
        return CommandResult(
            {"runId": run_id, "interrupting": True, "runtimeStopped": outcome == "stopped"},
            self.reader.last_sequence(),
        )

    async def respond(
        self,
        request_id: str,
        decision: str,
        *,
        message: str | None = None,
        answers: dict[str, str] | None = None,
        command_id: str | None = None,
    ) -> CommandResult:
        claimed = await self.core.claim_request(request_id, decision, command_id=command_id)
        if claimed.duplicate:
            return claimed
        native = claimed.result["nativeRequestRef"]
        runner = next(
            (
                r
                for r in self.runners.values()
                if r.session_id == claimed.result["providerSessionId"]
            ),
            None,
        )
        if runner is None:
            raise CommandRejected(
                "request_not_resumable",
                f"request {request_id}: its runtime is gone; it will expire",
            )
        try:
            await runner.respond(native, RequestAnswer(decision, message, answers))  # type: ignore[arg-type]
        except (StaleRequest, SessionFailed, AdapterError) as exc:
            log.warning("request %s: answer %s not delivered: %s", request_id, decision, exc)
            raise CommandRejected("request_not_resumable", f"request {request_id}: {exc}") from exc
        log.info("request %s answered: %s (thread %s)", request_id, decision, runner.thread_id)
        return claimed

    async def switch_provider(
        self, thread_id: str, provider: str, *, command_id: str | None = None
    ) -> CommandResult:
        """Future runs go to ``provider``; the current runtime is retired once idle.

        Returning to a provider resumes its old provider thread; the run that does
        gets a delta handoff of what it missed (``commands.lineage``).
        """
        if provider not in self.providers:
            raise CommandRejected(
                "provider_not_configured", f"no provider {provider!r} is configured"
            )
        result = await self.core.switch_provider(
            thread_id,
            provider,  # type: ignore[arg-type]
            command_id=command_id,
        )
        runner = self.runners.get(thread_id)
        if runner is not None and runner.provider != provider and not runner.busy:
            # Graceful (protocol close first); a busy one finishes its turn and is
            # retired by the next dispatch.
            runner.stop("provider_switch")
        self.kick(thread_id)
        return result

    async def configure_thread(
        self,
        thread_id: str,
        *,
        cwd: str | None = None,
        model: str | None = None,
        runtime_mode: RuntimeMode | None = None,
        command_id: str | None = None,
    ) -> CommandResult:
        """The thread's next runs use these settings; an idle runtime with others is retired.

        Whether the next run resumes the thread's provider thread with them is decided
        when its runtime opens (``SessionRunner._unless_unusable``).
        """
        result = await self.core.configure_thread(
            thread_id, cwd=cwd, model=model, runtime_mode=runtime_mode, command_id=command_id
        )
        runner = self.runners.get(thread_id)
        if runner is not None and not runner.busy and self._outdated(runner) is not None:
            runner.stop("settings_changed")
        return result

    async def delete_thread(
        self, thread_id: str, *, command_id: str | None = None
    ) -> CommandResult:
        """The thread becomes a tombstone, then its runtime is stopped and its release awaited.

        The core refuses a thread with a run still queued or working, so the runtime
        stopped here is idle; once the tombstone is committed no run can start on it.
        """
        result = await self.core.delete_thread(thread_id, command_id=command_id)
        runner = self.runners.get(thread_id)
        if runner is not None and not runner.exited.is_set():
            await self.retire(runner, "thread_deleted")
        return result

    def status(self) -> dict[str, Any]:
        return {
            "uptimeS": round(trio.current_time() - self.started_at, 3),
            "runners": [r.describe() for r in self.runners.values()],
            "released": self.released,
            "heldThreads": sorted(t for t in self._threads_known() if self.crashes_of(t).held),
            # Recent restarts per lineage (a shared process's crash counts once).
            "restarts": {
                lineage: len(self._recent(c)) for lineage, c in self.crashes.items() if c.times
            },
            # Which threads share which codex process (issue 21).
            "sharedProcesses": [] if self.codex_pool is None else self.codex_pool.describe(),
            # What ``--version`` said of each binary (the daemon probes them once at start).
            "providers": [describe(kind, s.command) for kind, s in self.providers.items()],
            # Runtimes whose providers outlive the daemon (issue 20), and their grace.
            "held": (
                held_with_threads(describe_held(self.state_dir), self.reader)
                if self.state_dir is not None
                else []
            ),
        }

    # -- dispatch ------------------------------------------------------------------

    def kick(self, thread_id: str) -> None:
        """Make sure a dispatcher looks at ``thread_id``'s queue."""
        if thread_id in self._dispatching:
            self._wake.setdefault(thread_id, trio.Event()).set()
            return
        assert self._nursery is not None, "the session manager is not running"
        self._dispatching.add(thread_id)
        self._nursery.start_soon(self._dispatch_loop, thread_id)

    async def _dispatch_loop(self, thread_id: str, begun: _Begun | None = None) -> None:
        try:
            if begun is not None:
                # Its attempt is committed: it starts even if a drain began meanwhile.
                await self._dispatch_guarded(thread_id, begun.turn.run_id, begun)
            while not self.draining:  # a stop's drain starts nothing new
                self._wake[thread_id] = trio.Event()
                run = self._next_queued(thread_id)
                if run is None:
                    return
                await self._dispatch_guarded(thread_id, run, None)
        finally:
            self._dispatching.discard(thread_id)

    async def _dispatch_guarded(self, thread_id: str, run: Run | str, begun: _Begun | None) -> None:
        """Dispatch ``run`` (a queued one, or the id of ``begun``'s)."""
        run_id = run if isinstance(run, str) else run.id
        try:
            if begun is not None:
                await self._start_begun(thread_id, begun)
            else:
                assert not isinstance(run, str)
                await self._dispatch(thread_id, run)
        except Exception as exc:
            # One thread's failure is that thread's run's error: it must never
            # escape into the manager's nursery (which would end the daemon).
            log.exception("dispatching run %s of %s failed", run_id, thread_id)
            cause = _unwrapped(exc)
            await self._fail_run(thread_id, run_id, f"{type(cause).__name__}: {cause}")

    def _next_queued(self, thread_id: str) -> Run | None:
        runs = self.reader.select_by_status(Run, _OPEN_RUNS, thread_id=thread_id)
        for run in runs:
            if run.status in ("starting", "running", "waiting"):
                return None  # one run at a time per thread: queue behind it
        return next((r for r in runs if r.status == "queued"), None)

    async def _start_begun(self, thread_id: str, begun: _Begun) -> None:
        """A run sent to an idle runtime: its attempt was begun with the send, and its
        ``turn/start`` goes first (nothing is read before it)."""
        run_id = begun.turn.run_id
        try:
            await begun.runner.start_turn(
                run_id, begun.text, turn=begun.turn, handoff=begun.handoff
            )
        except SessionFailed as exc:
            await self._fail_run(thread_id, run_id, str(exc))
            return
        await self._run_turn(thread_id, run_id, begun.runner)

    async def _dispatch(self, thread_id: str, run: Run) -> None:
        runner = self.runners.get(thread_id)
        if runner is not None and runner.stopping:
            # Its exit (or the end its supervisor gave a hung turn) ends the turn before
            # its supervisor has counted the crash: wait for the release, or this
            # decision reads a stale crash count or hands the run to a dying runtime.
            with trio.move_on_after(RETIRE_TIMEOUT_S):
                await runner.exited.wait()
                released = self._release_done.get(runner)
                if released is not None:
                    await released.wait()
        crashes = self.crashes_of(thread_id)
        if crashes.held:
            log.warning("thread %s: too many provider crashes; waiting for the user", thread_id)
            await self.core.note(
                None,
                "error",
                "restart_intensity",
                f"thread {thread_id}: too many provider crashes; waiting for the user",
            )
            await self._fail_run(
                thread_id, run.id, "provider restart intensity exceeded; send again to retry"
            )
            return
        runner = self.runners.get(thread_id)
        outdated = None if runner is None else self._outdated(runner)
        if runner is not None and outdated is not None:
            await self.retire(runner, outdated)
            runner = None
        if runner is None or runner.stopping:
            recent = len(self._recent(crashes))
            delay = self.restart.backoff(recent)
            if recent:
                log.info(
                    "restarting the provider of thread %s for run %s: %d crash(es) in %.0fs, "
                    "backoff %.1fs",
                    thread_id,
                    run.id,
                    recent,
                    self.restart.window_s,
                    delay,
                )
            if delay:
                await trio.sleep(delay)
            try:
                runner = await self._open_runner(thread_id, run.id)
            except SessionFailed as exc:
                self._record_crash(thread_id)
                await self._fail_run(thread_id, run.id, str(exc))
                return
        text = self._user_text(run)
        try:
            await runner.start_turn(run.id, text)
        except SessionFailed as exc:
            # It died between opening and this turn; its exit is recorded already.
            await self._fail_run(thread_id, run.id, str(exc))
            return
        await self._run_turn(thread_id, run.id, runner)

    async def _run_turn(self, thread_id: str, run_id: str, runner: SessionRunner) -> None:
        """From the run's first ``turn/start`` until it ended (and was checkpointed).

        It reads the log once, for how the run ended (a plain turn's only read here)."""
        await runner.wait_turn()
        if runner.left_held:
            return  # the run goes on in its holder, for the next daemon
        # A steer without native support asked for the run to go on as a new attempt.
        while runner.restart is not None and not runner.stopping:
            turn, combined = runner.restart
            runner.restart = None
            await runner.start_turn(run_id, combined, turn=turn)
            await runner.wait_turn()
        if runner.recovery is not None:
            await self._recover(thread_id, run_id, runner)
        # Completed runs were checkpointed at their barrier; an interrupted or failed
        # run is checkpointed here, before the next run is dispatched (not twice: a
        # git probe per run is a subprocess). One read needs no snapshot of its own.
        ended = self.reader.row("run", run_id)
        if ended is None or ended.status != "completed":
            await self.checkpointer.after_run(thread_id, run_id)

    async def _checkpoint_at_barrier(
        self, thread_id: str, run_id: str, committed: Callable[[], Awaitable[None]]
    ) -> Decide | None:
        return await self.checkpointer.at_barrier(thread_id, run_id, committed)

    def _outdated(self, runner: SessionRunner) -> str | None:
        """Why ``runner`` cannot serve its thread's next run, or None.

        The thread now uses another provider, or other settings than the runtime
        was started with (``thread.configure``): a new runtime is opened, and it
        decides whether the provider thread can be resumed with them.
        """
        thread = self.reader.get(AppThread, runner.thread_id)
        if thread is None:
            return None
        if runner.provider != thread.default_provider:
            return "provider_switch"
        settings = self.providers.get(runner.provider)
        default_model = settings.model if settings is not None else None
        wanted = (thread.cwd, thread.model_selection.model or default_model, thread.runtime_mode)
        started = (runner.config.cwd, runner.config.model, runner.config.runtime_mode)
        return "settings_changed" if wanted != started else None

    async def ensure_runner(self, thread_id: str) -> SessionRunner:
        """The thread's live runtime for its current provider, opened when there is none."""
        runner = self.runners.get(thread_id)
        outdated = None if runner is None else self._outdated(runner)
        if runner is not None and outdated is not None:
            await self.retire(runner, outdated)
            runner = None
        if runner is None or runner.stopping:
            runner = await self._open_runner(thread_id, None)
        return runner

    async def rollback(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        command_id: str | None = None,
        dry_run: bool = False,
        allow_shared_work_tree: bool = False,
        expect_work_tree: str | None = None,
    ) -> CommandResult:
        """Files back to the checkpoint, the provider thread rolled back, later runs marked."""
        return await self.checkpointer.rollback(
            self,
            thread_id,
            checkpoint_id,
            command_id=command_id,
            dry_run=dry_run,
            allow_shared_work_tree=allow_shared_work_tree,
            expect_work_tree=expect_work_tree,
        )

    async def retire(self, runner: SessionRunner, reason: str = "provider_switch") -> None:
        """Stop a runtime the thread no longer uses as it is; wait for its release."""
        runner.stop(reason)
        with trio.move_on_after(RETIRE_TIMEOUT_S):
            await runner.exited.wait()
            released = self._release_done.get(runner)
            if released is not None:
                await released.wait()

    async def _recover(self, thread_id: str, run_id: str, crashed: SessionRunner) -> None:
        """Run the crashed turn again as its ``provider_recovery`` attempt on a new runtime."""
        turn, crashed.recovery = crashed.recovery, None
        assert turn is not None
        released = self._release_done.get(crashed)
        if released is not None:
            await released.wait()  # the crash is counted before the intensity check
        crashes = self.crashes_of(thread_id)
        if crashes.held:
            await self._fail_run(thread_id, run_id, "provider restart intensity exceeded")
            return
        delay = self.restart.backoff(len(self._recent(crashes)))
        log.info(
            "recovering run %s of thread %s on a new runtime (backoff %.1fs)",
            run_id,
            thread_id,
            delay,
        )
        await trio.sleep(delay)
        try:
            runner = await self._open_runner(thread_id, run_id)
            run = self.reader.get(Run, run_id)
            assert run is not None, f"run {run_id} of a recovered turn is not in the log"
            handoff = None
            pt_id = None if runner.binding is None else runner.binding.provider_thread_id
            crashed_pt = None if crashed.binding is None else crashed.binding.provider_thread_id
            if pt_id is not None and pt_id != crashed_pt:
                # Its stored thread was replaced (a resume fallback): the run goes on there,
                # as a recovery attempt of the replacement's own with its summary (the one
                # begun on the crashed thread was never sent: superseded).
                handoff, turn = await self.core.begin_attempt_with_handoff(
                    run_id, pt_id, runner.journal_position(), "provider_recovery"
                )
            elif pt_id is not None and runner.started_afresh:
                # Its conversation started afresh: the attempt, begun before, carries what
                # the new one must be told again (the run's handoffs, given back).
                handoff = await self.core.prepare_handoff(run_id, pt_id, turn.provider_turn_id)
            await runner.start_turn(run_id, self._user_text(run), turn=turn, handoff=handoff)
        except SessionFailed as exc:
            await self._fail_run(thread_id, run_id, str(exc))
            return
        await runner.wait_turn()
        if runner.recovery is not None:
            await self._recover(thread_id, run_id, runner)

    def _user_text(self, run: Run) -> str:
        # The run's message is the item ``send_message`` made with it: read by its id,
        # not among every message of the thread (a read that grew with each turn).
        item = self.reader.get(UserMessage, derived_id(TurnItemId, run.id, "user"))
        if item is not None and item.message_id == run.user_message_id:
            return item.text
        raise CommandRejected("no_user_message", f"run {run.id} has no user message")

    async def reattach_all(self, held: list[Reattach]) -> list[Reattach]:
        """Reattach to each held runtime; returns those that could not be (their holders
        are told to stop; the caller settles them).

        All at once, and every runtime is attached (its holder's grace stopped, its
        process recorded as this daemon's) before any journal is replayed: a replay is
        CPU, and 200 of them ahead of the last attach made it wait seconds.
        """
        failed: list[Reattach] = []
        gate = trio.Event()
        opened: list[tuple[Reattach, SessionRunner]] = []

        async def failing(h: Reattach, exc: Exception) -> None:
            cause = _unwrapped(exc)
            log.warning(
                "thread %s: cannot reattach to holder %s: %s", h.thread_id, h.paths.holder_id, cause
            )
            await self.core.note(
                h.session.id, "warning", "reattach_failed", f"{type(cause).__name__}: {cause}"
            )
            stop_holder(h.paths, h.state.holder_pid, h.state.holder_started_at)
            failed.append(h)

        async def attach(h: Reattach) -> None:
            try:
                opened.append((h, await self._open_runner(h.thread_id, None, h, gate)))
            except Exception as exc:
                await failing(h, exc)

        async def resume(h: Reattach, runner: SessionRunner) -> None:
            try:
                await self._resume_held(h, runner)
            except Exception as exc:
                await failing(h, exc)

        held, failed = await self._reattach_shared(held)
        try:
            async with trio.open_nursery() as nursery:
                for h in held:
                    nursery.start_soon(attach, h)
        finally:
            gate.set()
        if self.codex_pool is not None:
            self.codex_pool.drop_unclaimed()
        async with trio.open_nursery() as nursery:
            for h, runner in opened:
                nursery.start_soon(resume, h, runner)
        return failed

    async def _reattach_shared(self, held: list[Reattach]) -> tuple[list[Reattach], list[Reattach]]:
        """Attach once to each held shared process (its threads' members made ready);
        returns what is left to reattach and what failed (their holders told to stop)."""
        shared = [h for h in held if shared_key(h.paths) is not None]
        if not shared:
            return held, []
        if self.codex_pool is None:
            failed = shared
        else:
            failed = await self.codex_pool.reattach_holders(shared)
        for h in failed:
            await self.core.note(
                h.session.id,
                "warning",
                "reattach_failed",
                "its shared codex process could not be reattached to "
                "(providers.codex.max_threads_per_process is 1, or its holder is gone)",
            )
            stop_holder(h.paths, h.state.holder_pid, h.state.holder_started_at)
        return [h for h in held if h not in failed], failed

    async def reattach(self, held: Reattach) -> SessionRunner:
        """Pick up a runtime a holder kept across a daemon restart (before the API serves).

        Its turn goes on where the log left it; once it ends, the thread's queued runs
        are dispatched as after any turn.
        """
        runner = await self._open_runner(held.thread_id, None, held)
        await self._resume_held(held, runner)
        return runner

    async def _resume_held(self, held: Reattach, runner: SessionRunner) -> None:
        """A reattached runner's turn goes on: sent if the provider never got it, and the
        thread's queued runs dispatched once it ends."""
        assert self._nursery is not None
        if held.unsent and held.turn is not None:
            run = self.reader.get(Run, held.turn.run_id)
            if run is not None:
                log.info(
                    "thread %s: sending run %s, begun before the restart", held.thread_id, run.id
                )
                pt_id = held.binding.provider_thread_id
                handoff = None if pt_id is None else begun_handoff(self.reader, held.turn, pt_id)
                await runner.start_turn(
                    run.id, self._user_text(run), turn=held.turn, handoff=handoff
                )

        async def then_dispatch() -> None:
            if held.turn is not None:
                # An idle runtime has no turn to end: its turn event is never set, and
                # the thread's queued runs would wait for it until the runtime exits.
                await runner.wait_turn()
            self.kick(held.thread_id)

        self._nursery.start_soon(then_dispatch)

    async def _open_runner(
        self,
        thread_id: str,
        run_id: str | None,
        held: Reattach | None = None,
        gate: trio.Event | None = None,
    ) -> SessionRunner:
        assert self._nursery is not None
        thread = self.reader.get(AppThread, thread_id)
        if thread is None:
            raise SessionFailed(f"no thread {thread_id}")
        kind: ProviderKind = thread.default_provider
        settings = self.providers.get(kind)
        if settings is None:
            raise SessionFailed(f"no provider {kind!r} is configured")
        runner = SessionRunner(
            core=self.core,
            reader=self.reader,
            thread_id=thread_id,
            provider=kind,
            adapter=self.adapter_factory(kind),
            config=runtime_config(
                kind,
                settings,
                cwd=thread.cwd,
                model=thread.model_selection.model,
                runtime_mode=thread.runtime_mode,
            ),
            first_run_id=run_id,
        )
        if self.raw_factory is not None:
            runner.raw_factory = self.raw_factory
        runner.recover_runs = self.recover_runs
        runner.delta_handoff_limit = self.delta_handoff_limit
        runner.launcher_factory = self.launcher_factory
        if kind in self.shared_kinds and self.codex_pool is not None and held is None:
            runner.launcher_factory = self.codex_pool.launcher
        if held is not None:
            runner.reattach = held
            pool = self.codex_pool
            if pool is not None and shared_key(held.paths) is not None:
                shared = pool.reattach_launcher(held)
                runner.launcher_factory = lambda kind, nursery: shared
            else:
                runner.launcher_factory = lambda kind, nursery: ReattachLauncher(
                    nursery, held.paths, held.committed, gate
                )
        runner.on_turn_ending = self._checkpoint_at_barrier
        runner.on_subagent_ended = self.checkpointer.after_subagent
        runner.stall_after_s = self.stall_after_s
        runner.stall_timeout_s = self.stall_timeout_s
        self.runners[thread_id] = runner
        self._release_done[runner] = trio.Event()
        try:
            await self._nursery.start(self._supervise, runner)
        except BaseException:
            self.runners.pop(thread_id, None)
            self._release_done.pop(runner, None)
            raise
        return runner

    async def _supervise(
        self, runner: SessionRunner, *, task_status: trio.TaskStatus[None]
    ) -> None:
        async def started_run(*, task_status: trio.TaskStatus[SessionRunner]) -> None:
            await runner.run(task_status=task_status)

        started = False
        try:
            async with trio.open_nursery() as inner:
                await inner.start(started_run)
                task_status.started()
                started = True
        except Exception as exc:  # a runner's bug must not take the daemon down
            failed = _session_failed(exc)
            if not started:
                if failed is None:
                    # Not an adapter or OS error (an embedded NUL byte in the cwd is
                    # a ValueError from the spawn): still this session's failure to
                    # start, never the daemon's. ``_dispatch`` fails the run with it.
                    log.exception("session runner for %s failed to start", runner.thread_id)
                    cause = _unwrapped(exc)
                    failed = SessionFailed(
                        f"{runner.provider} runtime failed to start: "
                        f"{type(cause).__name__}: {cause}"
                    )
                    await self.core.note(runner.session_id, "error", "runner_failed", str(failed))
                # The runner's own nurseries wrap it: re-raise it bare for ``_dispatch``.
                raise failed from None
            log.exception("session runner for %s failed", runner.thread_id)
            await self.core.note(
                runner.session_id, "error", "runner_failed", f"{type(exc).__name__}: {exc}"
            )
        finally:
            if self.runners.get(runner.thread_id) is runner:
                del self.runners[runner.thread_id]
            reason = runner.stop_reason
            exit_event = runner.exit_event
            # A runtime that never started is counted once, by ``_dispatch``.
            crashed = (
                started
                and reason is None
                and exit_event is not None
                and (exit_event.signal is not None or exit_event.code not in (0, None))
            )
            if crashed:
                self._record_crash(runner.thread_id, *_crashed_process(runner))
            if started:
                log.info(
                    "runtime of thread %s released (%s), session %s",
                    runner.thread_id,
                    reason or ("crash" if crashed else "exit"),
                    runner.session_id,
                )
            self.released += 1
            released = self._release_done.pop(runner, None)
            if released is not None:
                released.set()
            if self.on_release is not None:
                self.on_release(runner, reason or ("crash" if crashed else "exit"))
            # Work queued while it was dying is picked up by a new runtime.
            if self._nursery is not None and reason != "shutdown":
                self.kick(runner.thread_id)

    def _recent(self, crashes: _Crashes) -> deque[float]:
        now = trio.current_time()
        while crashes.times and now - crashes.times[0] > self.restart.window_s:
            crashes.times.popleft()
        return crashes.times

    def crashes_of(self, thread_id: str) -> _Crashes:
        """The restart ledger the thread's runtimes count in."""
        return self.crashes.setdefault(self._lineage.get(thread_id, thread_id), _Crashes())

    def _threads_known(self) -> set[str]:
        return {t for t in self.crashes if t not in self._lineage.values()} | set(self._lineage)

    def _record_crash(
        self, thread_id: str, lineage: str | None = None, process: str | None = None
    ) -> None:
        """A crash of the thread's runtime; on a shared process (``lineage``, ``process``)
        counted once for every thread on it, in the lineage's ledger."""
        if lineage is not None:
            self._lineage[thread_id] = lineage
        crashes = self.crashes_of(thread_id)
        if process is not None:
            if process in crashes.seen:
                return
            crashes.seen.add(process)
        crashes.times.append(trio.current_time())
        if len(self._recent(crashes)) >= self.restart.intensity:
            crashes.held = True

    def _release_hold(self, thread_id: str) -> None:
        """A user sending again is the user acting: the intensity count starts over."""
        crashes = self.crashes.get(self._lineage.get(thread_id, thread_id))
        if crashes is not None and crashes.held:
            crashes.held = False
            crashes.times.clear()

    async def _fail_run(self, thread_id: str, run_id: str, reason: str) -> None:
        await self.core.fail_queued_run(run_id, reason)

    # -- the idle reaper --------------------------------------------------------

    async def _reap_loop(self) -> None:
        while True:
            # Read each time: the policy may be tuned while running (drills, tests).
            r = self.reaper
            await trio.sleep(min(r.sweep_interval_s, max(0.05, r.idle_timeout_s / 6)))
            self.reap_idle()

    def reap_idle(self) -> list[str]:
        """Release runtimes idle past the timeout; returns the threads released."""
        now = trio.current_time()
        reaped = []
        for thread_id, runner in list(self.runners.items()):
            idle = now - runner.last_activity
            # Being dispatched is work: from a send's claim of the thread to its
            # turn/start the runtime has no turn yet, and a sweep there would stop it
            # under the run it was just given (which ended "interrupted", saying nothing).
            busy = runner.busy or self.dispatching(thread_id) or self._has_pending(runner)
            limit = self.reaper.background_cap_s if busy else self.reaper.idle_timeout_s
            if idle >= limit and not runner.exited.is_set():
                log.info(
                    "reaping the idle runtime of thread %s (idle %.0fs%s)",
                    thread_id,
                    idle,
                    ", past the background cap" if busy else "",
                )
                runner.stop("background_cap" if busy else "idle_timeout")
                reaped.append(thread_id)
        return reaped

    def dispatching(self, thread_id: str) -> bool:
        """A run of the thread is being handed to its runtime, runs, or has just ended
        and its dispatcher has not yet looked for the next one (the reaper waits)."""
        return thread_id in self._dispatching

    def _has_pending(self, runner: SessionRunner) -> bool:
        return bool(self.reader.pending_requests(runner.thread_id))

    def begin_drain(self) -> None:
        """A graceful stop begins: running runs go on, nothing new starts or is accepted."""
        self.draining = True

    @property
    def running_runs(self) -> int:
        """Threads with a run being dispatched or running that could end on its own: what
        a drain waits for. A turn waiting for the user's answer to a request does not
        count: it ends only when answered, and holding the stop for it would only delay
        its interrupt by the whole drain."""
        return sum(
            1
            for thread_id in self._dispatching
            if (runner := self.runners.get(thread_id)) is None or not runner.waits_for_user()
        )

    def stop_all(self, reason: str = "shutdown") -> None:
        for runner in list(self.runners.values()):
            runner.stop(reason)

    def leave_held(self) -> int:
        """A daemon exit: held runtimes are left to their holders (the next daemon
        reattaches); returns how many. The others are stopped by :meth:`stop_all`."""
        left = sum(1 for runner in list(self.runners.values()) if runner.leave_held())
        if self.codex_pool is not None:
            self.codex_pool.leave_held()
        return left

    def binding_for(self, thread_id: str) -> SessionBinding | None:
        runner = self.runners.get(thread_id)
        return None if runner is None else runner.binding


def _crashed_process(runner: SessionRunner) -> tuple[str | None, str | None]:
    """The lineage and identity of a shared process a runner was on (else Nones)."""
    child = runner.launcher.current if runner.launcher is not None else None
    if not isinstance(child, SharedChild):
        return None, None
    mux = child.member.mux
    return f"shared:{mux.key}", f"{mux.name}:{child.pid}"


__all__ = ["ReaperPolicy", "RestartPolicy", "SessionManager"]
