"""One ``codex app-server`` process, many app threads: a virtual process per thread.

Codex's app-server hosts many threads (``thread/start`` takes a cwd, approval
policy and sandbox per thread), so t3orch's threads share processes
(issue 21). The sharing lives at the transport seam (:mod:`adapters.transport`):
each :class:`CodexRuntime` keeps its one-thread view and talks to a
:class:`VirtualProcess`, which :class:`CodexMultiplexer` maps onto the real
process:

* **our requests** get a process-wide id on the way out, ``<member tag>|<its own id>``
  (each runtime numbers its own from 1; the tag is its provider session's id), so the
  frame says whose it is, in a held process's journal too; the response is routed back
  by it, with the runtime's id;
* **notifications and server requests** are routed by the thread they name
  (``params.threadId``, ``params.conversationId`` of the legacy approvals,
  ``params.thread.id`` of ``thread/started``); a subagent's thread
  (``thread.parentThreadId``, or a ``receiverThreadIds`` of a collab item on its
  parent's thread) goes where its parent does, its lines from before that kept for
  it; a frame of a thread no member has yet is kept until the reply to a
  ``thread/start``, ``resume`` or ``fork`` names it (it goes to that member, before the
  reply) or a spawn item does (its parent's member). Frames naming no thread
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

from adapters.offset_lines import Input, OffsetLines, OffsetReads
from adapters.transport import (
    LEFT_RUNNING,
    ExitStatus,
    OversizedLine,
    ProviderProcess,
    line_reads,
)

log = logging.getLogger(__name__)

#: The requests that open a thread in the process (their reply names it).
THREAD_OPENERS = frozenset({"thread/start", "thread/resume", "thread/fork"})


class _RouteThread(msgspec.Struct):
    id: str | None = None
    parentThreadId: str | None = None


class _RouteItem(msgspec.Struct):
    receiverThreadIds: list[str] | None = None


class _RouteParams(msgspec.Struct):
    threadId: str | None = None
    conversationId: str | None = None
    thread: _RouteThread | None = None
    item: _RouteItem | None = None


class _Route(msgspec.Struct):
    """Just what routing needs of a frame; msgspec skips the rest unparsed."""

    id: int | str | None = None
    method: str | None = None
    params: _RouteParams | None = None


_route_decoder = msgspec.json.Decoder(_Route)


#: Separates a member's tag from its own request id in a process-wide id.
_TAG_SEP = "|"
#: The tag of the multiplexer's own requests (``thread/unsubscribe``).
_OWN_TAG = "mux"
#: How many lines of threads no member has (yet) are kept for the member whose
#: subagent the thread turns out to be; past it they are dropped (with a warning).
UNCLAIMED_MAX = 1000
#: The "offset" of a line that is not in a journal (a child's, or one the multiplexer
#: answers itself): never muted, never reported.
UNJOURNALED = -1


def global_id(tag: str, local_id: int | str) -> str:
    """A request's id on the shared process: the member's tag and its own id, so that
    who sent it (and what id it had) is in the frame itself, in the journal too."""
    return f"{tag}{_TAG_SEP}{msgspec.json.encode(local_id).decode()}"


def split_id(value: object) -> tuple[str, int | str] | None:
    """The tag and local id of a process-wide id (None: not one of ours)."""
    if not isinstance(value, str) or _TAG_SEP not in value:
        return None
    tag, _, local = value.rpartition(_TAG_SEP)
    try:
        local_id = msgspec.json.decode(local)
    except msgspec.DecodeError:
        return None
    return (tag, local_id) if isinstance(local_id, (int, str)) else None


@attrs.define(eq=False)
class _Call:
    tag: str
    local_id: int | str
    method: str


@attrs.frozen
class JournalReplay:
    """A held process's journal being replayed through a multiplexer (a reattach)."""

    #: The journal offset the replay runs through (the last record before the attach).
    through: int
    #: Whether the held process has handed out every record up to it.
    read: Callable[[], bool]


