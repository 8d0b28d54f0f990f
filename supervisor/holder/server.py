"""The holder process: one provider runtime that outlives the daemon which started it.

It runs the provider (its own process group, killed with the holder by the
parent-death signal), reads its stdout and stderr as fast as they come and
appends each line, in order, to the journal with the next offset; every line
the daemon writes to the provider's stdin is journaled too (``IN``), since the
adapter's state (a Codex call id waiting for its response) needs both. It serves
one daemon at a time on its 0600 socket: after the hello, the journal's bytes
after the daemon's last offset, then live (:mod:`supervisor.holder.wire`).

Live, a record goes to the daemon from memory as soon as it is in the journal file
(written, not re-read): the daemon never has a record a later replay would lack,
and a frame costs the holder one pipe read, one file write and one socket write,
in the task that read it. The daemon's own writes (``IN``) are journaled first and
written to the provider's stdin at once (a task only when the pipe is full); their
echo to the daemon waits for the next record (the daemon has them already).

Without a daemon for ``grace_s`` (none ever came back), or on SIGTERM/SIGINT, it
stops the provider through the stop ladder, journals that and the exit, and
exits; so does it on the daemon's ``RELEASE``. The journal stays for the next
daemon, which settles the runtime from it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import signal
import socket
import struct
import time
from typing import NoReturn

import msgspec
import trio

from adapters.diagnostics import redact_stderr
from adapters.ownership import started_at, this_process
from adapters.process import ChildProcess, run_child_process
from adapters.transport import LaunchSpec, OversizedLine
from supervisor.holder.layout import HeldPaths, HeldSpec, HolderState, socket_address, write_private
from supervisor.holder.wire import (
    HEADER,
    PROTOCOL_VERSION,
    ExitRecord,
    Hello,
    Kind,
    Note,
    ProtocolError,
    RecordReader,
    Welcome,
    encode,
    encode_json,
    iter_file,
    parse,
    write_now,
)
from t3orch import timeline

log = logging.getLogger(__name__)

#: A connection must say hello within this long.
HELLO_TIMEOUT_S = 5.0
#: The stop ladder's rungs when the holder stops its provider itself.
LADDER = {"grace_close": 2.0, "grace_term": 3.0, "grace_kill": 5.0}
_SEND_CHUNK = 256 * 1024
#: The daemon's own writes echoed lazily (with the next record) up to this many bytes.
_HOLD_MAX = 64 * 1024
_OVERSIZED = struct.Struct("<Q")
#: A journal that took no more (a full disk) is tried again this often; past this
#: many bytes waiting for it the holder ends (stderr and the daemon's writes go on
#: while the provider's stdout waits).
STALL_RETRY_S = 1.0
STALL_MAX_BYTES = 16 * 1024 * 1024
#: A stderr line longer than this is journaled (redacted) in pieces, not held whole.
STDERR_LINE_BOUND = 8 * 1024


class JournalFailed(Exception):
    """The journal could not be written: the holder ends (never an ``OSError``, which a
    daemon connection's end would take for its own and go on)."""


class Holder:
    def __init__(self, paths: HeldPaths, spec: HeldSpec) -> None:
        self.paths = paths
        self.spec = spec
        self._fd = os.open(
            paths.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        self.offset = 0
        #: The journal file's size (every record is written whole before the next).
        self.size = os.fstat(self._fd).st_size
        #: The attached daemon's live stream (None: no daemon, or none caught up yet).
        self._sink: _Forward | None = None
        #: Writes for the provider's stdin queued for :meth:`write_stdin` (the pipe was
        #: full, or one is being written): later ones queue behind them.
        self._stdin_queued = 0
        self._client: trio.CancelScope | None = None
        self._presence = trio.Event()
        self._writes_in, self._writes_out = trio.open_memory_channel[bytes | None](math.inf)
        self.child: ChildProcess | None = None
        self.state: HolderState | None = None
        self.exited = trio.Event()
        self.done = trio.Event()
        self._finishing = False
        self._stderr_open = b""
        #: Whole records the journal file does not have all of yet, in order (it took
        #: no more: :meth:`_stall`), and how many of their bytes it has.
        self._stalled: bytearray | None = None
        self._stalled_written = 0
        self._stalled_after = 0
        self._stall_why = ""
        #: Set unless a stop ladder runs whose rung is not journaled yet.
        self._stage_noted = trio.Event()
        self._stage_noted.set()

    # -- the journal -------------------------------------------------------------

    def append(self, kind: Kind, payload: bytes = b"") -> int:
        self.offset += 1
        # The daemon's own write needs no echo of its own: it goes with the next record.
        self._write(encode(kind, self.offset, payload), echo=kind is Kind.IN)
        return self.offset

    def journal_stderr(self, chunk: bytes) -> None:
        """Stderr goes into the journal redacted, whole lines at a time (a cut line could
        hide a secret's name from the rules): a provider's key reaches no file."""
        data = self._stderr_open + chunk
        complete, newline, rest = data.rpartition(b"\n")
        if len(rest) > STDERR_LINE_BOUND:
            complete, newline, rest = data, b"\n", b""
        self._stderr_open = rest
        if newline:
            self.append(Kind.ERR, redact_stderr(complete + newline).encode())

    def flush_stderr(self) -> None:
        if self._stderr_open:
            self.append(Kind.ERR, redact_stderr(self._stderr_open).encode())
            self._stderr_open = b""

    def _append_lines(self, lines: list[bytes | OversizedLine]) -> None:
        parts = []
        pack = HEADER.pack
        for line in lines:
            self.offset += 1
            if isinstance(line, OversizedLine):
                payload = _OVERSIZED.pack(line.length) + line.head
                parts.append(pack(Kind.OVERSIZED, self.offset, len(payload)) + payload)
            else:
                parts.append(pack(Kind.OUT, self.offset, len(line)))
                parts.append(line)
        self._write(b"".join(parts))

    def _write(self, data: bytes, *, echo: bool = False) -> None:
        """Into the journal file, then (from memory) to the attached daemon; while the
        file takes no more, into memory (:meth:`journal_room`)."""
        if self._stalled is not None:
            self._stalled += data
            if len(self._stalled) > STALL_MAX_BYTES:
                self._journal_failed()
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._stall(data, len(data) - len(view), exc)
            return
        timeline.stamp("holder.journaled")
        self.size += len(data)
        if self._sink is not None:
            self._sink.journaled(data, self.size, echo=echo)

    def _stall(self, data: bytes, written: int, exc: OSError) -> None:
        """The journal file took no more (a full disk): what comes is kept in memory, in
        order, and the provider's stdout is not read until the file has it all. The
        daemon gets nothing the file lacks, so it waits too; nothing is lost."""
        self._stalled = bytearray(data)
        self._stalled_written = written
        # The note carries the last offset the file has: the daemon has no more.
        (first, *_), _ = parse(data)
        self._stalled_after = first.offset - 1
        self._stall_why = (
            f"its journal {self.paths.journal} could not be written ({exc.strerror or exc})"
        )
        log.warning("%s: the provider waits until it can", self._stall_why)
        self._tell(Note("journal_stalled", detail=self._stall_why))

    def _tell(self, note: Note) -> None:
        if self._sink is not None:
            record = encode(Kind.NOTE, self._stalled_after, msgspec.json.encode(note))
            self._sink.tell(record, self.size)

    def _unstall(self) -> bool:
        """What the file lacks, written if it takes it now; True once it has it all."""
        stalled = self._stalled
        if stalled is None:
            return True
        view = memoryview(stalled)[self._stalled_written :]
        try:
            while view:
                n = os.write(self._fd, view)
                self._stalled_written += n
                view = view[n:]
        except OSError:
            return False
        finally:
            view.release()
        self._stalled = None
        self.size += len(stalled)
        log.info("the journal is written again (%d bytes it lacked)", len(stalled))
        if self._sink is not None:
            self._sink.journaled(bytes(stalled), self.size, echo=False)
        return True

    async def journal_room(self) -> None:
        """Return once the journal file has every record (at once, but after a full
        disk: tried again every ``STALL_RETRY_S``)."""
        # Nothing says when a disk has room again: it is asked.
        while not self._unstall():  # noqa: ASYNC110
            await trio.sleep(STALL_RETRY_S)

    def _journal_failed(self) -> NoReturn:
        """More than ``STALL_MAX_BYTES`` waits for a journal that takes nothing: the
        holder cannot keep what it is for (a restarted daemon replays the journal). The
        attached daemon is told why, from memory, and the holder ends, its provider
        with it (its parent-death signal)."""
        why = self._stall_why
        log.error("%s; the holder ends", why)
        self._tell(Note("journal_failed", detail=why))
        raise JournalFailed(why)

    # -- the provider ------------------------------------------------------------

    async def pump_stdout(self, child: ChildProcess) -> None:
        """Every stdout line into the journal, then the end and the exit status."""
        while lines := await child.receive_lines():
            timeline.stamp("holder.out.read")
            self._append_lines(lines)
            await self.journal_room()  # a full disk: the provider waits on its pipe
        self.append(Kind.EOF)
        status = await child.wait()
        # Every stderr byte is journaled before the exit: the daemon reads why from it.
        await child.stderr_drained()
        self.flush_stderr()
        # A stop's rung is journaled before the exit it caused.
        await self._stage_noted.wait()
        self.append(Kind.EXIT, msgspec.json.encode(ExitRecord(status.code, status.signal)))
        log.info("provider pid %d %s", child.pid, status.describe())
        await self.journal_room()
        self.exited.set()

    async def write_stdin(self, child: ChildProcess) -> None:
        """The daemon's writes, in order; a provider that stops reading holds up only these."""
        async for line in self._writes_out:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                if line is None:
                    await child.close_stdin()
                else:
                    await child.send_line(line)
            self._stdin_queued -= 1

    def _to_stdin(self, line: bytes | None) -> None:
        """A write (None: the close) for the provider, in order: at once when nothing
        is queued before it and the pipe takes it whole, else through :meth:`write_stdin`."""
        child = self.child
        if (
            line is not None
            and child is not None
            and not self._stdin_queued
            and child.send_line_nowait(line)
        ):
            timeline.stamp("holder.in.written")
            return
        self._stdin_queued += 1
        self._writes_in.send_nowait(line)

    async def finish(self, why: Note) -> None:
        """Stop the provider through the ladder (journaled), then end the holder."""
        if self._finishing:
            return
        self._finishing = True
        child = self.child
        if child is not None and not self.exited.is_set():
            log.info("stopping provider pid %d: %s", child.pid, why.event)
            self.append(Kind.NOTE, msgspec.json.encode(why))
            self._stage_noted = trio.Event()
            try:
                result = await child.stop(**LADDER)
                self.append(Kind.NOTE, msgspec.json.encode(Note("stopped", result.stage)))
            finally:
                self._stage_noted.set()
            with trio.move_on_after(LADDER["grace_kill"]):
                await self.exited.wait()
        self.done.set()

    async def release(self) -> None:
        """The daemon is done with the runtime: what still runs is killed, the holder ends."""
        child = self.child
        if child is not None and not self.exited.is_set():
            child.signal_group(signal.SIGKILL)
            with trio.move_on_after(LADDER["grace_kill"]):
                await self.exited.wait()
        self.done.set()

    async def watch_grace(self) -> None:
        """No daemon attached for ``grace_s``: stop the provider and end."""
        while True:
            presence = self._presence
            if self._client is not None:
                await presence.wait()
                continue
            with trio.move_on_after(self.spec.grace_s):
                await presence.wait()
                continue
            log.info("no daemon attached for %gs", self.spec.grace_s)
            await self.finish(Note("grace_expired"))
            return

    async def watch_signals(self, *, task_status: trio.TaskStatus[None]) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                log.info("got signal %d", signum)
                await self.finish(Note("signalled"))
                return

    def _changed(self) -> None:
        self._presence.set()
        self._presence = trio.Event()
        if self.state is not None:
            # What `t3orch status` shows: attached, or alone since when (its grace runs).
            alone = None if self._client is not None else time.time()
            self.state = msgspec.structs.replace(self.state, alone_since=alone)
            with contextlib.suppress(OSError):
                write_private(self.paths.state, msgspec.json.encode(self.state))

    # -- the daemon ----------------------------------------------------------------

    async def serve(self, listener: trio.SocketListener) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()
                nursery.start_soon(self._serve_client, stream)

    async def _serve_client(self, stream: trio.SocketStream) -> None:
        # A daemon SIGKILLed mid-write resets the connection: that ends this client only,
        # never the holder (the errors come grouped from the sender/receiver nursery).
        try:
            async with stream:
                await self._attach(stream)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError, OSError) as exc:
            log.info("daemon connection ended: %s", exc.exceptions[0])

    async def _attach(self, stream: trio.SocketStream) -> None:
        reader = RecordReader(stream)
        with trio.move_on_after(HELLO_TIMEOUT_S):
            first = await reader.receive_one()
        if first is None or first.kind != Kind.HELLO:
            return
        try:
            hello = msgspec.json.decode(first.payload, type=Hello)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise ProtocolError("a hello that does not decode") from None
        if hello.version != PROTOCOL_VERSION:
            why = (
                f"holder {self.spec.holder_id} speaks protocol version {PROTOCOL_VERSION}, "
                f"the daemon {hello.version}"
            )
            await stream.send_all(encode(Kind.REFUSED, 0, why.encode()))
            return
        assert self.state is not None
        # The newest daemon wins: an older connection is a dead daemon's.
        if self._client is not None:
            self._client.cancel()
        with trio.CancelScope() as scope:
            self._client = scope
            self._changed()
            try:
                welcome = Welcome(
                    version=PROTOCOL_VERSION,
                    holder_id=self.spec.holder_id,
                    holder_pid=self.state.holder_pid,
                    holder_started_at=self.state.holder_started_at,
                    provider_pid=self.state.provider_pid,
                    provider_started_at=self.state.provider_started_at,
                    spawn_id=self.state.spawn_id,
                    grace_s=self.spec.grace_s,
                    journaled=self.offset,
                )
                await stream.send_all(encode_json(Kind.WELCOME, welcome))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._forward, stream, hello.after)
                    await self._take_commands(reader)
                    nursery.cancel_scope.cancel()
            finally:
                if self._client is scope:
                    self._client = None
                    self._changed()

    async def _forward(self, stream: trio.SocketStream, after: int) -> None:
        """Every record after ``after`` to the daemon (:class:`_Forward`)."""
        # Registered with no await after the start is found: from here on each record
        # journaled is the sink's, read back from the file or sent from memory.
        sink = _Forward(stream, _first_after(self.paths, after, self.size))
        self._sink = sink
        if self._stalled is not None:
            self._tell(Note("journal_stalled", detail=self._stall_why))
        try:
            await sink.run(self)
        finally:
            if self._sink is sink:
                self._sink = None

    async def _take_commands(self, reader: RecordReader) -> None:
        while records := await reader.receive():
            for record in records:
                match record.kind:
                    case Kind.WRITE:
                        timeline.stamp("holder.in.taken")
                        # Journaled before the provider can answer it.
                        self.append(Kind.IN, record.payload)
                        self._to_stdin(record.payload)
                    case Kind.CLOSE_STDIN:
                        self._to_stdin(None)
                    case Kind.SIGNAL:
                        (signum,) = struct.unpack("<i", record.payload)
                        if self.child is not None:
                            self.child.signal_group(signum)
                    case Kind.DETACH:
                        return
                    case Kind.RELEASE:
                        await self.release()
                        return
                    case _:
                        raise ProtocolError(f"a {record.kind.name} record from the daemon")


