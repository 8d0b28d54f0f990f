"""A scripted in-memory provider process: the test plays the CLI frame by frame."""

from __future__ import annotations

import json
import math
import signal
from typing import Any

import trio

from adapters.transport import LEFT_RUNNING, ExitStatus, LaunchSpec, OversizedLine

WAIT_S = 5.0


async def _first(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


class FakeProcess:
    def __init__(self) -> None:
        self._out_send, self._out_receive = trio.open_memory_channel[bytes | OversizedLine](
            math.inf
        )
        self.sent: list[dict[str, Any]] = []
        self._sent_changed = trio.Event()
        self.stdin_closed = False
        self.stderr = ""
        self.status: ExitStatus | None = None
        self._exited = trio.Event()
        #: Exit by itself when stdin closes (what the CLI does).
        self.exit_on_stdin_close = True
        self._left = trio.Event()

    # -- ProviderProcess ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return 4242

    async def send_line(self, line: bytes) -> None:
        await trio.lowlevel.checkpoint()
        if self.status is not None or self.stdin_closed:
            raise trio.BrokenResourceError("gone")
        self.sent.append(json.loads(line))
        self._sent_changed.set()
        self._sent_changed = trio.Event()

    async def receive_line(self) -> bytes | OversizedLine | None:
        try:
            return await self._out_receive.receive()
        except trio.EndOfChannel:
            return None

    async def close_stdin(self) -> None:
        await trio.lowlevel.checkpoint()
        self.stdin_closed = True
        if self.exit_on_stdin_close:
            self.exit(ExitStatus(code=0, signal=None))

    async def wait(self) -> ExitStatus:
        async with trio.open_nursery() as nursery:
            for event in (self._exited, self._left):
                nursery.start_soon(_first, event, nursery.cancel_scope)
        if self.status is None:
            return LEFT_RUNNING
        return self.status

    def stderr_tail(self) -> str:
        return self.stderr

    async def kill(self) -> None:
        await trio.lowlevel.checkpoint()
        if not self._left.is_set():
            self.exit(ExitStatus(code=None, signal=int(signal.SIGKILL)))

    def leave_running(self) -> None:
        """Left to its holder, as a held CLI is when the daemon exits: never killed, and
        its output does not end; waited on, it says ``LEFT_RUNNING``."""
        self._left.set()

    # -- the test's side ------------------------------------------------------------

    @property
    def unread(self) -> int:
        """Lines emitted that the runtime has not read yet."""
        return self._out_receive.statistics().current_buffer_used

    def emit(self, frame: dict[str, Any] | bytes | OversizedLine) -> None:
        line = json.dumps(frame).encode() if isinstance(frame, dict) else frame
        self._out_send.send_nowait(line)

    def exit(self, status: ExitStatus) -> None:
        if self.status is None:
            self.status = status
            self._out_send.close()
            self._exited.set()

    async def next_sent(self, index: int) -> dict[str, Any]:
        """The ``index``-th frame the adapter wrote (waits for it, bounded)."""
        with trio.fail_after(WAIT_S):
            while len(self.sent) <= index:
                await self._sent_changed.wait()
        return self.sent[index]

    async def answer_initialize(self, index: int = 0) -> dict[str, Any]:
        request = await self.next_sent(index)
        assert request["request"]["subtype"] == "initialize"
        self.respond_ok(request["request_id"], {"commands": []})
        return request

    def respond_ok(self, request_id: str, response: dict[str, Any]) -> None:
        self.emit(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": response},
            }
        )


class BatchingFakeProcess(FakeProcess):
    """Hands out every line emitted so far in one read, as a real pipe read does."""

    async def receive_line(self) -> bytes | OversizedLine | None:
        raise AssertionError("the reader reads a pipe read at a time (receive_lines)")

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        try:
            lines = [await self._out_receive.receive()]
        except trio.EndOfChannel:
            return []
        while True:
            try:
                lines.append(self._out_receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return lines


class FakeLauncher:
    def __init__(self, factory: type[FakeProcess] = FakeProcess) -> None:
        self.specs: list[LaunchSpec] = []
        self.processes: list[FakeProcess] = []
        self._launched = trio.Event()
        self._factory = factory

    async def launch(self, spec: LaunchSpec) -> FakeProcess:
        await trio.lowlevel.checkpoint()
        process = self._factory()
        self.specs.append(spec)
        self.processes.append(process)
        self._launched.set()
        self._launched = trio.Event()
        return process

    async def process(self, index: int = 0) -> FakeProcess:
        with trio.fail_after(WAIT_S):
            while len(self.processes) <= index:
                await self._launched.wait()
        return self.processes[index]
