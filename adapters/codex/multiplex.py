"""One ``codex app-server`` process, many app threads: a virtual process per thread.

Codex's app-server hosts many threads (``thread/start`` takes a cwd, approval
policy and sandbox per thread), so t3orch's threads share processes
(issue 21). The sharing lives at the transport seam (:mod:`adapters.transport`):
each :class:`CodexRuntime` keeps its one-thread view and talks to a
:class:`VirtualProcess`, which :class:`CodexMultiplexer` maps onto the real
process:

* **our requests** get a process-wide id on the way out (each runtime numbers
  its own from 1); the response is routed back by it, with the runtime's id;
* **notifications and server requests** are routed by the thread they name
  (``params.threadId``, ``params.conversationId`` of the legacy approvals,
  ``params.thread.id`` of ``thread/started``); a subagent's thread
  (``thread.parentThreadId``) goes where its parent does; a thread opens
  (``thread/start``, ``resume``, ``fork``) one at a time per process, so a frame of
  a thread not known yet belongs to the one opening. Frames naming no thread
  (``configWarning``, rate limits) go to every member; a server request naming
  none (an auth refresh) to the oldest member, which answers it once;
* **``initialize``** is sent once per process; a later member's is answered from
  the first reply, and its ``initialized`` is not repeated;
* **leaving** (``close_stdin``): the thread is unsubscribed (``thread/unsubscribe``,
  which 0.169.0 answers ``unsubscribed``; it does *not* unload the thread, so its
  next runtime must come back to this process: :attr:`CodexMultiplexer.loaded`),
  the member sees the end of its stream and exit 0. The last member's leave
  closes the process instead, and that member ends with it;
* **the real process's end** is every member's end of stream, with the same
  exit status: each runtime settles its own turn through the usual exit path.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
from collections.abc import Callable
from typing import Any

import attrs
import msgspec
import trio

from adapters.transport import ExitStatus, OversizedLine, ProviderProcess, line_reads

log = logging.getLogger(__name__)

#: The requests that open a thread in the process (their reply names it).
THREAD_OPENERS = frozenset({"thread/start", "thread/resume", "thread/fork"})


class _RouteThread(msgspec.Struct):
    id: str | None = None
    parentThreadId: str | None = None


class _RouteParams(msgspec.Struct):
    threadId: str | None = None
    conversationId: str | None = None
    thread: _RouteThread | None = None


class _Route(msgspec.Struct):
    """Just what routing needs of a frame; msgspec skips the rest unparsed."""

    id: int | str | None = None
    method: str | None = None
    params: _RouteParams | None = None


_route_decoder = msgspec.json.Decoder(_Route)


@attrs.define(eq=False)
class _Call:
    member: VirtualProcess
    local_id: int | str
    method: str


class VirtualProcess:
    """One app thread's view of a shared process: a :class:`ProviderProcess` (and
    :class:`~adapters.transport.LineBatches`) whose lines are that thread's."""

    def __init__(self, mux: CodexMultiplexer, number: int) -> None:
        self._mux = mux
        #: Which member of the process this is (1 = the first to join), for status.
        self.number = number
        self._lines: list[bytes | OversizedLine] = []
        self._arrived = trio.Event()
        self._ended = trio.Event()
        self._status: ExitStatus | None = None
        #: Native threads this member opened (or whose subagents it runs).
        self.threads: set[str] = set()

    @property
    def pid(self) -> int | None:
        return self._mux.pid

    @property
    def mux(self) -> CodexMultiplexer:
        return self._mux

    @property
    def status(self) -> ExitStatus | None:
        return self._status if self._ended.is_set() else None

    @property
    def left(self) -> bool:
        return self._ended.is_set()

    async def send_line(self, line: bytes) -> None:
        if self._ended.is_set():
            raise trio.BrokenResourceError("this thread has left its codex process")
        await self._mux.send_from(self, line)

    async def receive_line(self) -> bytes | OversizedLine | None:
        while not self._lines:
            if self._ended.is_set():
                return None
            await self._wait()
        return self._lines.pop(0)

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        while not self._lines:
            if self._ended.is_set():
                return []
            await self._wait()
        lines, self._lines = self._lines, []
        return lines

    async def _wait(self) -> None:
        """Until a line arrives or the stream ends (:meth:`_end` sets it too)."""
        self._arrived = trio.Event()
        await self._arrived.wait()

    async def close_stdin(self) -> None:
        """The thread leaves the process (the process goes with its last thread)."""
        await self._mux.leave(self, ExitStatus(code=0, signal=None))

    async def wait(self) -> ExitStatus:
        await self._ended.wait()
        assert self._status is not None
        return self._status

    def stderr_tail(self) -> str:
        return self._mux.process.stderr_tail()

    async def kill(self) -> None:
        """Ends this thread's use of the process at once; the process itself is killed
        only when no other thread is on it (one thread's teardown never ends another's)."""
        await self._mux.leave(self, ExitStatus(code=None, signal=int(signal.SIGKILL)), kill=True)

    # -- the multiplexer's side --------------------------------------------------

    def _deliver(self, line: bytes | OversizedLine) -> None:
        if self._ended.is_set():
            return
        self._lines.append(line)
        self._arrived.set()

    def _end(self, status: ExitStatus) -> None:
        if self._ended.is_set():
            return
        self._status = status
        self._ended.set()
        self._arrived.set()