class _Forward:
    """The attached daemon's stream: the journal's bytes from a file position on.

    Caught up, each record is written to the socket as it is journaled, from memory, by
    the task that journaled it (one non-blocking ``write``; the daemon's own ``IN``
    records wait for the next record). Behind — attaching, or a socket that did not
    take a record whole (the daemon reads slower than the provider writes) — :meth:`run`
    reads the file from where the socket stopped, in big chunks, until caught up: the
    holder's memory never holds more than a record for it.
    """

    def __init__(self, stream: trio.SocketStream, start: int) -> None:
        self._stream = stream
        #: The file position the socket is at, while behind (None: caught up, live).
        self.behind: int | None = start
        self._held = bytearray()
        #: Notes for the daemon the file does not have, sent once caught up.
        self._told = bytearray()
        self._wake = trio.Event()
        self._error: OSError | None = None

    def journaled(self, data: bytes, end: int, *, echo: bool) -> None:
        """``data`` was just written to the journal file, where it ends at ``end``."""
        if self.behind is not None:
            self._wake.set()
            return
        if echo and len(self._held) + len(data) <= _HOLD_MAX:
            self._held += data
            return
        if self._held:
            # The held records are the file's bytes just before ``data``.
            data = bytes(self._held) + data
            self._held.clear()
        sent, self._error = write_now(self._stream, data)
        if sent < len(data):
            self.behind = end - len(data) + sent
            self._wake.set()
        else:
            timeline.stamp("holder.sent")

    def tell(self, data: bytes, end: int) -> None:
        """``data``, which the journal does not have, to the daemon once it has every
        record before it (the file ends at ``end``): :meth:`run` sends it, behind."""
        if self.behind is None:
            # The held records are the file's bytes just before ``end``: from there.
            self.behind = end - len(self._held)
            self._held.clear()
        self._told += data
        self._wake.set()

    async def run(self, holder: Holder) -> None:
        """Send the file's part while behind; raises when the socket fails."""
        with open(holder.paths.journal, "rb") as f:  # noqa: ASYNC230 (local, once per attach)
            while True:
                if self._error is not None:
                    raise trio.BrokenResourceError(str(self._error)) from self._error
                pos = self.behind
                if pos is None:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                if pos >= holder.size:
                    if self._told:
                        told, self._told = bytes(self._told), bytearray()
                        await self._stream.send_all(told)
                        continue  # the file may have grown meanwhile
                    self.behind = None  # caught up: the next record goes from memory
                    continue
                f.seek(pos)
                chunk = f.read(min(_SEND_CHUNK, holder.size - pos))
                if not chunk:
                    raise OSError(f"the journal ends before byte {pos}, which was written")
                self.behind = pos + len(chunk)
                await self._stream.send_all(chunk)


