"""A Claude runtime reattached to a held CLI (issue 20): the journal, replayed muted through
what the log has and live after it, gives every event exactly once, and the permission
request pending across the restart is answered through the new runtime.

The CLI is the stand-in playing a recorded ``claude`` transcript, under a real holder."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio
import trio.testing

from adapters.claude import ClaudeAdapter, ClaudeOptions
from adapters.claude.journal import turn_sent
from adapters.claude.runtime import ClaudeRuntime
from adapters.offset_lines import feed_offsets
from adapters.ownership import this_process
from adapters.protocol import NullRawSink, RequestAnswer, RuntimeConfig
from adapters.transport import LaunchSpec
from supervisor.holder.client import HeldProcess, HolderLauncher, ReattachLauncher
from supervisor.holder.layout import HeldPaths
from supervisor.holder.wire import Kind, iter_file
from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import (
    JournalOffset,
    ProviderEvent,
    RequestOpened,
    RequestResolved,
    RuntimeExited,
    TurnCompleted,
)
from tests.holder.support import stderr_a_moment_later

from .fake_process import FakeLauncher, FakeProcess
from .support import Events

REPO = Path(__file__).resolve().parents[2]
#: The real 2.1.327 CLI: a Bash tool call, its can_use_tool answered allow, the reply.
TRANSCRIPT = REPO / "fixtures" / "claude" / "bash_allowed.ndjson"
SESSION = "b7cc1f48-8779-401a-b10d-661c0ad27021"
PROMPT = "RUN_BASH: touch x && echo hi"
CONFIG = RuntimeConfig(command=["claude"], env={}, cwd="/tmp", request_timeout_s=10.0)


@attrs.define
class _StandinLaunch:
    """A holder launcher whose provider is the stand-in playing the transcript (it takes
    none of the CLI's arguments); every launch is fed to ``events``."""

    inner: HolderLauncher | ReattachLauncher
    events: EventQueue
    held: list[HeldProcess] = attrs.field(factory=list)
    transcript: Path = TRANSCRIPT
    speed: str = "0"

    async def launch(self, spec: LaunchSpec) -> HeldProcess:
        argv = [
            sys.executable,
            "-m",
            "adapters.standin",
            str(self.transcript),
            "--speed",
            self.speed,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        held = await self.inner.launch(LaunchSpec(argv=argv, env=env, cwd="/tmp"))
        feed_offsets(held, held.holder_id, self.events)
        self.held.append(held)
        return held


_Launched = tuple[ClaudeRuntime, _StandinLaunch]


def _canonical(events: list[ProviderEvent]) -> list[ProviderEvent]:
    # Raw ids are each runtime's own numbering; offsets are the transport's.
    out = [e for e in events if not isinstance(e, JournalOffset)]
    return [
        msgspec.structs.replace(e, raw_event_id=None)
        if "raw_event_id" in e.__struct_fields__
        else e
        for e in out
    ]


async def _answer(runtime: ClaudeRuntime, events: Events) -> None:
    request = await events.until(RequestOpened)
    await runtime.respond(request.native_request_ref, RequestAnswer(decision="accept"))


async def _open(runtime: ClaudeRuntime) -> None:
    assert await runtime.open_thread(None, session_id=SESSION) == SESSION
    await runtime.start_turn(PROMPT)


@asynccontextmanager
async def _held_runtime(
    root: Path, events: Events, transcript: Path = TRANSCRIPT, speed: str = "0"
) -> AsyncIterator[_Launched]:
    """A runtime whose CLI starts under a holder, its thread opened and its turn sent."""
    async with trio.open_nursery() as nursery:
        launch = _StandinLaunch(
            HolderLauncher(nursery, root, 30, this_process().token()),
            events.queue,
            transcript=transcript,
            speed=speed,
        )
        async with ClaudeAdapter(ClaudeOptions()).open_runtime(
            CONFIG, launch, events.queue, NullRawSink()
        ) as runtime:
            await _open(runtime)
            yield runtime, launch
        nursery.cancel_scope.cancel()


def _goes_away(events: Events, launch: _StandinLaunch) -> tuple[HeldPaths, int]:
    """The daemon goes away, its provider left to the holder: its journal's paths and the
    offset the log holds everything queued so far through."""
    (held,) = launch.held
    held.report_delivered()
    committed = max(e.offset for e in events.drain() if isinstance(e, JournalOffset))
    events.queue.muted = True
    held.on_mute = None
    held.leave_running()
    return held.paths, committed


async def _uninterrupted(root: Path) -> list[ProviderEvent]:
    events = Events(wait_s=15)
    async with _held_runtime(root, events) as (runtime, _):
        await _answer(runtime, events)
        await events.until(RuntimeExited)
    return events.drain()


async def test_a_reattach_replays_the_journal_muted_then_live_every_event_once(
    tmp_path: Path,
) -> None:
    reference = _canonical(await _uninterrupted(tmp_path / "ref"))
    assert any(isinstance(e, RequestResolved) for e in reference)

    # The first daemon: the turn runs up to the permission request, then it goes away.
    first = Events(wait_s=15)
    root = tmp_path / "held"
    async with _held_runtime(root, first) as (_, launch):
        await first.until(RequestOpened)
        paths, committed = _goes_away(first, launch)
    before = first.seen

    # The next daemon: reattach, replay muted through `committed`, answer, run to the end.
    second = Events(wait_s=15)
    async with trio.open_nursery() as nursery:
        launch = _StandinLaunch(ReattachLauncher(nursery, paths, committed), second.queue)
        config = attrs.evolve(CONFIG, reattaching=True)
        async with ClaudeAdapter(ClaudeOptions()).open_runtime(
            config, launch, second.queue, NullRawSink()
        ) as runtime:
            runtime.adopt(SESSION, None)
            # At once: the answer waits for the replay to reach the request.
            await runtime.respond(
                next(e for e in before if isinstance(e, RequestOpened)).native_request_ref,
                RequestAnswer(decision="accept"),
            )
            await second.until(TurnCompleted)
            await second.until(RuntimeExited)
    after = second.drain()

    assert _canonical(before + after) == reference


def _stderr_after_the_request(tmp: Path) -> Path:
    """The transcript with the CLI writing on stderr a moment after it asks (played at
    speed 1, every other step at once)."""
    steps = [json.loads(line) for line in TRANSCRIPT.read_text().splitlines()]
    for step in steps:
        step.pop("afterMs", None)
    ask = next(i for i, step in enumerate(steps) if '"can_use_tool"' in json.dumps(step))
    noise = [{"step": "emit_stderr", "text": f"warming up {k}\n"} for k in range(3)]
    noise[0]["afterMs"] = 300
    path = tmp / "stderr_after_request.ndjson"
    path.write_text(
        "".join(json.dumps(s) + "\n" for s in [*steps[: ask + 1], *noise, *steps[ask + 1 :]])
    )
    return path


async def test_a_replay_ending_on_stderr_is_over_at_its_end_an_answer_does_not_wait_the_bound(
    tmp_path: Path,
) -> None:
    """What the journal held before the attach ends with stderr records, after the
    permission request's line: the replay is over once they are handed out, not at the
    next line (which never comes: the CLI waits for the answer)."""
    transcript = _stderr_after_the_request(tmp_path)
    first = Events(wait_s=15)
    root = tmp_path / "held"
    async with _held_runtime(root, first, transcript, speed="1") as (_, launch):
        request = await first.until(RequestOpened)
        (held,) = launch.held
        with trio.fail_after(15):
            while b"warming up 2" not in bytes(held._stderr_tail):  # noqa: ASYNC110
                await trio.sleep(0.02)
        paths, committed = _goes_away(first, launch)
    last = list(iter_file(str(paths.journal)))[-1][1]
    assert last.kind is Kind.ERR  # the journal ends on stderr

    second = Events(wait_s=15)
    gate = trio.Event()
    async with trio.open_nursery() as nursery:
        launch = _StandinLaunch(
            ReattachLauncher(nursery, paths, committed, gate),
            second.queue,
            transcript=transcript,
            speed="1",
        )
        config = attrs.evolve(CONFIG, reattaching=True, request_timeout_s=30.0)
        async with ClaudeAdapter(ClaudeOptions()).open_runtime(
            config, launch, second.queue, NullRawSink()
        ) as runtime:
            (held,) = launch.held
            stderr_a_moment_later(held)
            gate.set()
            runtime.adopt(SESSION, None)
            with trio.fail_after(10):  # not the request bound (30 s)
                await runtime.respond(request.native_request_ref, RequestAnswer(decision="accept"))
            await second.until(TurnCompleted)
            await second.until(RuntimeExited)


def test_a_turn_is_sent_when_its_user_frame_comes_after_the_last_result_the_log_has() -> None:
    """A turn whose row does not say how far the journal was read when it began (a
    recovery begun on the process before, a row from before it was recorded)."""
    user = b'{"type":"user","session_id":"","message":{"role":"user","content":"x"}}'
    result = b'{"type":"result","subtype":"success","is_error":false}'
    # A tool result the CLI prints is a "user" frame too, but not one the daemon wrote.
    echoed = b'{"type":"user","message":{"role":"user","content":[]}}'
    assert turn_sent([("in", 1, user)], 0, None)
    assert not turn_sent([], 0, None)
    # The previous turn ended in the log; the active one's input was never written.
    assert not turn_sent([("in", 1, user), ("out", 2, echoed), ("out", 3, result)], 3, None)
    sent = [("in", 1, user), ("out", 2, result), ("in", 3, user), ("out", 4, echoed)]
    assert turn_sent(sent, 2, None)
    # The active turn ended while no daemon read the journal: it was sent all the same.
    assert turn_sent([("in", 1, user), ("out", 2, echoed), ("out", 3, result)], 2, None)
    assert not turn_sent([("out", 1, b'{"type":"system","subtype":"init"}')], 1, None)


def test_a_turn_is_sent_when_a_user_frame_is_journaled_after_the_point_it_was_begun_at() -> None:
    user = b'{"type":"user","session_id":"","message":{"role":"user","content":"x"}}'
    result = b'{"type":"result","subtype":"success","is_error":false}'
    echoed = b'{"type":"user","message":{"role":"user","content":[]}}'
    previous = [("in", 1, user), ("out", 2, echoed), ("out", 3, result)]
    # Begun once the previous turn's end was read (3), whatever offset the log committed:
    # never sent, even with that end not committed (0).
    assert not turn_sent(previous, 0, 3)
    assert not turn_sent([*previous, ("out", 4, echoed)], 0, 3)
    # Sent: running, or ended while no daemon read the journal.
    assert turn_sent([*previous, ("in", 4, user)], 0, 3)
    assert turn_sent([*previous, ("in", 4, user), ("out", 5, result)], 3, 3)


class _ReplayedProcess(FakeProcess):
    """A scripted CLI being reattached to: the test plays the journal (``on_input`` for
    what the earlier daemon wrote) and says when the replay is over."""

    def __init__(self) -> None:
        super().__init__()
        self.on_input: Callable[[int, bytes], None] | None = None
        self.on_replayed: Callable[[], None] | None = None
        self.replayed = False


def _hook(request_id: str) -> dict[str, Any]:
    return {
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": "hook_callback", "callback_id": "hook_0", "input": {}},
    }


@asynccontextmanager
async def _replaying() -> AsyncIterator[_ReplayedProcess]:
    """A runtime reattached to a scripted CLI, adopted: its journal's replay begins."""
    launcher = FakeLauncher(_ReplayedProcess)
    config = attrs.evolve(CONFIG, reattaching=True)
    async with ClaudeAdapter(ClaudeOptions()).open_runtime(
        config, launcher, EventQueue(), NullRawSink()
    ) as runtime:
        (process,) = launcher.processes
        assert isinstance(process, _ReplayedProcess)
        runtime.adopt(SESSION, None)
        yield process


async def test_what_the_runtime_answers_itself_waits_for_the_replay_and_is_answered_once() -> None:
    async with _replaying() as process:
        assert process.on_input is not None
        # The journal: two hooks the CLI asked; the earlier daemon answered the first.
        process.emit(_hook("h1"))
        process.emit(_hook("h2"))
        await trio.testing.wait_all_tasks_blocked()
        answer = {"subtype": "success", "request_id": "h1", "response": {"continue": True}}
        process.on_input(9, json.dumps({"type": "control_response", "response": answer}).encode())
        await trio.testing.wait_all_tasks_blocked()
        assert process.sent == []  # nothing answered while replaying
        process.replayed = True
        process.emit(_hook("h3"))  # live
        with trio.fail_after(5):
            while len(process.sent) < 2:  # noqa: ASYNC110 (the fake has no event for it)
                await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked()
        answered = [frame["response"]["request_id"] for frame in process.sent]
        assert sorted(answered) == ["h2", "h3"]


async def test_what_the_runtime_answers_itself_is_answered_when_the_replay_ends_on_stderr() -> None:
    """The journal's last records before the attach are stderr, after a hook the earlier
    daemon had not answered: the held process says the replay ended (no line follows),
    and the hook is answered then, not at the CLI's next line (it waits for the answer)."""
    async with _replaying() as process:
        process.emit(_hook("h1"))
        await trio.testing.wait_all_tasks_blocked()
        assert process.sent == []  # held back while replaying
        process.replayed = True  # the stderr records after it are handed out
        assert process.on_replayed is not None
        process.on_replayed()
        with trio.fail_after(5):
            while not process.sent:  # noqa: ASYNC110 (the fake has no event for it)
                await trio.sleep(0.01)
        assert [frame["response"]["request_id"] for frame in process.sent] == ["h1"]
