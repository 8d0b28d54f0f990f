"""Shared helpers of the Codex adapter tests (no conftest: the core owner writes that)."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import trio

from adapters.codex.adapter import CodexAdapter
from adapters.codex.runtime import CodexRuntime
from adapters.protocol import NullRawSink, RawFrameSink, RuntimeConfig
from adapters.transport import ExitStatus, LaunchSpec, OversizedLine
from t3orch.ingest.queue import EventQueue
from tests.adapters.support import QueuedEvents

WAIT_S = 5.0


class ScriptedProcess:
    """An in-memory ProviderProcess a test drives by hand: push stdout, read stdin."""

    def __init__(self) -> None:
        self._out_send, self._out_recv = trio.open_memory_channel[bytes | OversizedLine](math.inf)
        self._in_send, self.stdin = trio.open_memory_channel[bytes](math.inf)
        self._status: ExitStatus | None = None
        self._exited = trio.Event()
        self.stdin_closed = False
        #: Answer ``initialize`` and swallow ``initialized`` without the test's help.
        self.auto_initialize = False

    @property
    def pid(self) -> int | None:
        return None

    @property
    def unread(self) -> int:
        """Lines emitted that the adapter has not read yet."""
        return self._out_recv.statistics().current_buffer_used

    def emit(self, frame: dict[str, Any] | bytes | OversizedLine) -> None:
        line = json.dumps(frame).encode() if isinstance(frame, dict) else frame
        self._out_send.send_nowait(line)

    def exit(self, code: int | None = 0, sig: int | None = None) -> None:
        if self._status is None:
            self._status = ExitStatus(code=code, signal=sig)
            self._out_send.close()
            self._exited.set()

    async def sent(self) -> dict[str, Any]:
        """The next frame the adapter wrote."""
        with trio.fail_after(WAIT_S):
            line = await self.stdin.receive()
        frame: dict[str, Any] = json.loads(line)
        return frame

    async def send_line(self, line: bytes) -> None:
        if self._status is not None:
            raise trio.BrokenResourceError("exited")
        if self.auto_initialize:
            frame = json.loads(line)
            if frame.get("method") == "initialize":
                self.emit({"id": frame["id"], "result": INIT_RESULT})
                return
            if frame.get("method") == "initialized":
                self.auto_initialize = False
                return
        await self._in_send.send(bytes(line))

    async def receive_line(self) -> bytes | OversizedLine | None:
        try:
            return await self._out_recv.receive()
        except trio.EndOfChannel:
            return None

    async def close_stdin(self) -> None:
        self.stdin_closed = True
        self.exit(0)

    async def wait(self) -> ExitStatus:
        await self._exited.wait()
        assert self._status is not None
        return self._status

    def stderr_tail(self) -> str:
        return ""

    async def kill(self) -> None:
        self.exit(None, int(signal.SIGKILL))
        await trio.lowlevel.checkpoint()


class BatchedProcess(ScriptedProcess):
    """A ScriptedProcess read a pipe read at a time: everything emitted so far at once."""

    async def receive_lines(self) -> list[bytes | OversizedLine]:
        first = await self.receive_line()
        if first is None:
            return []
        lines = [first]
        while True:
            try:
                lines.append(self._out_recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return lines


@attrs.define
class RecordingSink:
    """A RawFrameSink keeping what it was given, in order: ``(direction, line)``."""

    records: list[tuple[str, bytes]] = attrs.field(factory=list)

    def record(self, direction: Literal["incoming", "outgoing"], line: bytes) -> str:
        self.records.append((direction, line))
        return f"raw_{len(self.records)}"


@attrs.define
class ScriptedLauncher:
    process: ScriptedProcess = attrs.field(factory=ScriptedProcess)
    specs: list[LaunchSpec] = attrs.field(factory=list)

    async def launch(self, spec: LaunchSpec) -> ScriptedProcess:
        self.specs.append(spec)
        return self.process


class Events(QueuedEvents):
    """Collects a runtime's events; waits (bounded) for the ones a test expects."""

    def __init__(self, queue: EventQueue | None = None) -> None:
        super().__init__(queue, wait_s=WAIT_S)

    async def until(self, kind: type[Any]) -> Any:
        while True:
            event = await self.next()
            if isinstance(event, kind):
                return event


def config(**overrides: Any) -> RuntimeConfig:
    fields: dict[str, Any] = {
        "command": ["codex"],
        "env": {},
        "cwd": "/work",
        "request_timeout_s": 2.0,
    }
    fields.update(overrides)
    return RuntimeConfig(**fields)


INIT_RESULT = {
    "userAgent": "t3orch/0.169.0 (Debian 12.0.0; x86_64) unknown (t3orch; 0.1.0)",
    "codexHome": "/h",
    "platformFamily": "unix",
    "platformOs": "linux",
}


@asynccontextmanager
async def scripted_runtime(
    *,
    queue: EventQueue | None = None,
    process: ScriptedProcess | None = None,
    raw: RawFrameSink | None = None,
    **config_overrides: Any,
) -> AsyncIterator[tuple[CodexRuntime, ScriptedProcess, Events]]:
    """A CodexRuntime over a ScriptedProcess (``process``), past initialize/initialized."""
    launcher = ScriptedLauncher(process or ScriptedProcess())
    launcher.process.auto_initialize = True
    events = Events(queue)
    async with CodexAdapter().open_runtime(
        config(**config_overrides), launcher, events.queue, raw or NullRawSink()
    ) as runtime:
        assert isinstance(runtime, CodexRuntime)
        yield runtime, launcher.process, events


async def start_thread(
    runtime: CodexRuntime, process: ScriptedProcess, thread: str = "th1"
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.open_thread, None)
        request = await process.sent()
        assert request["method"] == "thread/start"
        process.emit({"id": request["id"], "result": {"thread": {"id": thread}}})
