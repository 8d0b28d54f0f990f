"""The daemon's side of a holder: start one, attach to one, and talk to its provider.

:class:`HeldProcess` is a :class:`~adapters.transport.ProviderProcess` (with
``receive_lines``), so an adapter reads and writes a held provider as it does a
child: how a provider runs is not its business. It also has what the stop
ladder uses of a :class:`~adapters.process.ChildProcess` (``status``,
``signal_group``, ``stop``). Records come from the holder's journal, so each
line has its offset (:attr:`HeldProcess.delivered`: the last line handed out).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec
import trio

from adapters.diagnostics import redact_stderr
from adapters.offset_lines import Input, OffsetLines
from adapters.ownership import OWNER_ENV, OwnerMark
from adapters.process import STDERR_TAIL_BYTES, StopResult, stop_ladder
from adapters.transport import LEFT_RUNNING, ExitStatus, LaunchSpec, OversizedLine
from supervisor.holder.layout import HeldPaths, HeldSpec, held_dirs, socket_address
from supervisor.holder.wire import (
    PROTOCOL_VERSION,
    ExitRecord,
    Hello,
    Kind,
    Note,
    ProtocolError,
    Record,
    RecordReader,
    RecordSender,
    Welcome,
    encode,
    encode_json,
)
from supervisor.launcher import LauncherFactory, RecordingLauncher, SupervisedLauncher
from supervisor.providers import SCRUBBED_ENV
from t3orch import timeline
from t3orch.domain.provider import HolderRef
from t3orch.domain.vocab import ProviderKind

log = logging.getLogger(__name__)

#: The environment variable naming the holder a process is (the orphan sweep reads it).
HOLDER_ENV = "T3ORCH_HOLDER"
#: How long a holder may take to start its provider and say so.
START_TIMEOUT_S = 30.0
#: Lines buffered before the socket is not read further (the adapter's backpressure).
HIGH_WATER_LINES = 4096
_ROOT = str(Path(__file__).resolve().parents[2])


class HolderError(Exception):
    """A holder could not be started or attached to; the message says why."""


async def start_holder(root: Path, spec: LaunchSpec, *, grace_s: float, owner: str) -> HeldPaths:
    """Start a holder for ``spec`` under ``root`` (``<state-dir>/held``); return its paths
    once its provider runs. A provider that cannot be started raises its ``OSError``."""
    paths, popen, ready_read = _spawn_holder(root, spec, grace_s, owner)
    stream = trio.lowlevel.FdStream(ready_read)
    line = b""
    try:
        with trio.move_on_after(START_TIMEOUT_S):
            while not line.endswith(b"\n"):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                line += chunk
    finally:
        await stream.aclose()
        # The first process forks the holder and exits at once.
        await trio.to_thread.run_sync(popen.wait)
    try:
        ready = msgspec.json.decode(line)
    except msgspec.DecodeError:
        tail = _tail(paths.log)
        shutil.rmtree(paths.dir, ignore_errors=True)
        raise HolderError(f"the holder did not start: {tail or 'no output'}") from None
    if isinstance(ready, dict) and "error" in ready:
        shutil.rmtree(paths.dir, ignore_errors=True)
        raise OSError(ready.get("errno"), ready["error"], ready.get("filename"))
    return paths


def _spawn_holder(
    root: Path, spec: LaunchSpec, grace_s: float, owner: str
) -> tuple[HeldPaths, subprocess.Popen[bytes], int]:
    """The holder's directory and spec, and its first process; returns the ready pipe."""
    paths = HeldPaths(root / secrets.token_hex(6))
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths.dir.mkdir(mode=0o700)
    held = HeldSpec(
        holder_id=paths.holder_id,
        argv=list(spec.argv),
        env=dict(spec.env),
        cwd=spec.cwd,
        max_line_bytes=spec.max_line_bytes,
        owner=owner,
        grace_s=grace_s,
    )
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    env[OWNER_ENV] = owner
    env[HOLDER_ENV] = paths.holder_id
    ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
    try:
        with open(paths.log, "ab") as log_file:
            popen = subprocess.Popen(
                [sys.executable, "-m", "supervisor.holder", "--dir", os.fspath(paths.dir)],
                # The spec (the provider's environment: its keys) goes through a pipe,
                # never into a file.
                stdin=subprocess.PIPE,
                stdout=ready_write,
                stderr=log_file,
                cwd=paths.dir,
                env=env,
                start_new_session=True,
            )
        assert popen.stdin is not None
        with popen.stdin:
            popen.stdin.write(msgspec.json.encode(held))
    except BaseException:
        os.close(ready_read)
        raise
    finally:
        os.close(ready_write)
    return paths, popen, ready_read


