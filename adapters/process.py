"""Real provider processes under trio: pipes, a process group, a stop ladder.

Each provider runs in **its own session and process group** (``setsid``), so a
signal to the group also reaches the helpers it spawns (Codex's shell-snapshot
``bash -lc`` can outlive a killed server). The child also gets
``PR_SET_PDEATHSIG = SIGKILL``, so it dies with the daemon even when the
daemon itself is SIGKILLed and never runs its teardown. Its helpers do not:
they carry the owner mark (:mod:`adapters.ownership`) in their environment,
and the next daemon's startup sweep finds them by it.

**Spawn from the trio thread.** The parent-death signal is tied to the
*thread* that forked the child, not to the process. ``trio.lowlevel.open_process``
forks in a worker thread, and trio retires idle worker threads after about 10 s:
measured, a child spawned that way with the death signal set was SIGKILLed
10.0 s later. So :func:`run_child_process` calls :class:`subprocess.Popen`
synchronously in the thread running ``trio.run`` (which lives as long as the
daemon), wraps the pipes in trio streams itself and waits on a pidfd. Never
move the spawn into ``trio.to_thread``.

Lifetime: a process lives in a task started with ``nursery.start``
(:func:`run_child_process`, :class:`TrioProcessLauncher`, or the
:func:`open_child_process` context manager). That task drains stderr, reaps
the process when it exits, and in a shielded ``finally`` always SIGKILLs the
group and reaps, whether it ends normally, by cancellation or by an error.
When the leader exits, the survivors of its group are SIGKILLed before the
leader is reaped: the provider's helpers must not outlive it, and signalling
before reaping means the group id cannot have been reused. Helpers that left
the group (``setsid``) are found by the launch's spawn id in their environment
and killed with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Literal, Protocol

import attrs
import psutil
import trio

from adapters.diagnostics import redact_stderr
from adapters.line_reader import BoundedLineReader
from adapters.ownership import OWNER_ENV, SPAWN_ENV, new_spawn_id, spawned_by, this_process
from adapters.transport import ExitStatus, LaunchSpec, OversizedLine

#: How much stderr a process keeps for diagnostics.
STDERR_TAIL_BYTES = 8 * 1024
#: After the leader exits, how long stderr may take to reach end of file.
_STDERR_GRACE = 1.0
#: How long teardown waits for a SIGKILLed process to be reaped.
_TEARDOWN_REAP_BOUND = 10.0
#: Poll interval when the kernel has no pidfd (Linux < 5.3).
_POLL_INTERVAL = 0.05

_PR_SET_PDEATHSIG = 1

log = logging.getLogger(__name__)


@attrs.frozen
class StopResult:
    """How :meth:`ChildProcess.stop` ended the process.

    ``stage`` is the rung that did it: ``close`` (stdin closed, the process
    exited by itself), ``term`` (SIGTERM to the group) or ``kill`` (SIGKILL).
    ``status`` is ``None`` only if even SIGKILL did not end it within its bound
    (a process stuck in the kernel); the lifetime task still reaps it later.
    """

    status: ExitStatus | None
    stage: Literal["close", "term", "kill"]

    @property
    def escalated(self) -> bool:
        return self.stage != "close"


class Ladderable(Protocol):
    """What the stop ladder works on: a child here, or a provider in a holder."""

    async def close_stdin(self) -> None: ...

    async def wait(self) -> ExitStatus: ...

    def signal_group(self, sig: int) -> bool: ...


async def stop_ladder(
    process: Ladderable, grace_close: float, grace_term: float, grace_kill: float
) -> StopResult:
    """Close stdin, then SIGTERM the group, then SIGKILL it; each rung waits its grace."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await process.close_stdin()
    with trio.move_on_after(grace_close):
        return StopResult(await process.wait(), "close")
    process.signal_group(signal.SIGTERM)
    with trio.move_on_after(grace_term):
        return StopResult(await process.wait(), "term")
    process.signal_group(signal.SIGKILL)
    with trio.move_on_after(grace_kill):
        return StopResult(await process.wait(), "kill")
    return StopResult(None, "kill")


def exit_status(returncode: int) -> ExitStatus:
    """``subprocess`` return code (negative = signal) as an :class:`ExitStatus`."""
    if returncode < 0:
        return ExitStatus(code=None, signal=-returncode)
    return ExitStatus(code=returncode, signal=None)


