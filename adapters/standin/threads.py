"""``--threads``: one stand-in process plays a transcript once per thread it hosts.

The stand-in's multi-thread mode, so the supervision of shared Codex processes
(issue 21) can be tested without the real binary: the process behaves like one
``codex app-server`` hosting many threads. Each thread-opening request
(``thread/start``, ``thread/resume``) after the first thread's gets a player of
its own, which is fed the client's first ``initialize`` (its answer dropped: the
client heard it once) and then the request. Player ``k``'s thread id is the
recorded one with ``-k`` appended (or, for a resume, the id the client resumes),
both ways, so threads stay apart on the wire;
its server requests' ids become ``"k:<id>"``, so the client's answers find it.
Client frames are routed by ``params.threadId``; anything else goes to the first.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import trio

from adapters.line_reader import BoundedLineReader
from adapters.transcript import EmitInbound, Transcript
from adapters.transcript_player import PlayerSink, TranscriptPlayer
from adapters.transport import ExitStatus, OversizedLine

OPENERS = frozenset({"thread/start", "thread/resume"})
#: The id of the ``initialize`` a later player is fed (its answer is dropped).
_INIT_ID = "standin-initialize"


def recorded_thread(transcript: Transcript, segment: int) -> str | None:
    """The thread id the segment's first thread-opening reply names."""
    for step in transcript.segment(segment).steps:
        if isinstance(step, EmitInbound):
            result = step.frame.get("result")
            thread = result.get("thread") if isinstance(result, dict) else None
            if isinstance(thread, dict) and isinstance(thread.get("id"), str):
                return str(thread["id"])
    return None


class _TaggedSink:
    """Player ``k``'s output: its thread id (as the client knows it) and server-request ids
    tagged."""

    def __init__(
        self,
        sink: PlayerSink,
        k: int,
        thread: str | None,
        aliases: list[str],
        lock: trio.Lock,
    ) -> None:
        self._sink = sink
        #: One writer at a time on the one stdout (a slow reader, a holder, blocks a send).
        self._lock = lock
        self._k = k
        self._thread = thread
        self._aliases = aliases

    async def stdout_line(self, line: bytes) -> None:
        alias = self._aliases[self._k]
        if self._thread is not None and alias != self._thread:
            line = line.replace(f'"{self._thread}"'.encode(), f'"{alias}"'.encode())
        if self._k:
            frame = msgspec.json.decode(line)
            if isinstance(frame, dict):
                if frame.get("id") == _INIT_ID:
                    return  # the client heard initialize's answer from the first thread
                if "method" in frame and "id" in frame:
                    frame["id"] = f"{self._k}:{msgspec.json.encode(frame['id']).decode()}"
                    line = msgspec.json.encode(frame)
        async with self._lock:
            await self._sink.stdout_line(line)

    async def stderr_text(self, text: str) -> None:
        if self._k == 0:
            await self._sink.stderr_text(text)


async def serve_threads(
    transcript: Transcript,
    make_player: Any,
    segment: int,
    stdin: trio.abc.ReceiveStream,
    sink: PlayerSink,
    max_line_bytes: int,
) -> ExitStatus:
    """Play a player per thread until stdin closes; exit as the first player does."""
    thread = recorded_thread(transcript, segment)
    channels: list[trio.MemorySendChannel[bytes]] = []
    #: The thread id the client knows each player's thread by.
    aliases: list[str] = []
    owners: dict[str, int] = {}
    first_init: dict[str, Any] | None = None
    initialized: bytes | None = None
    status: list[ExitStatus] = []
    stdout_lock = trio.Lock()

    async with trio.open_nursery() as nursery:

        async def play(k: int, receive: trio.MemoryReceiveChannel[bytes]) -> None:
            player: TranscriptPlayer = make_player()
            ended = await player.play(receive, _TaggedSink(sink, k, thread, aliases, stdout_lock))
            if k == 0:
                status.append(ended)

        def player_for(alias: str | None) -> int:
            """The player of a thread being opened: the first, if it has none yet."""
            if aliases and aliases[0] == "":
                k = 0
            else:
                k = len(channels)
                send, receive = trio.open_memory_channel[bytes](math.inf)
                channels.append(send)
                aliases.append("")
                nursery.start_soon(play, k, receive)
                if first_init is not None:
                    send.send_nowait(msgspec.json.encode({**first_init, "id": _INIT_ID}))
                    if initialized is not None:
                        send.send_nowait(initialized)
            aliases[k] = alias or (thread if k == 0 else f"{thread}-{k}") or ""
            owners[aliases[k]] = k
            return k

        send0, receive0 = trio.open_memory_channel[bytes](math.inf)
        channels.append(send0)
        aliases.append("")
        nursery.start_soon(play, 0, receive0)
        reader = BoundedLineReader(stdin, max_line_bytes)
        while (line := await reader.receive_line()) is not None:
            if isinstance(line, OversizedLine):
                continue
            try:
                frame = msgspec.json.decode(line)
            except msgspec.DecodeError:
                frame = None
            if not isinstance(frame, dict):
                channels[0].send_nowait(line)
                continue
            method = frame.get("method")
            raw_params = frame.get("params")
            params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
            ref = params.get("threadId")
            target = 0
            if method == "initialize" and first_init is None:
                first_init = frame
            elif method == "initialized" and initialized is None:
                initialized = line
            elif method == "thread/start":
                target = player_for(None)
            elif method == "thread/resume":
                known = owners.get(ref) if isinstance(ref, str) else None
                target = known if known is not None else player_for(ref)
            elif isinstance(ref, str):
                target = owners.get(ref, 0)
            elif method is None and isinstance(frame.get("id"), str) and ":" in frame["id"]:
                k, _, original = frame["id"].partition(":")
                if k.isdigit() and int(k) < len(channels):
                    target = int(k)
                    frame["id"] = msgspec.json.decode(original)
                    line = msgspec.json.encode(frame)
            alias = aliases[target]
            if thread is not None and alias and alias != thread:
                line = line.replace(f'"{alias}"'.encode(), f'"{thread}"'.encode())
            channels[target].send_nowait(line)
        for send in channels:
            send.close()
    return status[0] if status else ExitStatus(code=0, signal=None)


__all__ = ["serve_threads"]