def _tail(path: Path) -> str:
    try:
        return " ".join(path.read_text(errors="replace").split()[-40:])
    except OSError:
        return ""


async def attach(paths: HeldPaths, after: int) -> HeldProcess:
    """Connect to a live holder and say hello: every record after ``after`` follows."""
    try:
        with socket_address(paths.socket) as address:
            stream = await trio.open_unix_socket(address)
    except OSError as exc:
        raise HolderError(f"holder {paths.holder_id}: cannot connect: {exc}") from exc
    try:
        await stream.send_all(encode_json(Kind.HELLO, Hello(PROTOCOL_VERSION, after)))
        reader = RecordReader(stream)
        with trio.move_on_after(START_TIMEOUT_S):
            first = await reader.receive_one()
            if first is not None and first.kind == Kind.WELCOME:
                welcome = msgspec.json.decode(first.payload, type=Welcome)
                return HeldProcess(paths, welcome, stream, reader, after)
            if first is not None and first.kind == Kind.REFUSED:
                raise HolderError(first.payload.decode(errors="replace"))
        raise HolderError(f"holder {paths.holder_id} did not welcome the daemon")
    except BaseException:
        with trio.CancelScope(shield=True):
            await stream.aclose()
        raise


class HeldProcess(OffsetLines):
    """A provider run by a holder, seen through its socket (see the module docstring).

    Its lines keep their journal offsets (:class:`~adapters.offset_lines.OffsetLines`:
    ``delivered``, ``on_delivered``, ``mute_through``, ``on_mute``, ``on_input``; the
    replayed inputs are the journal's ``IN`` records up to the welcome: a reattaching
    adapter rebuilds its state, pending call ids, from both)."""

    def __init__(
        self,
        paths: HeldPaths,
        welcome: Welcome,
        stream: trio.SocketStream,
        reader: RecordReader,
        after: int,
    ) -> None:
        super().__init__(after)
        self.paths = paths
        self.welcome = welcome
        self._stream = stream
        self._reader = reader
        #: The journal offset of the last record received.
        self.offset = after
        self._eof = False
        self._status: ExitStatus | None = None
        self._lost: str | None = None
        self._arrived = trio.Event()
        self._taken = trio.Event()
        self._reaped = trio.Event()
        #: Set by :meth:`leave_running`: the daemon goes, the provider stays.
        self._left = trio.Event()
        self._stdin_closed = False
        #: What the daemon writes to the holder: at once, no task's wake-up between.
        self._sender = RecordSender(stream)
        self._stderr_tail = bytearray()
        self._stderr_tees: list[Callable[[bytes], None]] = []
        #: The holder's own steps (grace expired, stopped by a rung).
        self.notes: list[Note] = []
        #: Records are read only once this is set (a reattaching daemon attaches to
        #: every holder before it replays any journal).
        self.read_gate: trio.Event | None = None

    # -- ProviderProcess -------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.welcome.provider_pid

    @property
    def pgid(self) -> int:
        return self.welcome.provider_pid

    @property
    def holder_id(self) -> str:
        return self.welcome.holder_id

    @property
    def status(self) -> ExitStatus | None:
        return self._status

    async def send_line(self, line: bytes) -> None:
        if b"\n" in line:
            raise ValueError("a frame must not contain a newline")
        if self._stdin_closed:
            raise trio.ClosedResourceError("stdin was closed")
        if self._status is not None or self._lost is not None:
            raise trio.BrokenResourceError(f"provider pid {self.pid} has exited")
        self._queue(encode(Kind.WRITE, 0, line))
        await trio.lowlevel.checkpoint()

    async def receive_line(self) -> bytes | OversizedLine | None:
        lines = await self._receive(1)
        return lines[0] if lines else None

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        return await self._receive(None)

    async def receive_lines_with_offsets(self) -> list[tuple[int, bytes | OversizedLine]]:
        """As :meth:`receive_lines`, each line with its journal offset (a shared process's
        multiplexer routes a read's worth at once, each line keeping its own)."""
        offsets: list[int] = []
        lines = await self._receive(None, offsets)
        return list(zip(offsets, lines, strict=True))

    async def _receive(
        self, limit: int | None, offsets: list[int] | None = None
    ) -> list[bytes | OversizedLine]:
        self.report_delivered()
        if self.on_mute is not None and self.delivered >= self.mute_through:
            # The lines the log has are mapped: what the adapter does from now on (a
            # Claude answer's RequestResolved while the CLI waits) is news.
            self.on_mute(False)
        while True:
            while not self._lines:
                if self._eof:
                    if self.on_mute is not None:
                        self.on_mute(False)  # a replay that ends muted: the exit is news
                    await trio.lowlevel.checkpoint()
                    return []
                await self._wait_lines()
            batch = self._next_batch(limit, offsets)
            self._wake_reader()
            if batch:
                return batch

    @property
    def replayed(self) -> bool:
        """Every line and input journaled before this attach has been handed out (a
        reattaching adapter holds back what it would answer by itself until then: the
        journal may still say an earlier daemon answered it)."""
        journaled = self.welcome.journaled
        pending = self._line_offsets
        return self.offset >= journaled and not (pending and pending[0] <= journaled)

    async def close_stdin(self) -> None:
        if not self._stdin_closed and not self._left.is_set():
            self._stdin_closed = True
            self._queue(encode(Kind.CLOSE_STDIN, 0))
        await trio.lowlevel.checkpoint()

    async def wait(self) -> ExitStatus:
        """The provider's exit; after :meth:`leave_running`, at once ``LEFT_RUNNING``."""
        if not self._reaped.is_set():
            async with trio.open_nursery() as nursery:

                async def first(event: trio.Event) -> None:
                    await event.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(first, self._reaped)
                nursery.start_soon(first, self._left)
        if self._status is None:
            return LEFT_RUNNING
        return self._status

    def leave_running(self) -> None:
        """The daemon goes away and leaves the provider to its holder (and its grace):
        from now on nothing is sent that would stop it, and :meth:`wait` returns."""
        self._left.set()

    def stderr_tail(self) -> str:
        text = redact_stderr(bytes(self._stderr_tail))
        if self._lost is not None:
            text += f"\n{self._lost}"
        return text[-STDERR_TAIL_BYTES:]

    def tee_stderr(self, sink: Callable[[bytes], None]) -> None:
        """Hand ``sink`` what stderr held so far and every later chunk (as a child does:
        what the provider wrote before the daemon's log file was set up is in it too)."""
        if self._stderr_tail:
            sink(bytes(self._stderr_tail))
        self._stderr_tees.append(sink)

    async def kill(self) -> None:
        if not self._left.is_set():
            self.signal_group(signal.SIGKILL)
        await trio.lowlevel.checkpoint()

    # -- what the stop ladder uses -------------------------------------------------

    def signal_group(self, sig: int) -> bool:
        """Ask the holder to signal the provider's group; False once it has exited."""
        if self._status is not None or self._left.is_set():
            return False
        self._queue(encode(Kind.SIGNAL, 0, struct.pack("<i", int(sig))))
        return True

    async def stop(
        self, grace_close: float = 2.0, grace_term: float = 2.0, grace_kill: float = 5.0
    ) -> StopResult:
        """The stop ladder, as :meth:`ChildProcess.stop`, through the holder."""
        return await stop_ladder(self, grace_close, grace_term, grace_kill)

    # -- its life on the daemon's side -----------------------------------------

    async def serve(
        self, *, task_status: trio.TaskStatus[HeldProcess] = trio.TASK_STATUS_IGNORED
    ) -> ExitStatus:
        """Read the holder until the provider's exit; use with ``nursery.start``.

        Leaving after the exit releases the holder and removes its directory (the
        journal has been read to its end). Cancelled before it (the daemon goes
        away), the holder is only detached from: its provider lives on for its grace.
        """
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop)
                task_status.started(self)
                await self._read_loop()
                nursery.cancel_scope.cancel()
            assert self._status is not None
            return self._status
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self._leave()

    async def detach(self) -> None:
        """Leave the holder to its grace (a daemon that goes away)."""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            self._sender.hold(encode(Kind.DETACH, 0))
            await self._sender.drain()
        await self._stream.aclose()

    async def _leave(self) -> None:
        if self._status is None:
            await self.detach()
            return
        if self._lost is None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                self._sender.hold(encode(Kind.RELEASE, 0))
                await self._sender.drain()
                # The holder closes the connection once it has ended.
                with trio.move_on_after(1):
                    while await self._stream.receive_some(65536):
                        pass
        await self._stream.aclose()
        shutil.rmtree(self.paths.dir, ignore_errors=True)

    def _queue(self, data: bytes) -> None:
        timeline.stamp("holder.write")
        self._sender.push(data)

    async def _write_loop(self) -> None:
        try:
            await self._sender.run()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the read loop finds the holder gone

    async def _read_loop(self) -> None:
        if self.read_gate is not None:
            await self.read_gate.wait()
        try:
            while self._status is None:
                while len(self._lines) >= HIGH_WATER_LINES:
                    self._taken = trio.Event()
                    await self._taken.wait()
                records = await self._reader.receive()
                if not records:
                    raise ProtocolError("the holder closed the connection")
                self._take(records)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError, OSError) as exc:
            said = [n.detail for n in self.notes if n.event == "journal_failed" and n.detail]
            self._lost = (
                f"the holder (of provider pid {self.pid}) ended, stopping it: {said[-1]}"
                if said
                else f"the holder (of provider pid {self.pid}) went away: {exc}"
            )
            log.warning("%s", self._lost)
            self._eof = True
            # Its provider died with it (its parent-death signal).
            self._status = ExitStatus(code=None, signal=int(signal.SIGKILL))
        self._arrived.set()
        self._reaped.set()

    def _take(self, records: Iterable[Record]) -> None:
        arrived = False
        replaying = not self.replayed
        for record in records:
            self.offset = record.offset
            match record.kind:
                case Kind.OUT:
                    timeline.stamp("holder.read")
                    self._keep(record.payload, record.offset)
                    arrived = True
                case Kind.OVERSIZED:
                    (length,) = struct.unpack_from("<Q", record.payload)
                    self._keep(OversizedLine(length=length, head=record.payload[8:]), record.offset)
                    arrived = True
                case Kind.IN:
                    # Later ones are this daemon's own writes, journaled: nothing to learn.
                    if record.offset <= self.welcome.journaled:
                        self._keep(Input(record.payload), record.offset)
                        arrived = True
                case Kind.ERR:
                    self._keep_stderr(record.payload)
                case Kind.EOF:
                    self._eof = True
                    arrived = True
                case Kind.EXIT:
                    exit_record = msgspec.json.decode(record.payload, type=ExitRecord)
                    self._status = ExitStatus(code=exit_record.code, signal=exit_record.signal)
                    self._eof = True
                    arrived = True
                case Kind.NOTE:
                    note = msgspec.json.decode(record.payload, type=Note)
                    self.notes.append(note)
                    if note.event == "journal_stalled":
                        log.warning(
                            "the holder of provider pid %d: %s; the provider waits until it can",
                            self.pid,
                            note.detail,
                        )
                case _:
                    raise ProtocolError(f"a {record.kind.name} record from the holder")
        if arrived:
            self._arrived.set()
        if replaying and self.replayed and self.on_replayed is not None:
            # The replay ends on records that are not lines (stderr, notes): no read
            # hands out its end, so its watcher is told here.
            self.on_replayed()

    def _keep_stderr(self, chunk: bytes) -> None:
        self._stderr_tail += chunk
        if len(self._stderr_tail) > 2 * STDERR_TAIL_BYTES:
            cut = self._stderr_tail.find(b"\n", len(self._stderr_tail) - STDERR_TAIL_BYTES)
            del self._stderr_tail[: cut + 1 if cut >= 0 else -STDERR_TAIL_BYTES]
        for tee in self._stderr_tees:
            tee(chunk)

    async def _wait_lines(self) -> None:
        self._arrived = trio.Event()
        await self._arrived.wait()

    def _wake_reader(self) -> None:
        self._taken.set()