def _pdeathsig_preexec() -> Callable[[], None]:
    # Resolve prctl in the parent: the forked child should do as little as possible.
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        # The parent may have died between fork and prctl: then nobody would
        # ever send the death signal, so die now.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class ChildProcess:
    """A running provider child: implements :class:`~adapters.transport.ProviderProcess`."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: trio.lowlevel.FdStream,
        stdout: trio.lowlevel.FdStream,
        stderr: trio.lowlevel.FdStream,
        max_line_bytes: int,
        spawn_id: str | None = None,
    ) -> None:
        self._popen = popen
        #: The launch's mark in the environment of everything it starts (adapters.ownership).
        self.spawn_id = spawn_id
        self._stdin = stdin
        self._stdout = stdout
        self._stderr = stderr
        self._reader = BoundedLineReader(stdout, max_line_bytes)
        self._send_lock = trio.Lock()
        #: The end of stderr, redacted line by line as it arrives (so a cut never
        #: separates a secret's name from its value), and the line still open.
        self._stderr_tail = bytearray()
        self._stderr_open_line = b""
        self._stderr_tees: list[Callable[[bytes], None]] = []
        self._stderr_done = trio.Event()
        self._reaped = trio.Event()
        self._status: ExitStatus | None = None
        self._stdin_closed = False
        self._stdin_released = False
        self._pidfd: int | None
        try:
            # The child is not reaped yet, so its pid is still ours to open.
            self._pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):
            self._pidfd = None

    # -- ProviderProcess -------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def pgid(self) -> int:
        """The process group (the child is its leader: it was started with setsid)."""
        return self._popen.pid

    @property
    def status(self) -> ExitStatus | None:
        """The exit status once reaped, else ``None``."""
        return self._status

    async def send_line(self, line: bytes) -> None:
        """Write one frame and its newline; raises ``trio.BrokenResourceError`` if
        the process closed its stdin, ``trio.ClosedResourceError`` after
        :meth:`close_stdin`."""
        if b"\n" in line:
            raise ValueError("a frame must not contain a newline")
        async with self._send_lock:
            try:
                await self._stdin.send_all(line + b"\n")
            except trio.ClosedResourceError:
                if self._stdin_released:
                    # Teardown closed our end after the process ended: to the
                    # caller that is a dead process, not a stream it closed.
                    raise trio.BrokenResourceError(f"provider pid {self.pid} has exited") from None
                raise

    def send_line_nowait(self, line: bytes) -> bool:
        """Write one frame and its newline now, if the pipe takes it whole without a wait
        and no :meth:`send_line` is under way; False: nothing was written (send it with
        :meth:`send_line`, which says why it cannot). A frame shorter than ``PIPE_BUF``
        goes into a pipe whole or not at all."""
        if b"\n" in line:
            raise ValueError("a frame must not contain a newline")
        if self._send_lock.locked() or len(line) >= select.PIPE_BUF:
            return False
        # A closed stream's fd is -1 (never a number reused since).
        fd = self._stdin.fileno()
        if fd < 0:
            return False
        try:
            os.write(fd, line + b"\n")
        except OSError:  # full (BlockingIOError), or gone: send_line knows which
            return False
        return True

    async def receive_line(self) -> bytes | OversizedLine | None:
        try:
            line = await self._reader.receive_line()
        except trio.ClosedResourceError:
            return None  # teardown released stdout: the stream is over for us
        if line is None:
            await self._stdout.aclose()
        return line

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        try:
            lines = await self._reader.receive_lines()
        except trio.ClosedResourceError:
            return []  # as in receive_line
        if not lines:
            await self._stdout.aclose()
        return lines

    async def close_stdin(self) -> None:
        self._stdin_closed = True
        await self._stdin.aclose()

    async def wait(self) -> ExitStatus:
        await self._reaped.wait()
        assert self._status is not None
        return self._status

    def stderr_tail(self) -> str:
        """The end of stderr, redacted: it becomes lastError text and log lines, and the
        event log is append-only, so a provider's secret must never get that far."""
        text = bytes(self._stderr_tail) + redact_stderr(self._stderr_open_line).encode()
        return text[-STDERR_TAIL_BYTES:].decode("utf-8", "replace")

    async def stderr_drained(self) -> None:
        """Wait until stderr has been read to its end (after the exit: a provider that
        fails at once writes why just before it), for at most a short grace."""
        with trio.move_on_after(_STDERR_GRACE):
            await self._stderr_done.wait()

    def tee_stderr(self, sink: Callable[[bytes], None]) -> None:
        """Hand ``sink`` what stderr held so far and every later chunk (a log file)."""
        if self._stderr_tail or self._stderr_open_line:
            sink(bytes(self._stderr_tail) + self._stderr_open_line)
        self._stderr_tees.append(sink)

    async def kill(self) -> None:
        """SIGKILL the whole group at once (reaping is the lifetime task's job)."""
        self.signal_group(signal.SIGKILL)
        await trio.lowlevel.checkpoint()

    # -- beyond the protocol ---------------------------------------------------

    def signal_group(self, sig: int) -> bool:
        """Signal the process group; False if the leader is already reaped or the group is gone.

        Once the leader is reaped its pid (the group id) may be reused, so the
        group is never signalled after that.
        """
        if self._popen.returncode is not None:
            return False
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        return True

    async def stop(
        self, grace_close: float = 2.0, grace_term: float = 2.0, grace_kill: float = 5.0
    ) -> StopResult:
        """The stop ladder: close stdin, then SIGTERM the group, then SIGKILL it.

        Each rung waits at most its grace (seconds) for the process to be reaped.
        """
        return await stop_ladder(self, grace_close, grace_term, grace_kill)

    async def aclose(self) -> None:
        """Close our ends of all pipes (the lifetime task does this on teardown)."""
        for stream in (self._stdin, self._stdout, self._stderr):
            await stream.aclose()

    # -- the lifetime task's helpers -------------------------------------------

    async def _drain_stderr(self) -> None:
        try:
            while chunk := await self._stderr.receive_some(4096):
                self._keep_stderr(chunk)
                for tee in self._stderr_tees:
                    tee(chunk)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        finally:
            self._stderr_done.set()

    def _keep_stderr(self, chunk: bytes) -> None:
        data = self._stderr_open_line + chunk
        complete, newline, open_line = data.rpartition(b"\n")
        if newline:
            self._stderr_tail += redact_stderr(complete + newline).encode()
        if len(open_line) > STDERR_TAIL_BYTES:
            # A line that never ends is redacted in pieces, not held without bound.
            self._stderr_tail += redact_stderr(open_line).encode()
            open_line = b""
        self._stderr_open_line = open_line
        if len(self._stderr_tail) > STDERR_TAIL_BYTES:
            del self._stderr_tail[:-STDERR_TAIL_BYTES]

    async def _wait_exited(self) -> None:
        """Until the leader has exited, without reaping it."""
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
            return
        while True:
            # waitid(WNOWAIT) peeks at the exit without reaping.
            # WNOHANG: this never blocks.
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            result = os.waitid(os.P_PID, self.pid, flags)  # noqa: ASYNC222
            if result is not None:
                return
            await trio.sleep(_POLL_INTERVAL)

    async def _reap(self) -> ExitStatus:
        """Wait for the leader to exit, kill what is left of its group, reap it."""
        if self._status is None:
            await self._wait_exited()
            self._settle()
        assert self._status is not None
        return self._status

    def _settle(self) -> None:
        # Synchronous from the group kill to the reap: no other task can run in
        # between, so nothing signals a group id that the reap just freed.
        self.signal_group(signal.SIGKILL)
        self._kill_escaped()
        returncode = self._popen.wait()
        self._status = exit_status(returncode)
        self._close_pidfd()
        self._reaped.set()

    def _kill_escaped(self) -> None:
        """Helpers that left the group (a session of their own) go with the provider too.

        Found by the spawn id they inherited; this is what a child subreaper would
        give us, without reaping children that are not ours (docs/decisions.md).
        """
        if self.spawn_id is None:
            return
        escaped = spawned_by(self.spawn_id, exclude=frozenset({self.pid}))
        for proc in escaped:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if escaped:
            log.warning(
                "provider pid %d: killed %d process(es) it started outside its group: %s",
                self.pid,
                len(escaped),
                ", ".join(f"{p.pid} ({_name(p)})" for p in escaped),
            )

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    async def _teardown(self, *, release_stdout: bool) -> None:
        """Always: kill the group, reap, close pipes. Call shielded."""
        if self._status is None:
            self.signal_group(signal.SIGKILL)
            # Bounded even though shielded: a process stuck in the kernel must
            # not hang the daemon's shutdown. It is logged and left to init.
            with trio.move_on_after(_TEARDOWN_REAP_BOUND):
                await self._reap()
            if self._status is None:
                log.error(
                    "pid %d did not die within %ss of SIGKILL", self.pid, _TEARDOWN_REAP_BOUND
                )
                self._close_pidfd()
        self._stdin_released = not self._stdin_closed
        await self._stdin.aclose()
        await self._stderr.aclose()
        if release_stdout:
            await self._stdout.aclose()


