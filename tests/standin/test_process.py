"""adapters/process.py against real child processes: pipes, bounds, groups, the stop ladder."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import termios
import threading
from typing import Any

import attrs
import pytest
import trio

import adapters.process as process_module
from adapters.process import (
    STDERR_TAIL_BYTES,
    ChildProcess,
    TrioProcessLauncher,
    open_child_process,
)
from adapters.transport import ExitStatus, OversizedLine, ProcessLauncher

from .helpers import (
    assert_group_empty,
    command_spec,
    living_group_members,
    pid_alive,
    python_spec,
    wait_until,
)

# A shell whose group holds two more sleepers: signals must reach all of them.
GROUP_OF_THREE = "sleep 60 & sleep 60 & echo ready; wait"


async def test_lines_round_trip_and_eof() -> None:
    with trio.fail_after(10):
        async with open_child_process(command_spec("cat")) as child:
            assert child.pgid == child.pid == os.getpgid(child.pid)
            assert os.getsid(child.pid) == child.pid
            await child.send_line(b'{"hello": 1}')
            assert await child.receive_line() == b'{"hello": 1}'
            await child.close_stdin()
            assert await child.receive_line() is None
            assert await child.wait() == ExitStatus(code=0, signal=None)
            with pytest.raises(trio.ClosedResourceError):
                await child.send_line(b"{}")


async def test_a_frame_with_a_newline_is_refused() -> None:
    with trio.fail_after(10):
        async with open_child_process(command_spec("cat")) as child:
            with pytest.raises(ValueError, match="newline"):
                await child.send_line(b"{}\n{}")


async def test_a_line_sent_now_goes_whole_or_not_at_all() -> None:
    """``send_line_nowait`` (the holder's direct write of ``turn/start``): a short line
    now, whole; a pipe that cannot take one whole, or a line past ``PIPE_BUF``, gets
    nothing (the caller queues it for ``send_line``)."""
    with trio.fail_after(10):
        async with open_child_process(command_spec("sleep", "30")) as child:
            assert child.send_line_nowait(b"x" * 100)
            assert not child.send_line_nowait(b"y" * 8192)  # past PIPE_BUF: never now
            sent = 1
            while child.send_line_nowait(b"x" * 100):  # the child reads nothing
                sent += 1
            # Full: the pipe holds exactly the lines that went, each whole (101 bytes).
            assert sent > 1 and _bytes_in_pipe(child._stdin.fileno()) == sent * 101
        async with open_child_process(command_spec("cat")) as child:
            assert child.send_line_nowait(b"hello")
            assert await child.receive_line() == b"hello"


def _bytes_in_pipe(fd: int) -> int:
    (n,) = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))
    return int(n)


async def test_oversized_lines_are_reported_and_reading_continues() -> None:
    code = (
        "import sys; w = sys.stdout.write; "
        "w('a' * 100000 + '\\n'); w('ok\\n'); w('b' * 5000 + '\\n'); w('tail')"
    )
    with trio.fail_after(10):
        async with open_child_process(python_spec(code, max_line_bytes=4096)) as child:
            first = await child.receive_line()
            assert isinstance(first, OversizedLine)
            assert first.length == 100000
            assert first.head == b"a" * len(first.head) and 0 < len(first.head) <= 4096
            assert await child.receive_line() == b"ok"
            second = await child.receive_line()
            assert isinstance(second, OversizedLine)
            assert second.length == 5000
            assert await child.receive_line() == b"tail"  # no trailing newline at EOF
            assert await child.receive_line() is None
            assert (await child.wait()).code == 0


async def test_a_line_at_the_bound_is_not_oversized() -> None:
    code = "import sys; sys.stdout.write('c' * 4096 + '\\n')"
    with trio.fail_after(10):
        async with open_child_process(python_spec(code, max_line_bytes=4096)) as child:
            assert await child.receive_line() == b"c" * 4096


async def test_stderr_keeps_only_its_tail() -> None:
    code = "import sys; sys.stderr.write('x' * 100000 + 'THE END'); sys.stderr.flush()"
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            launcher = TrioProcessLauncher(nursery)
            child = await launcher.launch(python_spec(code))
            assert (await child.wait()).code == 0
        # The lifetime task has finished, so stderr was drained to its end.
        tail = child.stderr_tail()
        assert tail.endswith("THE END")
        assert len(tail) == STDERR_TAIL_BYTES


async def test_stderr_tail_is_redacted_even_where_the_tail_cuts_a_secrets_line() -> None:
    # The kept tail starts inside the secret's line, after its name: redacting only
    # when the tail is read would no longer see a name, and leak the value.
    secret = "OPENAI_API_KEY=sk-secret-value\n"
    filler = "y" * (STDERR_TAIL_BYTES - len("KEY=sk-secret-value\n") - 1) + "\n"
    code = (
        "import sys, time\n"
        f"sys.stderr.write({secret!r}); sys.stderr.flush(); time.sleep(0.05)\n"
        f"sys.stderr.write({filler!r}); sys.stderr.write('Authorization: Bearer abc'); "
        "sys.stderr.flush()"
    )
    teed: list[bytes] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            child = await TrioProcessLauncher(nursery).launch(python_spec(code))
            child.tee_stderr(teed.append)
            assert (await child.wait()).code == 0
    tail = child.stderr_tail()
    assert "sk-secret" not in tail and "abc" not in tail
    assert tail.endswith("Authorization: Bearer [REDACTED]")
    assert len(tail) <= STDERR_TAIL_BYTES
    # The tee gets every byte, as written, for its own (redacting) log file.
    assert b"".join(teed).endswith(b"Authorization: Bearer abc")


def test_the_launcher_satisfies_the_protocol() -> None:
    def check(launcher: ProcessLauncher) -> None:
        del launcher

    check(TrioProcessLauncher(nursery=None))  # type: ignore[arg-type]


async def test_kill_signals_the_whole_group() -> None:
    with trio.fail_after(10):
        async with open_child_process(command_spec("sh", "-c", GROUP_OF_THREE)) as child:
            assert await child.receive_line() == b"ready"
            pgid = child.pgid
            assert len(living_group_members(pgid)) == 3
            await child.kill()
            assert await child.wait() == ExitStatus(code=None, signal=signal.SIGKILL)
            await assert_group_empty(pgid)
            await child.kill()  # after the reap: a no-op, never a stray signal


async def test_survivors_die_with_the_leader() -> None:
    script = "sleep 60 & echo $!; exit 5"
    with trio.fail_after(10):
        async with open_child_process(command_spec("sh", "-c", script)) as child:
            line = await child.receive_line()
            assert isinstance(line, bytes)
            sleeper = int(line)
            assert await child.wait() == ExitStatus(code=5, signal=None)
            await assert_group_empty(child.pgid)
            assert not pid_alive(sleeper)


async def test_a_helper_that_left_the_group_dies_with_the_leader_too() -> None:
    # A session of its own: no group signal reaches it, the launch's mark in its
    # environment does.
    script = "setsid sleep 60 & echo $!; read x; exit 0"
    with trio.fail_after(10):
        async with open_child_process(command_spec("sh", "-c", script)) as child:
            line = await child.receive_line()
            assert isinstance(line, bytes)
            escaped = int(line)
            try:
                assert await wait_until(lambda: os.getsid(escaped) != child.pid)
                await child.close_stdin()
                assert await child.wait() == ExitStatus(code=0, signal=None)
                assert await wait_until(lambda: not pid_alive(escaped))
            finally:
                if pid_alive(escaped):
                    os.kill(escaped, signal.SIGKILL)


async def test_stop_closes_stdin_first() -> None:
    with trio.fail_after(10):
        async with open_child_process(command_spec("cat")) as child:
            result = await child.stop(grace_close=5, grace_term=5)
            assert result.stage == "close"
            assert not result.escalated
            assert result.status == ExitStatus(code=0, signal=None)


async def test_stop_escalates_to_sigterm_for_the_group() -> None:
    with trio.fail_after(10):
        async with open_child_process(command_spec("sh", "-c", GROUP_OF_THREE)) as child:
            assert await child.receive_line() == b"ready"
            result = await child.stop(grace_close=0.2, grace_term=5)
            assert result.stage == "term"
            assert result.escalated
            assert result.status == ExitStatus(code=None, signal=signal.SIGTERM)
            await assert_group_empty(child.pgid)


async def test_stop_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    with trio.fail_after(10):
        async with open_child_process(python_spec(code)) as child:
            assert await child.receive_line() == b"ready"
            start = trio.current_time()
            result = await child.stop(grace_close=0.2, grace_term=0.3)
            assert trio.current_time() - start < 3
            assert result.stage == "kill"
            assert result.status == ExitStatus(code=None, signal=signal.SIGKILL)
            await assert_group_empty(child.pgid)


async def test_cancellation_kills_and_reaps_the_group() -> None:
    pgid = None
    with trio.fail_after(10):
        with trio.move_on_after(0.5):
            async with open_child_process(command_spec("sh", "-c", GROUP_OF_THREE)) as child:
                pgid = child.pgid
                assert await child.receive_line() == b"ready"
                await trio.sleep_forever()
        assert pgid is not None
        assert child.status == ExitStatus(code=None, signal=signal.SIGKILL)
        await assert_group_empty(pgid)


async def test_cancelling_the_launcher_nursery_kills_every_child() -> None:
    children: list[ChildProcess] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            launcher = TrioProcessLauncher(nursery)
            for _ in range(3):
                child = await launcher.launch(command_spec("sh", "-c", GROUP_OF_THREE))
                assert await child.receive_line() == b"ready"
                children.append(child)
            nursery.cancel_scope.cancel()
        for child in children:
            assert child.status is not None
            await assert_group_empty(child.pgid)


async def test_writing_to_an_exited_process_is_a_broken_resource() -> None:
    with trio.fail_after(10):
        async with open_child_process(command_spec("true")) as child:
            assert (await child.wait()).code == 0
            with pytest.raises(trio.BrokenResourceError):
                await child.send_line(b"{}")


async def test_a_missing_executable_fails_the_launch() -> None:
    with trio.fail_after(10), pytest.raises(FileNotFoundError):
        async with open_child_process(command_spec("/nonexistent/provider")):
            pass


async def test_the_fork_happens_on_the_trio_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """PR_SET_PDEATHSIG follows the forking *thread*: a trio worker thread would
    retire after ~10 s idle and take the child with it."""
    forked_on: list[int] = []
    real_popen = process_module.subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> Any:
        forked_on.append(threading.get_ident())
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(process_module.subprocess, "Popen", recording_popen)
    with trio.fail_after(10):
        async with open_child_process(command_spec("true")) as child:
            await child.wait()
    assert forked_on == [threading.get_ident()]


PARENT_SCRIPT = """
import json, sys, trio
from adapters.process import open_child_process
from adapters.transport import LaunchSpec

async def main():
    spec = LaunchSpec(argv=["sleep", "60"], env={"PATH": "/usr/bin:/bin"}, cwd="/")
    async with open_child_process(spec) as child:
        print(json.dumps({"pid": child.pid}), flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_a_child_dies_with_the_daemon() -> None:
    """SIGKILL the 'daemon' (no teardown runs): the death signal still kills its child."""
    with trio.fail_after(15):
        async with open_child_process(python_spec(PARENT_SCRIPT)) as daemon:
            line = await daemon.receive_line()
            assert isinstance(line, bytes), daemon.stderr_tail()
            grandchild = json.loads(line)["pid"]
            # The grandchild has its own session, so only the death signal reaches it.
            assert os.getsid(grandchild) == grandchild
            assert pid_alive(grandchild)
            os.kill(daemon.pid, signal.SIGKILL)
            assert (await daemon.wait()).signal == signal.SIGKILL
            assert await wait_until(lambda: not pid_alive(grandchild))


async def test_a_child_gets_pwd_set_to_its_own_cwd(tmp_path: Any) -> None:
    # The daemon's PWD names the daemon's directory: a child started elsewhere that
    # trusts $PWD (as the Claude SDK's launch assumes the CLI does) must not see it.
    work = tmp_path / "work"
    work.mkdir()
    spec = python_spec("import os; print(os.environ.get('PWD'), os.getcwd())")
    spec = attrs.evolve(spec, env={**spec.env, "PWD": str(tmp_path)}, cwd=str(work))
    with trio.fail_after(10):
        async with open_child_process(spec) as child:
            line = await child.receive_line()
    assert line == f"{work} {work}".encode()