class _HeldLaunches:
    """What both held launchers share: the held processes they served, the last current."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self.children: list[HeldProcess] = []

    async def _serve(self, held: HeldProcess) -> HeldProcess:
        await self._nursery.start(held.serve)
        self.children.append(held)
        return held

    @property
    def current(self) -> HeldProcess | None:
        return self.children[-1] if self.children else None


class HolderLauncher(_HeldLaunches):
    """A :class:`~supervisor.launcher.SupervisedLauncher` whose providers run in holders.

    Each launch starts a holder under ``root`` and serves it in ``nursery``;
    cancelling the nursery detaches from the holders (their providers live on
    for ``grace_s``), an exit read to its end releases the holder.
    """

    def __init__(self, nursery: trio.Nursery, root: Path, grace_s: float, owner: str) -> None:
        super().__init__(nursery)
        self._root = root
        self._grace_s = grace_s
        self._owner = owner

    async def launch(self, spec: LaunchSpec) -> HeldProcess:
        paths = await start_holder(self._root, spec, grace_s=self._grace_s, owner=self._owner)
        return await self._serve(await attach(paths, 0))


class ReattachLauncher(_HeldLaunches):
    """The launcher of a reattaching runtime: its one "launch" attaches to the holder that
    kept the provider, replaying the journal from its start, muted through ``committed``;
    with ``gate``, not before it is set."""

    def __init__(
        self,
        nursery: trio.Nursery,
        paths: HeldPaths,
        committed: int,
        gate: trio.Event | None = None,
    ) -> None:
        super().__init__(nursery)
        self._paths = paths
        self._committed = committed
        self._gate = gate

    async def launch(self, spec: LaunchSpec) -> HeldProcess:
        if self.children:
            raise HolderError(f"holder {self._paths.holder_id}: its provider was reattached once")
        held = await attach(self._paths, 0)
        held.mute_through = self._committed
        held.read_gate = self._gate
        return await self._serve(held)


def holder_ref(held: HeldProcess) -> HolderRef:
    """What the ProviderSession records of the holder (the next start looks for it)."""
    w = held.welcome
    return HolderRef(holder_id=w.holder_id, pid=w.holder_pid, started_at=w.holder_started_at)


#: The providers whose runtimes can be reattached to (``ProviderRuntime.adopt``).
REATTACHABLE: frozenset[str] = frozenset({"codex", "standin", "claude"})


def holder_launchers(root: Path, grace_s: float, owner: str) -> LauncherFactory:
    """A session manager's launchers: a holder per reattachable provider, a child otherwise."""

    def make(kind: ProviderKind, nursery: trio.Nursery) -> SupervisedLauncher:
        if kind in REATTACHABLE:
            return HolderLauncher(nursery, root, grace_s, owner)
        return RecordingLauncher(nursery)

    return make


def stop_holder(paths: HeldPaths, pid: int, started_at: float) -> bool:
    """SIGTERM the holder (it stops its provider through the ladder, journals it, exits),
    if ``pid`` still is that very holder; False if it is gone."""
    if not OwnerMark(pid, started_at).alive():
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    log.info("holder %s (pid %d): asked to stop its provider", paths.holder_id, pid)
    return True


def stop_all_holders(state_dir: Path) -> list[int]:
    """SIGTERM every live holder of ``state_dir`` (``t3orch stop-agents``); their pids."""
    stopped = []
    for paths in held_dirs(state_dir):
        state = paths.read_state()
        if (
            state is not None
            and paths.serves()
            and stop_holder(paths, state.holder_pid, state.holder_started_at)
        ):
            stopped.append(state.holder_pid)
    return stopped
