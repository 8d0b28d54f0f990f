"""The composition root: the one core module that wires store, adapters and supervisor.

``t3orch serve``, ``t3orch demo`` and ``t3orch drill`` start the daemon through
:func:`run_daemon`. Order matters and is the contract with systemd: open the
store, kill leftovers and settle a dead daemon's records, start the session
manager and the API, and only then say READY.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio

from adapters.diagnostics import RotatingRawLog
from adapters.ownership import this_process
from adapters.protocol import RawFrameSink
from supervisor.holder.client import holder_launchers, stop_all_holders
from supervisor.holder.layout import describe_held, held_dirs, held_root, prune_held
from supervisor.holder.wire import Kind, iter_file
from supervisor.manager import ReaperPolicy, RestartPolicy, SessionManager
from supervisor.providers import STANDIN_TRANSCRIPT, ProviderSettings
from supervisor.reattach import find_held, held_of
from supervisor.shared_codex import HolderSettings, held_with_threads
from supervisor.startup import settle_previous_run
from supervisor.systemd import Notifier
from t3orch import timeline
from t3orch.api.auth import load_or_create_token
from t3orch.api.runner import serve_api
from t3orch.config import Config
from t3orch.core import Core, open_core
from t3orch.daemonlog import raw_dir
from t3orch.domain.provider import ProcessOwner
from t3orch.domain.vocab import ProviderKind
from t3orch.fleet.members import Membership, host_name, load_or_create_daemon_id
from t3orch.fleet.routing import RoutedOperations
from t3orch.process_tuning import raise_descriptor_limit
from t3orch.provider_versions import probe_all, t3orch_version
from t3orch.state import prepare_state_dir, state_dir_identity
from t3orch.store.errors import StateDirInvalid, StoreError
from t3orch.store.interface import Decision
from t3orch.store.open import is_postgres_url, open_reader, open_registry

log = logging.getLogger("t3orch.daemon")


def owner_token() -> str:
    """This daemon's owner mark, as its providers carry it (held ones too)."""
    return this_process().token()


#: Bound on stopping every runtime at shutdown (each interrupts its turn, ≤ 3 s, and
#: runs the stop ladder, ≤ 10 s, all at once). After the drain (``daemon.stop_drain_s``).
SHUTDOWN_GRACE_S = 15.0
#: How often the watchdog's writer probe looks whether the writer waits for its store.
STALL_LOOK_S = 0.5


@attrs.define
class Daemon:
    core: Core
    manager: SessionManager
    state_dir: Path
    port: int | None
    reconciled: dict[str, int]
    notifier: Notifier = attrs.field(factory=Notifier)
    #: Set by a second stop signal: the drain ends at once.
    skip_drain: trio.Event = attrs.field(factory=trio.Event)
    #: While a drain runs: what it waits for (the STATUS= line).
    draining: str | None = None

    async def drain(self, drain_s: float) -> None:
        """Let running turns end, for up to ``drain_s``; nothing new starts meanwhile.

        Ends early once no run is left, or when :attr:`skip_drain` is set (a second
        SIGTERM/SIGINT). Whatever still runs after it is interrupted by :meth:`shutdown`.
        """
        self.manager.begin_drain()
        deadline = trio.current_time() + drain_s
        last = None
        with trio.move_on_at(deadline):
            while (left := self.manager.running_runs) and not self.skip_drain.is_set():
                if left != last:
                    last = left
                    remaining = deadline - trio.current_time()
                    self.draining = (
                        f"stopping: waiting up to {remaining:.0f}s for {left} running "
                        f"turn{'s' if left != 1 else ''} to end (a second SIGTERM skips this)"
                    )
                    self.notifier.status(self.draining)
                    log.info("%s", self.draining)
                with trio.move_on_after(0.05):
                    await self.skip_drain.wait()
        left = self.manager.running_runs
        if left:
            why = "skipped" if self.skip_drain.is_set() else f"over after {drain_s:g}s"
            log.warning("drain %s: interrupting %d running turn(s)", why, left)
        self.draining = None

    async def shutdown(
        self, reason: str = "shutdown", *, drain_s: float = 0.0, leave_held: bool = False
    ) -> None:
        """Stop every runtime through its stop ladder, bounded; the store stays open.

        ``drain_s`` > 0: first let running turns end for up to that long (:meth:`drain`).
        """
        with trio.CancelScope(shield=True):
            if leave_held and (left := self.manager.leave_held()):
                # Their turns go on in their holders; the next daemon picks them up.
                log.info("leaving %d held runtime(s) to their holders", left)
            if drain_s > 0:
                await self.drain(drain_s)
            self.notifier.status("stopping: interrupting what still runs, stopping runtimes")
            self.manager.stop_all(reason)
            with trio.move_on_after(SHUTDOWN_GRACE_S):
                while self.manager.runners:  # noqa: ASYNC110 - runners leave by themselves
                    await trio.sleep(0.02)
            if self.manager.runners:
                log.error(
                    "%d runtimes did not stop in %.0fs", len(self.manager.runners), SHUTDOWN_GRACE_S
                )

    def status_line(self) -> str:
        if self.draining is not None:
            return self.draining
        return (
            f"{len(self.manager.runners)} live sessions, "
            f"{self.core.writer.stats.events} events written"
        )