def _name(proc: psutil.Process) -> str:
    try:
        return str(proc.name())
    except psutil.Error:
        return "?"


def _spawn(spec: LaunchSpec, owner: str | None = None) -> ChildProcess:
    """Fork and exec in *this* thread (see the module docstring for why).

    ``owner``: the owner mark the child carries, when it is not this process's (a
    holder runs its provider on behalf of the daemon that started the holder).
    """
    pipes: list[int] = []
    spawn_id = new_spawn_id()
    try:
        stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC)
        pipes += [stdin_read, stdin_write]
        stdout_read, stdout_write = os.pipe2(os.O_CLOEXEC)
        pipes += [stdout_read, stdout_write]
        stderr_read, stderr_write = os.pipe2(os.O_CLOEXEC)
        pipes += [stderr_read, stderr_write]
        popen = subprocess.Popen(
            list(spec.argv),
            stdin=stdin_read,
            stdout=stdout_write,
            stderr=stderr_write,
            # The owner mark: the startup sweep's evidence for what this daemon spawned.
            # PWD names the child's directory, not the daemon's: a shell's `cd` keeps
            # them in step, Popen's cwd does not, and a child may trust PWD over
            # getcwd (the Claude SDK sets it for the CLI for that reason).
            env={
                **spec.env,
                "PWD": os.path.abspath(spec.cwd),
                OWNER_ENV: owner or this_process().token(),
                SPAWN_ENV: spawn_id,
            },
            cwd=spec.cwd,
            start_new_session=True,
            preexec_fn=_pdeathsig_preexec(),
        )
    except BaseException:
        for fd in pipes:
            os.close(fd)
        raise
    # The child holds its ends now; keeping ours would hide its EOF from us.
    for fd in (stdin_read, stdout_write, stderr_write):
        os.close(fd)
    return ChildProcess(
        popen,
        stdin=trio.lowlevel.FdStream(stdin_write),
        stdout=trio.lowlevel.FdStream(stdout_read),
        stderr=trio.lowlevel.FdStream(stderr_read),
        max_line_bytes=spec.max_line_bytes,
        spawn_id=spawn_id,
    )