class VirtualProcess(OffsetLines):
    """One app thread's view of a shared process: a :class:`ProviderProcess` (and
    :class:`~adapters.transport.LineBatches`) whose lines are that thread's.

    On a held process it also has a held process's reading side, per member: each
    line keeps its journal offset (``on_delivered``), a reattach mutes this
    member's lines up to its own committed offset (``mute_through``, ``on_mute``)
    and hands it the requests it had sent (``on_input``) in journal order."""

    def __init__(self, mux: CodexMultiplexer, number: int, tag: str, committed: int = 0) -> None:
        super().__init__(committed)
        self.mute_through = committed
        self._mux = mux
        #: Which member of the process this is (1 = the first to join), for status.
        self.number = number
        #: What its request ids carry on the process (its provider session's id).
        self.tag = tag
        self._arrived = trio.Event()
        self._ended = trio.Event()
        self._status: ExitStatus | None = None
        self._left_running = False
        #: Native threads this member opened (or whose subagents it runs).
        self.threads: set[str] = set()
        #: Claimed by a runtime (a reattach pre-creates its members).
        self.claimed = False

    @property
    def pid(self) -> int | None:
        return self._mux.pid

    @property
    def mux(self) -> CodexMultiplexer:
        return self._mux

    @property
    def holder_id(self) -> str | None:
        return self._mux.holder_id

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
        lines = await self._receive(1)
        return lines[0] if lines else None

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        return await self._receive(None)

    async def _receive(self, limit: int | None) -> list[bytes | OversizedLine]:
        self.report_delivered()
        while True:
            while not self._lines:
                if self._ended.is_set():
                    if self.on_mute is not None:
                        self.on_mute(False)  # a replay that ends muted: the exit is news
                    return []
                await self._wait()
            if batch := self._next_batch(limit):
                return batch

    @property
    def replayed(self) -> bool:
        """A reattach: every line and input of this member that the held process journaled
        before the attach has been routed and handed out (``CodexMultiplexer.replay``)."""
        replay = self._mux.replay
        if replay is None:
            return True
        first = self._line_offsets[0] if self._line_offsets else UNJOURNALED
        return replay.read() and not 0 <= first <= replay.through

    async def _wait(self) -> None:
        """Until a line arrives or the stream ends (:meth:`_end` sets it too)."""
        self._arrived = trio.Event()
        await self._arrived.wait()

    async def close_stdin(self) -> None:
        """The thread leaves the process (the process goes with its last thread)."""
        if self._left_running:
            return
        await self._mux.leave(self, ExitStatus(code=0, signal=None))

    async def wait(self) -> ExitStatus:
        await self._ended.wait()
        assert self._status is not None
        return self._status

    def leave_running(self) -> None:
        """The daemon goes away and leaves the process to its holder: this member ends
        (``LEFT_RUNNING``) without a word to the process; its thread runs on."""
        self._left_running = True
        self._end(LEFT_RUNNING)

    def stderr_tail(self) -> str:
        return self._mux.process.stderr_tail()

    def tee_stderr(self, sink: Callable[[bytes], None]) -> None:
        """The process's stderr (what it wrote so far, then each chunk) goes to ``sink``
        while this member is on it: it is every thread's, said once per thread's log."""
        tee = getattr(self._mux.process, "tee_stderr", None)
        if not callable(tee):
            return

        def while_on(chunk: bytes) -> None:
            if not self._ended.is_set():
                sink(chunk)

        tee(while_on)

    async def kill(self) -> None:
        """Ends this thread's use of the process at once; the process itself is killed
        only when no other thread is on it (one thread's teardown never ends another's)."""
        if self._left_running:
            return
        await self._mux.leave(self, ExitStatus(code=None, signal=int(signal.SIGKILL)), kill=True)

    # -- the multiplexer's side --------------------------------------------------

    def _deliver(self, line: bytes | OversizedLine | Input, offset: int) -> None:
        if self._ended.is_set():
            return
        self._keep(line, offset)
        self._arrived.set()

    def _end(self, status: ExitStatus) -> None:
        if self._ended.is_set():
            return
        self._status = status
        self._ended.set()
        self._arrived.set()