def _first_after(paths: HeldPaths, after: int, size: int) -> int:
    """The file position of the journal's first record after offset ``after`` (its end,
    ``size``, when there is none)."""
    for pos, record in iter_file(os.fspath(paths.journal)):
        if record.offset > after:
            return pos
    return size


async def _listen(paths: HeldPaths) -> trio.SocketListener:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is born 0600
    try:
        with socket_address(paths.socket) as address:
            await sock.bind(address)
    finally:
        os.umask(old)
    sock.listen(16)
    return trio.SocketListener(sock)


def _started_at(pid: int) -> float:
    """The provider's start time; 0 when it has already exited and been reaped (a provider
    that fails at once: its exit and stderr are journaled all the same)."""
    return started_at(pid) or 0.0


def _report(ready_fd: int, message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        os.write(ready_fd, msgspec.json.encode(message) + b"\n")
    with contextlib.suppress(OSError):
        os.close(ready_fd)


async def hold(paths: HeldPaths, spec: HeldSpec, ready_fd: int) -> int:
    """The holder's life; ``ready_fd`` gets one JSON line (the state, or the error)."""
    timeline.start()  # T3ORCH_TIMELINE, from the daemon's environment
    holder = Holder(paths, spec)
    listener = await _listen(paths)
    launch = LaunchSpec(
        argv=spec.argv, env=spec.env, cwd=spec.cwd, max_line_bytes=spec.max_line_bytes
    )
    try:
        async with trio.open_nursery() as nursery:
            try:
                child: ChildProcess = await nursery.start(
                    functools.partial(run_child_process, launch, owner=spec.owner)
                )
            except OSError as exc:
                _report(
                    ready_fd,
                    {
                        "error": exc.strerror or str(exc),
                        "errno": exc.errno,
                        "filename": exc.filename,
                    },
                )
                return 1
            holder.child = child
            child.tee_stderr(holder.journal_stderr)
            holder.state = HolderState(
                holder_id=spec.holder_id,
                holder_pid=os.getpid(),
                holder_started_at=this_process().started_at,
                provider_pid=child.pid,
                provider_started_at=_started_at(child.pid),
                spawn_id=child.spawn_id or "",
                owner=spec.owner,
                grace_s=spec.grace_s,
                alone_since=time.time(),
            )
            write_private(paths.state, msgspec.json.encode(holder.state))
            nursery.start_soon(holder.pump_stdout, child)
            nursery.start_soon(holder.write_stdin, child)
            nursery.start_soon(holder.serve, listener)
            nursery.start_soon(holder.watch_grace)
            await nursery.start(holder.watch_signals)
            _report(ready_fd, msgspec.to_builtins(holder.state))
            await holder.done.wait()
            nursery.cancel_scope.cancel()
    finally:
        with contextlib.suppress(OSError):
            paths.socket.unlink()
    return 0