def provider_settings(config: Config) -> dict[str, ProviderSettings]:
    p = config.providers
    out: dict[str, ProviderSettings] = {}
    if p.codex.command:
        out["codex"] = ProviderSettings(
            command=p.codex.command,
            env=p.codex.env,
            home=str(p.codex.home) if p.codex.home else None,
            model=p.codex.model,
        )
    if p.claude.command:
        out["claude"] = ProviderSettings(
            command=p.claude.command, env=p.claude.env, model=p.claude.model
        )
    transcript = str(p.standin.transcript or STANDIN_TRANSCRIPT)
    out["standin"] = ProviderSettings(
        command=[*p.standin.command, transcript, "--loop-turns"], model="standin"
    )
    return out


@contextmanager
def exclusive_state_dir(state_dir: Path) -> Iterator[None]:
    """One daemon per store: a second one would fight over the runtimes and the log."""
    lock_path = state_dir / "daemon.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateDirInvalid(
                f"another t3orch daemon is running on {state_dir} (lock {lock_path} is held)"
            ) from None
        yield
    finally:
        os.close(fd)


def process_owner(state_dir: Path) -> ProcessOwner:
    """This daemon, as recorded with every provider process it spawns."""
    me = this_process()
    return ProcessOwner(
        daemon_pid=me.pid,
        daemon_started_at=me.started_at,
        state_dir=str(state_dir.resolve()),
        state_dir_id=state_dir_identity(state_dir),
    )


def _api_url(host: str, port: int) -> str:
    return f"ws://[{host}]:{port}" if ":" in host else f"ws://{host}:{port}"


def _write_status_file(state_dir: Path, data: dict[str, Any]) -> None:
    path = state_dir / "daemon.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


