"""The stand-in provider as a real child process over real pipes, through adapters/process.py."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from adapters.process import open_child_process
from adapters.standin import GARBAGE_LINE
from adapters.transport import ExitStatus, OversizedLine

from .helpers import (
    REPO,
    STANDIN_FIXTURES,
    assert_group_empty,
    receive,
    receive_until,
    send,
    standin_spec,
)

CODEX_ECHO = STANDIN_FIXTURES / "codex_echo.ndjson"
CLAUDE_ECHO = STANDIN_FIXTURES / "claude_echo.ndjson"
THREAD = "01a22d23-29ff-7810-a22a-20759d90506a"

INITIALIZE = {"id": 7, "method": "initialize", "params": {"clientInfo": {"name": "test"}}}


async def codex_handshake(child: Any) -> None:
    await send(child, INITIALIZE)
    reply = await receive(child)
    assert reply["id"] == 7 and "userAgent" in reply["result"]
    assert (await receive(child))["method"] == "configWarning"
    await send(child, {"method": "initialized"})
    await send(child, {"id": 8, "method": "thread/start", "params": {"cwd": "/w"}})
    frames = await receive_until(child, "thread/started")
    assert frames[-2]["id"] == 8


async def codex_turn(child: Any, request_id: int) -> list[Any]:
    await send(
        child,
        {"id": request_id, "method": "turn/start", "params": {"threadId": THREAD, "input": []}},
    )
    return await receive_until(child, "turn/completed")


async def test_plays_codex_echo_and_stops_gracefully() -> None:
    with trio.fail_after(20):
        async with open_child_process(standin_spec(CODEX_ECHO, "--speed", "0")) as child:
            await codex_handshake(child)
            frames = await codex_turn(child, 9)
            assert frames[0] == {
                "id": 9,
                "result": {
                    "turn": {
                        "id": "standin-turn-1",
                        "rootTurnId": "standin-turn-1",
                        "items": [],
                        "itemsView": "notLoaded",
                        "status": "inProgress",
                        "error": None,
                        "startedAt": None,
                        "completedAt": None,
                        "durationMs": None,
                    }
                },
            }
            deltas = [f["params"]["delta"] for f in frames if f.get("method", "").endswith("delta")]
            assert "".join(deltas) == "ack: hello"
            assert frames[-1]["params"]["turn"]["status"] == "completed"
            assert "bubblewrap" in child.stderr_tail()
            result = await child.stop(grace_close=5, grace_term=5)
            assert result.stage == "close"
            assert result.status == ExitStatus(code=0, signal=None)
            await assert_group_empty(child.pgid)


async def test_loop_turns_answers_every_turn_with_fresh_ids() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--loop-turns", "--strict")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await codex_handshake(child)
            for turn in range(1, 4):
                frames = await codex_turn(child, 100 + turn)
                assert frames[0]["id"] == 100 + turn
                assert frames[-1]["params"]["turn"]["id"] == f"standin-turn-{turn}"
            await child.close_stdin()
            assert await child.wait() == ExitStatus(code=0, signal=None)


async def test_plays_claude_echo() -> None:
    with trio.fail_after(20):
        async with open_child_process(standin_spec(CLAUDE_ECHO, "--speed", "0")) as child:
            await send(
                child,
                {
                    "type": "control_request",
                    "request_id": "req_9_live",
                    "request": {"subtype": "initialize", "hooks": None},
                },
            )
            reply = await receive(child)
            assert reply["type"] == "control_response"
            assert reply["response"]["request_id"] == "req_9_live"
            await send(
                child,
                {
                    "type": "user",
                    "session_id": "",
                    "parent_tool_use_id": None,
                    "message": {"role": "user", "content": "hi"},
                },
            )
            frames = await receive_until(child, "result")
            assert frames[-1]["result"] == "ack: hello there"
            assert frames[-1]["is_error"] is False
            await child.close_stdin()
            assert (await child.wait()).code == 0


async def test_crash_after_frames_is_observed_at_once() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--crash-after-frames", "1")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await send(child, INITIALIZE)
            assert (await receive(child))["id"] == 7
            crashed_at = trio.current_time()
            assert await child.receive_line() is None
            assert await child.wait() == ExitStatus(code=None, signal=signal.SIGKILL)
            assert trio.current_time() - crashed_at < 1.0
            assert "crashing after 1 frames" in child.stderr_tail()


async def test_hang_on_initialize_needs_the_stop_ladder() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--hang-on-initialize")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await send(child, INITIALIZE)
            with trio.move_on_after(0.5) as waited:
                await child.receive_line()
            assert waited.cancelled_caught, "a hung provider must not answer initialize"
            result = await child.stop(grace_close=0.3, grace_term=5)
            assert result.stage == "term", "closing stdin must not end a hung provider"
            assert result.status == ExitStatus(code=None, signal=signal.SIGTERM)
            await assert_group_empty(child.pgid)


async def test_stop_after_frames_leaves_a_stopped_process() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--stop-after-frames", "1")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await send(child, INITIALIZE)
            assert (await receive(child))["id"] == 7
            with trio.move_on_after(0.5) as waited:
                await child.receive_line()
            assert waited.cancelled_caught, "a stopped provider writes nothing"
            assert psutil.Process(child.pid).status() == psutil.STATUS_STOPPED
            result = await child.stop(grace_close=0.2, grace_term=0.3)
            assert result.stage == "kill"  # SIGTERM waits for a SIGCONT; SIGKILL does not
            await assert_group_empty(child.pgid)


async def test_close_stdout_after_frames_ends_stdout_and_lives_on() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--close-stdout-after-frames", "1")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await send(child, INITIALIZE)
            assert (await receive(child))["id"] == 7
            assert await child.receive_line() is None  # end of file ...
            with trio.move_on_after(0.5) as waited:
                await child.wait()
            assert waited.cancelled_caught, "... from a process that lives on"
            assert child.status is None
            await child.kill()
            assert (await child.wait()).signal == signal.SIGKILL


async def test_garbage_after_frames_writes_one_non_json_line() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--garbage-after-frames", "1")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await send(child, INITIALIZE)
            assert (await receive(child))["id"] == 7
            assert await child.receive_line() == GARBAGE_LINE
            assert (await receive(child))["method"] == "configWarning"
            await child.kill()


async def test_slow_ms_delays_every_frame() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--slow-ms", "300")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await send(child, INITIALIZE)
            sent_at = trio.current_time()
            await receive(child)
            await receive(child)
            assert trio.current_time() - sent_at >= 0.6
            await child.kill()


async def test_recorded_delays_are_honoured_and_speed_scales_them() -> None:
    # codex_echo answers initialize 142 + 69 ms after it arrives.
    for speed, low, high in (("1", 0.2, 2.0), ("0.25", 0.84, 3.0)):
        with trio.fail_after(20):
            async with open_child_process(standin_spec(CODEX_ECHO, "--speed", speed)) as child:
                await send(child, INITIALIZE)
                sent_at = trio.current_time()
                await receive(child)
                assert low <= trio.current_time() - sent_at < high
                await child.kill()


async def test_exit_code_override() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--exit-code", "7")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await child.close_stdin()
            assert await child.wait() == ExitStatus(code=7, signal=None)


async def test_a_recorded_signal_exit_is_a_real_signal_death() -> None:
    resume = REPO / "fixtures" / "codex" / "resume.ndjson"
    with trio.fail_after(20):
        async with open_child_process(standin_spec(resume, "--speed", "0")) as child:
            await send(child, INITIALIZE)
            await send(child, {"method": "initialized"})
            await send(child, {"id": 8, "method": "thread/start", "params": {}})
            await send(child, {"id": 9, "method": "turn/start", "params": {}})
            assert await child.wait() == ExitStatus(code=None, signal=signal.SIGKILL)


def write_transcript(path: Path, *steps: dict[str, Any]) -> Path:
    header = {"step": "transcript_start", "provider": "codex", "synthetic": True, "notes": "test"}
    path.write_text("".join(json.dumps(s) + "\n" for s in (header, *steps)))
    return path


async def test_oversized_lines_are_bounded_and_reading_continues(tmp_path: Path) -> None:
    script = write_transcript(
        tmp_path / "big.ndjson",
        {"step": "emit_inbound_raw", "line": '{"blob": "' + "z" * 300_000 + '"}'},
        {"step": "emit_inbound", "frame": {"method": "after"}},
        {"step": "runtime_exit", "code": 0, "onStdinClose": True},
    )
    spec = standin_spec(script, "--speed", "0", max_line_bytes=4096)
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            big = await child.receive_line()
            assert isinstance(big, OversizedLine)
            assert big.length == 300_012
            assert big.head.startswith(b'{"blob": "zzz')
            assert await receive(child) == {"method": "after"}
            await child.close_stdin()
            assert (await child.wait()).code == 0


async def test_strict_mismatch_exits_70_with_a_message() -> None:
    spec = standin_spec(CODEX_ECHO, "--speed", "0", "--strict")
    with trio.fail_after(20):
        async with open_child_process(spec) as child:
            await send(child, {"id": 1, "method": "thread/start"})
            assert await child.wait() == ExitStatus(code=70, signal=None)
            assert "expected outbound method 'initialize'" in child.stderr_tail()


async def test_lenient_mode_skips_unknown_frames() -> None:
    with trio.fail_after(20):
        async with open_child_process(standin_spec(CODEX_ECHO, "--speed", "0")) as child:
            await send(child, {"id": 1, "method": "thread/list"})
            await send(child, INITIALIZE)
            assert (await receive(child))["id"] == 7
            await child.kill()
        assert "got method 'thread/list'" in child.stderr_tail()


async def test_a_bad_transcript_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ndjson"
    bad.write_text('{"step": "transcript_start", "provider": "codex"}\n{"step": "nope"}\n')
    with trio.fail_after(20):
        async with open_child_process(standin_spec(bad)) as child:
            assert await child.wait() == ExitStatus(code=2, signal=None)
            assert await child.receive_line() is None
        assert f"{bad}:2: Invalid value 'nope' - at `$.step`" in child.stderr_tail()


async def test_kill_leaves_no_process_in_the_group() -> None:
    with trio.fail_after(20):
        async with open_child_process(standin_spec(CODEX_ECHO, "--speed", "0")) as child:
            await send(child, INITIALIZE)
            await receive(child)
            await child.kill()
            assert await child.wait() == ExitStatus(code=None, signal=signal.SIGKILL)
            await assert_group_empty(child.pgid)


@pytest.mark.parametrize("fixture", [CODEX_ECHO, CLAUDE_ECHO], ids=["codex", "claude"])
async def test_stop_before_any_frame_leaves_no_process(fixture: Path) -> None:
    with trio.fail_after(20):
        async with open_child_process(standin_spec(fixture, "--speed", "0")) as child:
            result = await child.stop(grace_close=5, grace_term=5)
            assert result.stage == "close"
            assert result.status == ExitStatus(code=0, signal=None)
            await assert_group_empty(child.pgid)


async def test_a_recorded_catchable_signal_is_also_a_signal_death(tmp_path: Path) -> None:
    script = write_transcript(
        tmp_path / "term.ndjson", {"step": "runtime_exit", "afterMs": 10, "signal": "SIGTERM"}
    )
    with trio.fail_after(20):
        async with open_child_process(standin_spec(script)) as child:
            assert await child.wait() == ExitStatus(code=None, signal=signal.SIGTERM)


async def test_an_unscripted_steer_is_answered_as_codex_answers_it() -> None:
    # codex 0.169: accepted at once in a turn; -32600 with no turn or no expectedTurnId.
    def steer(request_id: int, turn: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"threadId": THREAD, "input": []}
        if turn is not None:
            params["expectedTurnId"] = turn
        return {"id": request_id, "method": "turn/steer", "params": params}

    with trio.fail_after(20):
        async with open_child_process(standin_spec(CODEX_ECHO, "--speed", "0")) as child:
            await codex_handshake(child)
            await send(child, steer(20, "t"))
            assert await receive(child) == {
                "id": 20,
                "error": {"code": -32600, "message": "no active turn to steer"},
            }
            frames = await codex_turn(child, 9)
            turn = frames[-1]["params"]["turn"]["id"]
            # After turn/completed: no turn runs any more.
            await send(child, steer(21, turn))
            assert (await receive(child))["error"]["message"] == "no active turn to steer"
            await send(child, steer(22, None))
            assert "expectedTurnId" in (await receive(child))["error"]["message"]
            await child.kill()