class CodexMultiplexer:
    """Routes one real ``codex app-server`` process's frames among its members."""

    def __init__(self, process: ProviderProcess, *, key: str = "", number: int = 1) -> None:
        self.process = process
        #: What processes are shared by (binary, home, overrides, environment).
        self.key = key
        #: This process's number among the pool's (``codex-<n>`` in status).
        self.number = number
        self.members: list[VirtualProcess] = []
        #: Every thread opened here: 0.169.0 keeps a thread loaded (its writer) after
        #: ``thread/unsubscribe`` for as long as the process lives, so another process
        #: resuming it is refused ("already has an active writer") — it comes back here.
        self.loaded: set[str] = set()
        self._ever = itertools.count(1)
        self._owners: dict[str, VirtualProcess] = {}
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count(1)
        self._send_lock = trio.Lock()
        #: The member whose thread/start, resume or fork is waiting for its reply.
        self._opener: VirtualProcess | None = None
        self._opener_free = trio.Event()
        self._opener_free.set()
        #: ``initialize``'s first reply (its result), once there is one.
        self._init_result: Any = None
        self._init_state: str = "none"  # none | pending | done
        self._init_done = trio.Event()
        self._initialized_sent = False
        self.exit_status: ExitStatus | None = None
        self.ended = trio.Event()
        #: Set once no member is left and the process was asked to close.
        self.closing = False
        #: Called when the process is done (ended, or closing with no member).
        self.on_done: Callable[[CodexMultiplexer], None] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def name(self) -> str:
        return f"codex-{self.number}"

    @property
    def open(self) -> bool:
        """Takes new members: running, not closing."""
        return not self.closing and not self.ended.is_set()

    def join(self) -> VirtualProcess:
        member = VirtualProcess(self, next(self._ever))
        self.members.append(member)
        return member

    # -- outgoing ----------------------------------------------------------------

    async def send_from(self, member: VirtualProcess, line: bytes) -> None:
        try:
            frame = msgspec.json.decode(line)
        except msgspec.DecodeError:
            frame = None
        if not isinstance(frame, dict) or not isinstance(frame.get("method"), str):
            # A reply to a server request (its id is the process's own), or not ours
            # to judge: as it is.
            await self._write(line)
            return
        method: str = frame["method"]
        local_id = frame.get("id")
        if local_id is None:
            if method == "initialized":
                if self._initialized_sent:
                    return  # the process heard it from its first member
                self._initialized_sent = True
            await self._write(line)
            return
        if method == "initialize":
            while self._init_state == "pending":
                await self._init_done.wait()
            if self._init_state == "done":
                reply = msgspec.json.encode({"id": local_id, "result": self._init_result})
                member._deliver(reply)
                return
            self._init_state = "pending"
        if method in THREAD_OPENERS:
            while self._opener is not None:
                await self._opener_free.wait()
            self._opener = member
            self._opener_free = trio.Event()
        global_id = next(self._ids)
        self._calls[global_id] = _Call(member, local_id, method)
        frame["id"] = global_id
        try:
            await self._write(msgspec.json.encode(frame))
        except BaseException:
            self._calls.pop(global_id, None)
            if self._opener is member and method in THREAD_OPENERS:
                self._free_opener()
            raise

    async def _write(self, line: bytes) -> None:
        async with self._send_lock:
            await self.process.send_line(line)

    def _free_opener(self) -> None:
        self._opener = None
        self._opener_free.set()

    # -- leaving -----------------------------------------------------------------

    async def leave(
        self, member: VirtualProcess, status: ExitStatus, *, kill: bool = False
    ) -> None:
        """``member`` leaves: its threads are unsubscribed, or the process is closed
        (killed, with ``kill``) when it was the last member."""
        if member.left:
            return
        threads, last = self.detach(member, status)
        if last:
            if kill:
                await self.process.kill()
            else:
                with contextlib.suppress(
                    trio.BrokenResourceError, trio.ClosedResourceError, OSError
                ):
                    await self.process.close_stdin()
            return
        await self.unsubscribe(threads)

    def detach(self, member: VirtualProcess, status: ExitStatus) -> tuple[list[str], bool]:
        """The bookkeeping of a leave, at once: ``member`` sees its end of stream now.

        Returns the threads it had and whether it was the last member (then the
        process is closing and takes no new one)."""
        threads = sorted(member.threads)
        if not [m for m in self.members if m is not member]:
            # The last member ends with the process (``run``), so its runtime is released
            # only once the process is gone and holds none of its threads any more.
            self.closing = True
            if self.on_done is not None:
                self.on_done(self)
            return threads, True
        for thread in threads:
            if self._owners.get(thread) is member:
                del self._owners[thread]
        for global_id, call in list(self._calls.items()):
            if call.member is member:
                del self._calls[global_id]
                if call.method == "initialize":
                    self._initialize_failed()  # the next member sends its own
        if self._opener is member:
            self._free_opener()
        if member in self.members:
            self.members.remove(member)
        member._end(status)
        return threads, False

    async def unsubscribe(self, threads: list[str]) -> None:
        """Unload threads a member had: a later resume of one (here or elsewhere) works."""
        for thread in threads:
            if self.ended.is_set():
                return
            global_id = next(self._ids)
            params = {"threadId": thread}
            frame = {"id": global_id, "method": "thread/unsubscribe", "params": params}
            try:
                await self._write(msgspec.json.encode(frame))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return

    # -- incoming ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the real process and route its lines until it ends; then end every member."""
        task_status.started()
        read = line_reads(self.process)
        eof = False
        try:
            while lines := await read():
                for line in lines:
                    self._route(line)
            eof = True
        finally:
            with trio.CancelScope(shield=True):
                if not eof:
                    await self.process.kill()  # the pool is going: so is the process
                status: ExitStatus | None = None
                with trio.move_on_after(5):
                    status = await self.process.wait()
                if status is None:
                    await self.process.kill()
                    with trio.move_on_after(5):
                        status = await self.process.wait()
                self.exit_status = status or ExitStatus(code=None, signal=int(signal.SIGKILL))
                for member in list(self.members):
                    member._end(self.exit_status)
                self.members.clear()
                self._free_opener()
                self.ended.set()
                if self.on_done is not None:
                    self.on_done(self)

    def _route(self, line: bytes | OversizedLine) -> None:
        if isinstance(line, OversizedLine):
            self._broadcast(line)
            return
        try:
            route = _route_decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self._broadcast(line)
            return
        if route.method is None and route.id is not None:
            self._response(route, line)
            return
        params = route.params
        thread = None
        parent = None
        if params is not None:
            thread = params.threadId or params.conversationId
            if thread is None and params.thread is not None:
                thread = params.thread.id
                parent = params.thread.parentThreadId
        if thread is None:
            if route.id is not None:
                # A server request about no thread: one member answers it.
                live = [m for m in self.members if not m.left]
                if live:
                    live[0]._deliver(line)
                return
            self._broadcast(line)
            return
        owner = self._owners.get(thread)
        if owner is None:
            owner = self._owners.get(parent) if parent is not None else None
            if owner is None:
                owner = self._opener
            if owner is None:
                log.debug("codex %s: a frame of thread %s, which no member has", self.name, thread)
                return
            self._adopt(owner, thread)
        owner._deliver(line)

    def _response(self, route: _Route, line: bytes) -> None:
        call = self._calls.pop(route.id, None) if isinstance(route.id, int) else None
        if call is None:
            return  # our own thread/unsubscribe, or a member's that has left
        try:
            frame = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return
        assert isinstance(frame, dict)
        frame["id"] = call.local_id
        result = frame.get("result")
        if call.method == "initialize":
            if "result" in frame:
                self._init_result = result
                self._init_state = "done"
                self._init_done.set()
            else:
                self._initialize_failed()
        if call.method in THREAD_OPENERS:
            thread = result.get("thread") if isinstance(result, dict) else None
            ref = thread.get("id") if isinstance(thread, dict) else None
            if isinstance(ref, str) and not call.member.left:
                self._adopt(call.member, ref)
            if self._opener is call.member:
                self._free_opener()
        call.member._deliver(msgspec.json.encode(frame))

    def _initialize_failed(self) -> None:
        """No answer to share: whoever waits sends its own ``initialize``."""
        self._init_state = "none"
        self._init_done.set()
        self._init_done = trio.Event()

    def _adopt(self, member: VirtualProcess, thread: str) -> None:
        self._owners[thread] = member
        member.threads.add(thread)
        self.loaded.add(thread)

    def _broadcast(self, line: bytes | OversizedLine) -> None:
        for member in self.members:
            member._deliver(line)


__all__ = ["THREAD_OPENERS", "CodexMultiplexer", "VirtualProcess"]