async def run_daemon(
    config: Config,
    state_dir: Path,
    *,
    notifier: Notifier | None = None,
    task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until cancelled; teardown stops every runtime (bounded) before the store closes."""
    # Everything the daemon writes (store, raw frames, token) is the user's alone.
    os.umask(0o077)
    timeline.start()
    db = prepare_state_dir(state_dir, create=True)
    notifier = notifier or Notifier()
    d = config.daemon

    def raw_sink(kind: ProviderKind, session_id: str) -> RawFrameSink:
        return RotatingRawLog(raw_dir(state_dir), kind, session_id)

    with exclusive_state_dir(state_dir), ExitStack() as stack:
        owner = process_owner(state_dir)
        daemon_id = load_or_create_daemon_id(state_dir)
        notifier.status("opening the store")
        async with open_core(config.store.url or db, synchronous=d.synchronous) as core:
            reg = stack.enter_context(closing(open_registry(core.location)))
            core.service.process_owner = owner
            # What this daemon creates is its own, and it settles only what it owned.
            core.service.daemon_id = daemon_id
            membership = Membership.starting(
                reg,
                daemon_id,
                host=host_name(d.host_name),
                version=t3orch_version(),
                token=load_or_create_token(state_dir),
                heartbeat_s=d.heartbeat_s,
                timeout_s=d.heartbeat_timeout_s,
            )
            if is_postgres_url(core.location):
                # Before settling anything: a live twin would have its runs settled here.
                await membership.check_alone(state_dir)
            notifier.status("settling the previous run")
            # Runtimes whose holders outlived the previous daemon are picked up, not settled.
            held = find_held(core.reader, state_dir, core.service.daemon_id)
            reconciled = await settle_previous_run(
                core.service, core.reader, me=owner, state_dir=state_dir, held=held
            )
            log.info("settled what the previous daemon left: %s", _counts(reconciled))
            manager = SessionManager(
                core=core.service,
                reader=core.reader,
                providers=provider_settings(config),
                raw_factory=raw_sink,
                restart=RestartPolicy(
                    intensity=d.restart_intensity,
                    window_s=d.restart_period_s,
                    backoff_initial_s=d.backoff_initial_s,
                    backoff_max_s=d.backoff_max_s,
                ),
                reaper=ReaperPolicy(idle_timeout_s=d.idle_timeout_s),
                recover_runs=d.recover_interrupted_runs,
                delta_handoff_limit=d.max_delta_handoff_chars,
                stall_after_s=d.stall_warning_s,
                stall_timeout_s=d.stall_timeout_s or None,
                codex_threads_per_process=config.providers.codex.max_threads_per_process,
                # Live restore holds a shared process under one holder (issue 21).
                codex_holders=(
                    HolderSettings(held_root(state_dir), d.reattach_grace_s, owner_token())
                    if d.reattach_grace_s > 0
                    else None
                ),
                state_dir=state_dir,
                launcher_factory=(
                    holder_launchers(held_root(state_dir), d.reattach_grace_s, owner_token())
                    if d.reattach_grace_s > 0
                    else None
                ),
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                if held:
                    notifier.status(f"reattaching {len(held)} held runtime(s)")
                    started = trio.current_time()
                    failed = await manager.reattach_all(held)
                    kept = [h for h in held if h not in failed]
                    if failed:
                        await core.service.reconcile("reattach_failed", None, held_of(kept))
                    reconciled["reattached"] = len(kept)
                    log.info(
                        "reattached %d held runtime(s) in %.3fs (%d could not be)",
                        len(kept),
                        trio.current_time() - started,
                        len(failed),
                    )
                # What holders that are gone journaled is settled by now: their files go.
                prune_held(state_dir, frozenset(h.paths.holder_id for h in held))
                try:
                    routed = RoutedOperations(manager, membership, core.reader)
                    endpoints = await nursery.start(
                        partial(serve_api, state_dir=state_dir), core, routed, d
                    )
                    port = endpoints.port
                    membership.listening(_api_url(d.advertise_host or d.api_host, port))
                    await nursery.start(membership.run)
                    daemon = Daemon(core, manager, state_dir, port, reconciled, notifier)
                    _write_status_file(
                        state_dir,
                        {
                            "pid": os.getpid(),
                            "port": port,
                            "reconciled": reconciled,
                            # A copy of this dir carries it: the copy's daemon tells by it.
                            "owner": msgspec.to_builtins(owner),
                        },
                    )
                    notifier.ready(f"ready: {daemon.status_line()}")
                    nursery.start_soon(notifier.watchdog, _writer_probe(core), daemon.status_line)
                    nursery.start_soon(_probe_provider_versions, manager.providers)
                    task_status.started(daemon)
                    await trio.sleep_forever()
                finally:
                    notifier.stopping()
                    # A no-op after ``serve``'s own shutdown; on cancellation (teardown)
                    # there is no drain: runtimes are stopped at once.
                    await Daemon(core, manager, state_dir, None, reconciled, notifier).shutdown()
                    nursery.cancel_scope.cancel()


async def _probe_provider_versions(providers: dict[str, ProviderSettings]) -> None:
    """``--version`` of each provider binary, once, off the event loop; ``status`` shows it."""
    commands = {kind: list(s.command) for kind, s in providers.items()}
    for found in await trio.to_thread.run_sync(probe_all, commands):
        if found.error:
            log.warning("%s: %s", found.provider, found.error)
        elif warning := found.warning():
            log.warning("%s", warning)


def _counts(counts: dict[str, int]) -> str:
    """``run 2, turn_item 5`` (the non-zero ones), or ``nothing``."""
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "nothing"


def _writer_probe(core: Core) -> Callable[[], Awaitable[bool]]:
    async def alive() -> bool:
        # A transaction that writes nothing still proves the writer thread turns over;
        # so does its waiting for a stalled store (no room, no server), retrying every
        # second: a restart would not bring the store back, and would stop the runtimes
        # that are not held.
        committed = trio.Event()

        async def probe() -> None:
            await core.writer.submit(lambda view: Decision([]))
            committed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe)
            while not committed.is_set() and core.writer.stalled is None:
                with trio.move_on_after(STALL_LOOK_S):
                    await committed.wait()
            nursery.cancel_scope.cancel()
        return True

    return alive


async def serve_until_signalled(config: Config, state_dir: Path) -> None:
    """``t3orch serve``: run the daemon; SIGTERM or SIGINT is a graceful stop.

    The stop first lets running turns end (``daemon.stop_drain_s``); a second
    SIGTERM or SIGINT skips what is left of that wait.
    """
    raise_descriptor_limit()
    drain_s = config.daemon.stop_drain_s
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            daemon: Daemon | None = None

            async def stop(up: Daemon) -> None:
                # Any exit of `serve` leaves held runtimes to their holders (issue 20):
                # stopping the agents is `t3orch stop-agents` (docs/systemd.md).
                await up.shutdown(drain_s=drain_s, leave_held=True)
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                stopping = False
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if daemon is None:
                        # Still starting (a store waiting for room on a full disk, say):
                        # the start is cancelled, which is its teardown.
                        log.info("%s: stopping before serving", name)
                        nursery.cancel_scope.cancel()
                        return
                    if not stopping:
                        stopping = True
                        daemon.notifier.stopping("stopping: letting running turns end")
                        log.info(
                            "%s: stopping; running turns get up to %gs to end (%s again "
                            "interrupts them now)",
                            name,
                            drain_s,
                            name,
                        )
                        nursery.start_soon(stop, daemon)
                    else:
                        log.info("%s again: interrupting running turns now", name)
                        daemon.skip_drain.set()

            nursery.start_soon(watch)
            daemon = await nursery.start(run_daemon, config, state_dir)
            log.info("serving %s (api port %s, pid %d)", state_dir, daemon.port, os.getpid())


def stop_agents(state_dir: Path, within: float = 20.0) -> tuple[list[int], list[int]]:
    """``t3orch stop-agents``: stop every provider a holder keeps for ``state_dir``.

    Each holder gets SIGTERM and stops its provider through the stop ladder (journaled);
    returns (holders stopped, holders still running after ``within`` seconds).
    """
    import time

    import psutil

    stopped = stop_all_holders(state_dir)
    procs = []
    for pid in stopped:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    deadline = time.monotonic() + within
    alive = procs
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.05)
    return stopped, [p.pid for p in alive]


def held_runtimes(state_dir: Path) -> list[dict[str, object]]:
    """``t3orch held``: what holders keep for ``state_dir`` (no daemon needed), with the
    threads of each (a shared process's holder keeps several), as the log has them."""
    held = describe_held(state_dir)
    db = state_dir / "events.sqlite3"
    if not held or not db.exists():
        return held
    try:
        store = open_reader(db)
    except StoreError as exc:
        log.warning("the threads of held runtimes are not shown: %s", exc)
        return held
    try:
        with store.snapshot():
            return held_with_threads(held, store)
    finally:
        store.close()


def journal_coverage(state_dir: Path, committed: dict[str, int]) -> tuple[int, int]:
    """The provider frames the holders of ``state_dir`` journaled, and how many of them
    lie at or below the offset the log committed for their holder (``committed``)."""
    journaled = covered = 0
    for paths in held_dirs(state_dir):
        with contextlib.suppress(OSError):
            for _, record in iter_file(os.fspath(paths.journal)):
                if record.kind is Kind.OUT:
                    journaled += 1
                    covered += record.offset <= committed.get(paths.holder_id, 0)
    return journaled, covered
