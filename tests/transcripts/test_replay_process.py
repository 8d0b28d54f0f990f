"""The in-memory replay process, end to end, on a mock clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from adapters.replay_process import ReplayLauncher, ReplayProcess, open_replay_launcher
from adapters.transcript import (
    EmitInbound,
    ExpectOutbound,
    Transcript,
    load_transcript,
    parse_transcript,
)
from adapters.transcript_player import TranscriptMismatch
from adapters.transport import ExitStatus, LaunchSpec, OversizedLine, ProcessLauncher

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    # pytest-trio runs a test on any Clock fixture it requests: time jumps
    # whenever every task is blocked, so recorded delays cost no wall time.
    return trio.testing.MockClock(autojump_threshold=0)


def spec(max_line_bytes: int = 1 << 20) -> LaunchSpec:
    return LaunchSpec(argv=["provider"], env={}, cwd="/", max_line_bytes=max_line_bytes)


def transcript(*steps: dict[str, Any]) -> Transcript:
    header = {"step": "transcript_start", "provider": "codex"}
    return parse_transcript([json.dumps(header), *(json.dumps(s) for s in steps)])


async def receive_json(process: ReplayProcess) -> Any:
    line = await process.receive_line()
    assert isinstance(line, bytes), line
    return json.loads(line)


def test_the_launcher_satisfies_the_protocol() -> None:
    def check(launcher: ProcessLauncher) -> None:
        del launcher

    check(ReplayLauncher(transcript(), nursery=None))  # type: ignore[arg-type]


async def test_delays_stderr_raw_lines_and_exit(autojump_clock: trio.testing.MockClock) -> None:
    script = transcript(
        {"step": "expect_outbound", "frame": {"id": 1, "method": "initialize"}},
        {"step": "emit_stderr", "afterMs": 250, "text": "booting\n"},
        {"step": "emit_inbound", "afterMs": 1500, "frame": {"id": 1, "result": {}}},
        {"step": "emit_inbound_raw", "afterMs": 100, "line": "{truncated"},
        {"step": "emit_inbound_raw", "afterMs": 0, "line": "x" * 5000},
        {"step": "runtime_exit", "afterMs": 2000, "signal": 9},
    )
    with trio.fail_after(60):
        async with open_replay_launcher(script, speed=1) as launcher:
            process = await launcher.launch(spec(max_line_bytes=1024))
            start = trio.current_time()
            await process.send_line(b'{"id": 42, "method": "initialize"}')

            assert await receive_json(process) == {"id": 42, "result": {}}
            assert trio.current_time() - start == pytest.approx(1.75)
            assert process.stderr_tail() == "booting\n"

            assert await process.receive_line() == b"{truncated"
            assert trio.current_time() - start == pytest.approx(1.85)
            oversized = await process.receive_line()
            assert isinstance(oversized, OversizedLine)
            assert oversized.length == 5000
            assert oversized.head.startswith(b"xxxx")

            assert await process.receive_line() is None
            assert await process.wait() == ExitStatus(code=None, signal=9)
            assert trio.current_time() - start == pytest.approx(3.85)
            with pytest.raises(trio.BrokenResourceError):
                await process.send_line(b"{}")


async def test_speed_scales_and_zero_removes_delays(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = transcript(
        {"step": "emit_inbound", "afterMs": 1000, "frame": {"method": "a"}},
        {"step": "runtime_exit", "afterMs": 1000, "code": 0},
    )
    for speed, expected in ((4, 0.5), (0, 0.0)):
        async with open_replay_launcher(script, speed=speed) as launcher:
            process = await launcher.launch(spec())
            start = trio.current_time()
            assert await process.wait() == ExitStatus(code=0, signal=None)
            assert trio.current_time() - start == pytest.approx(expected)


async def test_kill_and_close_stdin(autojump_clock: trio.testing.MockClock) -> None:
    script = transcript(
        {"step": "expect_outbound", "frame": {"method": "never"}},
        {"step": "runtime_exit", "afterMs": 10, "code": 0, "onStdinClose": True},
    )
    async with open_replay_launcher(script, strict=False) as launcher:
        killed = await launcher.launch(spec())
        await killed.kill()
        assert await killed.wait() == ExitStatus(code=None, signal=9)
        assert await killed.receive_line() is None
        assert killed.pid is None

    async with open_replay_launcher(script, strict=False) as launcher:
        closed = await launcher.launch(spec())
        await closed.close_stdin()
        assert await closed.wait() == ExitStatus(code=0, signal=None)


async def test_a_strict_mismatch_crashes_the_launcher_nursery(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = transcript(
        {"step": "expect_outbound", "frame": {"id": 1, "method": "initialize"}},
        {"step": "emit_inbound", "frame": {"id": 1, "result": {}}},
    )
    with pytest.raises(ExceptionGroup) as info:
        async with open_replay_launcher(script) as launcher:
            process = await launcher.launch(spec())
            await process.send_line(b'{"id": 1, "method": "thread/start"}')
            await trio.sleep_forever()
    assert info.group_contains(TranscriptMismatch, match="expected outbound method 'initialize'")


async def test_recorded_codex_resume_plays_segment_by_segment(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The recorded kill-and-resume transcript, driven like an adapter would."""
    recorded = load_transcript(REPO / "fixtures" / "codex" / "resume.ndjson")
    async with open_replay_launcher(recorded) as launcher:
        for index, segment in enumerate(recorded.segments):
            process = await launcher.launch(spec(max_line_bytes=8 << 20))
            assert launcher.launched[index] is not None
            await drive(process, segment.steps, id_base=1000 * (index + 1))
            status = await process.wait()
            assert status == segment.steps[-1].status()  # type: ignore[union-attr]
        assert len(launcher.processes) == 2
        with pytest.raises(Exception, match="no segment 2"):
            await launcher.launch(spec())