class CodexMultiplexer:
    """Routes one real ``codex app-server`` process's frames among its members.

    Everything it knows is learnt from the frames both ways (the requests' ids name
    their member), so a reattach rebuilds it by reading a held process's journal
    from its start: the earlier daemon's requests through :meth:`replayed`, the
    process's lines through :meth:`run`, in journal order."""

    def __init__(
        self,
        process: ProviderProcess,
        *,
        key: str = "",
        number: int = 1,
        holder_id: str | None = None,
        journaled: OffsetReads | None = None,
    ) -> None:
        self.process = process
        #: What processes are shared by (binary, home, overrides, environment).
        self.key = key
        #: This process's number among the pool's (``codex-<n>`` in status).
        self.number = number
        #: The holder of the process (None: a child of the daemon's).
        self.holder_id = holder_id
        #: A held process's reads, each line with its journal offset (else None).
        self._journaled = journaled
        self.members: list[VirtualProcess] = []
        self._by_tag: dict[str, VirtualProcess] = {}
        #: Every thread opened here: 0.169.0 keeps a thread loaded (its writer) after
        #: ``thread/unsubscribe`` for as long as the process lives, so another process
        #: resuming it is refused ("already has an active writer") — it comes back here.
        self.loaded: set[str] = set()
        self._ever = itertools.count(1)
        #: Which member's tag each native thread belongs to.
        self._owners: dict[str, str] = {}
        #: Lines of threads no member has yet, in process order, by thread: a subagent's
        #: thread speaks (``thread/status/changed``, its turn) before the spawn item
        #: naming it (``receiverThreadIds``) says whose it is, and 0.169.0 sends no
        #: ``thread/started`` for it.
        self._unclaimed: dict[str, list[bytes]] = {}
        self._unclaimed_lines = 0
        self._calls: dict[str, _Call] = {}
        self._ids = itertools.count(1)
        self._send_lock = trio.Lock()
        #: The tag whose thread/start, resume or fork is waiting for its reply.
        self._opener: str | None = None
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
        #: The daemon went away and left the process to its holder.
        self.left_running = False
        #: Called when the process is done (ended, or closing with no member).
        self.on_done: Callable[[CodexMultiplexer], None] | None = None
        #: A reattach's replay of the held process's journal (None: nothing replayed).
        self.replay: JournalReplay | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def name(self) -> str:
        return f"codex-{self.number}"

    @property
    def open(self) -> bool:
        """Takes new members: running, not closing."""
        return not self.closing and not self.ended.is_set() and not self.left_running

    def join(self, tag: str | None = None, *, committed: int = 0) -> VirtualProcess:
        """A new member (``tag``: what its ids carry, unique on the process; a reattach
        names the member's tag and the offset its log has everything up to)."""
        number = next(self._ever)
        member = VirtualProcess(self, number, tag or f"m{number}", committed)
        if self.ended.is_set():
            # The process ended before this thread joined it (one that fails at once may
            # be read to its exit before its first thread is there): the member ends
            # with that exit, as every member on it did, or nothing would ever end it.
            member._end(self.exit_status or LEFT_RUNNING)
            return member
        self.members.append(member)
        self._by_tag[member.tag] = member
        return member

    def member(self, tag: str) -> VirtualProcess | None:
        return self._by_tag.get(tag)

    def leave_running(self) -> None:
        """The daemon goes; the process stays with its holder for the next one."""
        self.left_running = True
        for member in list(self.members):
            member.leave_running()

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
        if not isinstance(local_id, (int, str)):
            await self._write(line)
            return
        if method == "initialize":
            while self._init_state == "pending":
                await self._init_done.wait()
            if self._init_state == "done":
                reply = msgspec.json.encode({"id": local_id, "result": self._init_result})
                member._deliver(reply, UNJOURNALED)
                return
        if method in THREAD_OPENERS:
            while self._opener is not None:
                await self._opener_free.wait()
        gid = global_id(member.tag, local_id)
        self._requested(gid, _Call(member.tag, local_id, method))
        frame["id"] = gid
        try:
            await self._write(msgspec.json.encode(frame))
        except BaseException:
            self._calls.pop(gid, None)
            if self._opener == member.tag and method in THREAD_OPENERS:
                self._free_opener()
            raise

    def _requested(self, gid: str, call: _Call) -> None:
        """The bookkeeping of a request going out (live, or read back from a journal)."""
        self._calls[gid] = call
        if call.method == "initialize" and self._init_state == "none":
            self._init_state = "pending"
        if call.method in THREAD_OPENERS:
            self._opener = call.tag
            self._opener_free = trio.Event()

    def replay_handed_out(self) -> None:
        """The held process's replay ended outside a read (its journal's last records
        before the attach are not lines: stderr): each member whose own replay is over
        with it is told (no read of its would look again until its next line)."""
        for member in list(self.members):
            if member.on_replayed is not None and member.replayed:
                member.on_replayed()

    def replayed(self, offset: int, line: bytes) -> None:
        """A line an earlier daemon wrote to this (held) process, from its journal:
        the state it left is rebuilt, and its member gets it back with its own id."""
        try:
            frame = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return
        if not isinstance(frame, dict):
            return
        method = frame.get("method")
        if not isinstance(method, str):
            return
        if method == "initialized":
            self._initialized_sent = True
            return
        ids = split_id(frame.get("id"))
        if ids is None:
            return
        tag, local_id = ids
        if tag == _OWN_TAG:
            if method == "thread/unsubscribe":
                params = frame.get("params")
                thread = params.get("threadId") if isinstance(params, dict) else None
                if isinstance(thread, str):
                    self._owners.pop(thread, None)
            return
        self._requested(frame["id"], _Call(tag, local_id, method))
        member = self._by_tag.get(tag)
        if member is not None:
            frame["id"] = local_id
            member._deliver(Input(msgspec.json.encode(frame)), offset)

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
            if self._owners.get(thread) == member.tag:
                del self._owners[thread]
        for gid, call in list(self._calls.items()):
            if call.tag == member.tag:
                del self._calls[gid]
                if call.method == "initialize":
                    self._initialize_failed()  # the next member sends its own
        if self._opener == member.tag:
            self._free_opener()
        if member in self.members:
            self.members.remove(member)
        self._by_tag.pop(member.tag, None)
        member._end(status)
        return threads, False

    async def unsubscribe(self, threads: list[str]) -> None:
        """Unload threads a member had: a later resume of one (here or elsewhere) works."""
        for thread in threads:
            if self.ended.is_set() or self.left_running:
                return
            gid = global_id(_OWN_TAG, next(self._ids))
            params = {"threadId": thread}
            frame = {"id": gid, "method": "thread/unsubscribe", "params": params}
            try:
                await self._write(msgspec.json.encode(frame))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return

    # -- incoming ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the real process and route its lines until it ends; then end every member.

        Cancelled (the pool goes), the process is killed, unless the daemon left it to
        its holder (:meth:`leave_running`)."""
        task_status.started()
        read = self._reads()
        eof = False
        try:
            while lines := await read():
                for offset, line in lines:
                    self._route(line, offset)
            eof = True
        finally:
            with trio.CancelScope(shield=True):
                if self.left_running:
                    self.ended.set()
                else:
                    await self._reap(eof)

    async def _reap(self, eof: bool) -> None:
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

    def _reads(self) -> OffsetReads:
        """A read's lines with their journal offsets: off a held process each keeps its
        own, off a child's pipe none has one."""
        if self._journaled is not None:
            return self._journaled
        read = line_reads(self.process)

        async def batch() -> list[tuple[int, bytes | OversizedLine]]:
            return [(UNJOURNALED, line) for line in await read()]

        return batch

    def _route(self, line: bytes | OversizedLine, offset: int = UNJOURNALED) -> None:
        if isinstance(line, OversizedLine):
            self._broadcast(line, offset)
            return
        try:
            route = _route_decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self._broadcast(line, offset)
            return
        if route.method is None and route.id is not None:
            self._response(route, line, offset)
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
                    live[0]._deliver(line, offset)
                return
            self._broadcast(line, offset)
            return
        owner = self._owners.get(thread)
        if owner is None:
            owner = self._owners.get(parent) if parent is not None else None
            if owner is None:
                # Not the opening member's by default: a subagent's thread speaks before
                # its spawn item names it. The opener's reply names its own (``_response``).
                self._keep_unclaimed(thread, line)
                return
            self._adopt(owner, thread, offset)
        if params is not None and params.item is not None and params.item.receiverThreadIds:
            # A collab call (``spawnAgent``) names its agents' threads: its thread's.
            for receiver in params.item.receiverThreadIds:
                if receiver not in self._owners:
                    self._adopt(owner, receiver, offset)
        member = self._by_tag.get(owner)
        if member is not None:
            member._deliver(line, offset)

    def _response(self, route: _Route, line: bytes, offset: int) -> None:
        call = self._calls.pop(route.id, None) if isinstance(route.id, str) else None
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
            if isinstance(ref, str):
                self._adopt(call.tag, ref, offset)
            if self._opener == call.tag:
                self._free_opener()
        member = self._by_tag.get(call.tag)
        if member is not None:
            member._deliver(msgspec.json.encode(frame), offset)

    def _initialize_failed(self) -> None:
        """No answer to share: whoever waits sends its own ``initialize``."""
        self._init_state = "none"
        self._init_done.set()
        self._init_done = trio.Event()

    def _adopt(self, tag: str, thread: str, offset: int) -> None:
        """``thread`` is the member ``tag``'s: its lines kept so far go to it first.

        They go at ``offset``, the line's that made the thread the member's: they are
        news to it from there (a reattach's replay mutes them only if the earlier daemon
        had that line, and them with it), and its offsets never go back."""
        self._owners[thread] = tag
        self.loaded.add(thread)
        member = self._by_tag.get(tag)
        if member is not None and not member.left:
            member.threads.add(thread)
        kept = self._unclaimed.pop(thread, [])
        self._unclaimed_lines -= len(kept)
        if member is not None:
            for line in kept:
                member._deliver(line, offset)

    def _keep_unclaimed(self, thread: str, line: bytes) -> None:
        """A line of a thread no member has: kept until a spawn item names the thread."""
        if self._unclaimed_lines >= UNCLAIMED_MAX:
            log.warning("codex %s: a frame of thread %s, which no member has", self.name, thread)
            return
        self._unclaimed.setdefault(thread, []).append(line)
        self._unclaimed_lines += 1

    def _broadcast(self, line: bytes | OversizedLine, offset: int) -> None:
        for member in self.members:
            member._deliver(line, offset)


__all__ = [
    "THREAD_OPENERS",
    "CodexMultiplexer",
    "JournalReplay",
    "VirtualProcess",
    "global_id",
    "split_id",
]