async def run_child_process(
    spec: LaunchSpec,
    *,
    owner: str | None = None,
    task_status: trio.TaskStatus[ChildProcess] = trio.TASK_STATUS_IGNORED,
) -> ExitStatus:
    """Spawn a provider and supervise it until it is reaped; use with ``nursery.start``.

    ``task_status.started`` hands out the :class:`ChildProcess`. The task ends
    (returning the exit status) once the process has exited and stderr is
    drained. Cancelling it kills the group and reaps. ``owner``: as :func:`_spawn`.
    """
    return await _supervise(_spawn(spec, owner), task_status=task_status)


async def _supervise(
    child: ChildProcess,
    *,
    task_status: trio.TaskStatus[ChildProcess] = trio.TASK_STATUS_IGNORED,
) -> ExitStatus:
    """The lifetime of a spawned child. Its first statement is the ``try`` whose
    shielded ``finally`` kills and reaps: a task always runs up to its first
    checkpoint, so once started nothing can skip the teardown."""
    clean = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child._drain_stderr)
            task_status.started(child)
            status = await child._reap()
            # stderr normally ends with the group; never let it hold us up.
            await child.stderr_drained()
            nursery.cancel_scope.cancel()
        clean = True
        return status
    finally:
        with trio.CancelScope(shield=True):
            # After a clean exit the reader may still be draining stdout: leave
            # stdout to it (it closes on end of file). Otherwise release everything.
            await child._teardown(release_stdout=not clean)


class TrioProcessLauncher:
    """A :class:`~adapters.transport.ProcessLauncher` whose processes live in ``nursery``.

    Cancelling the nursery kills and reaps every process it launched.
    """

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    async def launch(self, spec: LaunchSpec) -> ChildProcess:
        child: ChildProcess = await self._nursery.start(run_child_process, spec)
        return child


@asynccontextmanager
async def open_child_process(spec: LaunchSpec) -> AsyncIterator[ChildProcess]:
    """A provider process for the duration of the block; leaving it kills and reaps the group."""
    # Spawn outside the nursery so a launch failure (no such executable) is
    # raised as itself rather than inside an exception group.
    spawned = _spawn(spec)
    async with trio.open_nursery() as nursery:
        child: ChildProcess = await nursery.start(_supervise, spawned)
        try:
            yield child
        finally:
            child.signal_group(signal.SIGKILL)