async def drive(process: ReplayProcess, steps: Any, id_base: int) -> None:
    """Send each recorded client frame with our own ids; check the replies carry them."""
    sent: dict[Any, int] = {}
    for step in steps:
        if step.__struct_config__.tag == "expect_outbound":
            frame = dict(step.frame)
            if "method" in frame and "id" in frame:
                sent[frame["id"]] = frame["id"] = id_base + len(sent)
            await process.send_line(json.dumps(frame).encode())
        elif step.__struct_config__.tag == "emit_inbound":
            got = await receive_json(process)
            expected = step.frame
            if "method" not in expected and "id" in expected:
                assert got == {**expected, "id": sent[expected["id"]]}
            else:
                assert got == expected
        elif step.__struct_config__.tag == "emit_inbound_raw":
            assert await process.receive_line() == step.line.encode()
    assert await process.receive_line() is None


@pytest.mark.parametrize(
    "name", ["codex/plain_turn", "codex/approval_accept", "codex/interrupt", "codex/fork"]
)
async def test_recorded_codex_transcripts_replay_strictly(
    autojump_clock: trio.testing.MockClock, name: str
) -> None:
    recorded = load_transcript(REPO / "fixtures" / f"{name}.ndjson")
    async with open_replay_launcher(recorded) as launcher:
        process = await launcher.launch(spec(max_line_bytes=8 << 20))
        await drive(process, recorded.segments[0].steps, id_base=500)
        assert (await process.wait()).code == 0


@pytest.mark.skipif(
    not (REPO / "fixtures" / "claude" / "bash_allowed.ndjson").exists(),
    reason="claude fixtures not recorded yet",
)
async def test_recorded_claude_transcript_replays(autojump_clock: trio.testing.MockClock) -> None:
    recorded = load_transcript(REPO / "fixtures" / "claude" / "bash_allowed.ndjson")
    async with open_replay_launcher(recorded) as launcher:
        process = await launcher.launch(spec(max_line_bytes=8 << 20))
        # Claude control requests we send carry request_id; use our own ones.
        replies: list[Any] = []
        counter = 0
        for step in recorded.segments[0].steps:
            if isinstance(step, ExpectOutbound):
                frame = dict(step.frame)
                if frame.get("type") == "control_request":
                    counter += 1
                    frame["request_id"] = f"ours-{counter}"
                await process.send_line(json.dumps(frame).encode())
            elif isinstance(step, EmitInbound):
                replies.append(await receive_json(process))
        assert any(
            reply.get("type") == "control_response"
            and reply["response"].get("request_id") == "ours-1"
            for reply in replies
        )
        await process.close_stdin()
        await process.wait()
