"""The holder process with the stand-in provider: journal, reattach, grace, exit, version."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
import time
from pathlib import Path

import msgspec
import psutil
import pytest
import trio

from adapters.ownership import OWNER_ENV, this_process
from adapters.transport import LaunchSpec
from supervisor.holder.client import HeldProcess, HolderError, attach, start_holder
from supervisor.holder.layout import HeldPaths, HolderState, socket_address
from supervisor.holder.wire import HEADER, Hello, Kind, Note, encode_json, iter_file
from supervisor.providers import STANDIN_TRANSCRIPT

ROOT = str(Path(__file__).resolve().parents[2])
INITIALIZE = json.dumps(
    {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t", "version": "0"}}}
).encode()

THREAD_START = json.dumps(
    {"id": 2, "method": "thread/start", "params": {"cwd": "/tmp", "approvalPolicy": "never"}}
).encode()


def standin(*extra: str) -> LaunchSpec:
    env = {**os.environ, "PYTHONPATH": ROOT}
    argv = [sys.executable, "-m", "adapters.standin", str(STANDIN_TRANSCRIPT), "--speed", "0"]
    return LaunchSpec(argv=[*argv, *extra], env=env, cwd="/tmp")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def gone(pid: int, within: float = 15.0) -> None:
    with trio.fail_after(within):
        while alive(pid):  # noqa: ASYNC110 (another process: nothing to wait on but time)
            await trio.sleep(0.05)


async def line_with_id(held: HeldProcess, call_id: int) -> bytes:
    with trio.fail_after(10):
        while True:
            for line in await held.receive_lines():
                assert isinstance(line, bytes)
                if json.loads(line).get("id") == call_id:
                    return line


def journal(paths: HeldPaths) -> list[tuple[Kind, int, bytes]]:
    return [(r.kind, r.offset, r.payload) for _, r in iter_file(os.fspath(paths.journal))]


async def test_journal_holds_both_directions_and_a_reattach_gets_exactly_the_rest(
    tmp_path: Path,
) -> None:
    owner = this_process().token()
    paths = await start_holder(tmp_path / "held", standin(), grace_s=30, owner=owner)
    state = paths.read_state()
    assert state is not None and alive(state.holder_pid) and alive(state.provider_pid)
    # The holder is nobody's child of ours, in a session of its own; its provider is its child.
    assert psutil.Process(state.holder_pid).ppid() != os.getpid()
    assert os.getsid(state.holder_pid) == state.holder_pid
    assert psutil.Process(state.provider_pid).ppid() == state.holder_pid
    assert psutil.Process(state.provider_pid).environ()[OWNER_ENV] == owner
    assert stat.S_IMODE(paths.dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(paths.socket.stat().st_mode) == 0o600
    # The provider's environment (its keys) is in no file.
    assert sorted(p.name for p in paths.dir.iterdir()) == [
        "holder.json",
        "holder.log",
        "journal",
        "s",
    ]

    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        await held.send_line(INITIALIZE)
        reply = await line_with_id(held, 1)
        nursery.cancel_scope.cancel()  # the daemon goes away: a detach
    records = journal(paths)
    offsets = [o for _, o, _ in records]
    assert offsets == list(range(1, len(records) + 1))
    assert (Kind.IN, 1, INITIALIZE) in records
    assert any(k is Kind.OUT and p == reply for k, _, p in records)
    assert alive(state.provider_pid)  # a detach leaves it running

    # A later daemon that has committed up to offset 1 gets everything after it, once.
    async with trio.open_nursery() as nursery:
        again = await attach(paths, 1)
        await nursery.start(again.serve)
        lines = await again.receive_lines()
        assert again.welcome.journaled >= len(records)
        replayed = [p for k, o, p in records if k is Kind.OUT and o > 1]
        while len(lines) < len(replayed):
            lines += await again.receive_lines()
        assert lines[: len(replayed)] == replayed
        # And it goes on live: a second request, answered.
        await again.send_line(b'{"method": "initialized"}')
        await again.send_line(THREAD_START)
        await line_with_id(again, 2)
        # Its own writes are journaled too.
        assert any(
            k is Kind.IN and p == THREAD_START and o > len(records) for k, o, p in journal(paths)
        )
        assert (await again.stop()).stage == "close"
    # Read to its exit: the holder is released and its directory removed.
    await gone(state.holder_pid)
    assert not alive(state.provider_pid)
    assert not paths.dir.exists()


async def _initialized_then_detached(
    tmp_path: Path, grace_s: float
) -> tuple[HeldPaths, HolderState]:
    """A holder of the stand-in whose daemon initialized it and went away: its paths and
    its state."""
    paths = await start_holder(
        tmp_path / "held", standin(), grace_s=grace_s, owner=this_process().token()
    )
    state = paths.read_state()
    assert state is not None
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        await held.send_line(INITIALIZE)
        await line_with_id(held, 1)
        nursery.cancel_scope.cancel()
    return paths, state


async def test_a_holder_without_a_daemon_stops_its_provider_after_the_grace(
    tmp_path: Path,
) -> None:
    paths, state = await _initialized_then_detached(tmp_path, grace_s=0.5)
    started = time.monotonic()
    await gone(state.holder_pid)
    assert time.monotonic() - started >= 0.4
    assert not alive(state.provider_pid)
    kinds = [k for k, _, _ in journal(paths)]
    notes = [msgspec.json.decode(p, type=Note) for k, _, p in journal(paths) if k is Kind.NOTE]
    assert notes[0] == Note("grace_expired")
    assert notes[1].event == "stopped" and notes[1].stage == "close"
    assert kinds[-1] is Kind.EXIT and kinds.index(Kind.EOF) < kinds.index(Kind.EXIT)
    # The directory stays for the next daemon, which settles the runtime from it.
    assert paths.journal.exists() and not paths.socket.exists()


async def test_the_providers_exit_status_is_journaled_and_reported(tmp_path: Path) -> None:
    owner = this_process().token()
    paths = await start_holder(
        tmp_path / "held", standin("--exit-code", "3"), grace_s=30, owner=owner
    )
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        await held.send_line(INITIALIZE)
        await line_with_id(held, 1)
        await held.close_stdin()
        with trio.fail_after(10):
            status = await held.wait()
    assert (status.code, status.signal) == (3, None)

    # With no daemon attached, the exit waits in the journal for the next one.
    paths = await start_holder(
        tmp_path / "held", standin("--exit-code", "4"), grace_s=0.3, owner=owner
    )
    state = paths.read_state()
    assert state is not None
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        await held.close_stdin()
        await trio.sleep(0.05)  # the close is on its way; then the daemon goes away
        nursery.cancel_scope.cancel()
    await gone(state.holder_pid)
    exits = [json.loads(p) for k, _, p in journal(paths) if k is Kind.EXIT]
    assert exits == [{"code": 4, "signal": None}]


async def test_sigterm_to_the_holder_stops_its_provider_through_the_ladder(tmp_path: Path) -> None:
    paths = await start_holder(
        tmp_path / "held", standin(), grace_s=30, owner=this_process().token()
    )
    state = paths.read_state()
    assert state is not None
    os.kill(state.holder_pid, signal.SIGTERM)
    await gone(state.holder_pid)
    assert not alive(state.provider_pid)
    notes = [msgspec.json.decode(p, type=Note) for k, _, p in journal(paths) if k is Kind.NOTE]
    assert notes[0] == Note("signalled")


async def test_a_hello_of_another_version_is_refused_naming_both(tmp_path: Path) -> None:
    paths = await start_holder(
        tmp_path / "held", standin(), grace_s=30, owner=this_process().token()
    )
    state = paths.read_state()
    assert state is not None
    with socket_address(paths.socket) as address:
        stream = await trio.open_unix_socket(address)
    async with stream:
        await stream.send_all(encode_json(Kind.HELLO, Hello(version=99, after=0)))
        data = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(4096):
                data += chunk
    assert data[0] == Kind.REFUSED
    assert b"protocol version 1, the daemon 99" in data
    # A refused hello is no attach: the holder still serves the next daemon.
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        await held.kill()
        with trio.fail_after(10):
            status = await held.wait()
    assert status.signal == signal.SIGKILL
    await gone(state.holder_pid)


async def test_a_provider_that_cannot_be_run_is_an_os_error_naming_it(tmp_path: Path) -> None:
    spec = LaunchSpec(argv=["/nonexistent/provider"], env=dict(os.environ), cwd="/tmp")
    with pytest.raises(OSError) as info:
        await start_holder(tmp_path / "held", spec, grace_s=30, owner=this_process().token())
    assert info.value.filename == "/nonexistent/provider"
    assert list((tmp_path / "held").iterdir()) == []


async def test_attaching_to_a_holder_that_is_gone_is_a_clear_error(tmp_path: Path) -> None:
    paths = HeldPaths(tmp_path / "held" / "abc")
    paths.dir.mkdir(parents=True)
    with pytest.raises(HolderError, match="holder abc: cannot connect"):
        await attach(paths, 0)


async def test_each_read_reports_the_offset_of_the_lines_handed_out_before_it(
    tmp_path: Path,
) -> None:
    paths = await start_holder(
        tmp_path / "held", standin(), grace_s=30, owner=this_process().token()
    )
    reported: list[int] = []
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        held.on_delivered = reported.append
        await nursery.start(held.serve)
        await held.send_line(INITIALIZE)
        await line_with_id(held, 1)
        handed = held.delivered
        assert reported == [] or reported[-1] < handed
        await held.send_line(b'{"method": "initialized"}')
        await held.send_line(THREAD_START)
        await line_with_id(held, 2)
        # The next read said everything up to the first reply's line was handed out.
        assert handed in reported and reported == sorted(set(reported))
        out = [o for k, o, _ in journal(paths) if k is Kind.OUT]
        assert set(reported) <= set(out)
        await held.kill()


async def test_a_daemon_connection_reset_mid_stream_ends_that_connection_not_the_holder(
    tmp_path: Path,
) -> None:
    paths, state = await _initialized_then_detached(tmp_path, grace_s=30)
    for _ in range(3):
        # A SIGKILLed daemon: its unread bytes make the kernel reset the connection.
        with socket_address(paths.socket) as address:
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.connect(address)
        raw.send(encode_json(Kind.HELLO, Hello(version=1, after=0)) + b"\x11" * 13)
        await trio.sleep(0.1)
        raw.close()
    await trio.sleep(0.3)
    assert alive(state.holder_pid) and alive(state.provider_pid)
    async with trio.open_nursery() as nursery:
        again = await attach(paths, 0)
        await nursery.start(again.serve)
        await again.kill()
        with trio.fail_after(10):
            await again.wait()
    await gone(state.holder_pid)


async def test_a_provider_that_exits_at_once_is_held_and_its_exit_and_stderr_journaled(
    tmp_path: Path,
) -> None:
    # A shell exits within a millisecond: reaped before the holder writes down its start.
    code = "echo 'fatal: no API key configured' >&2; exit 1"
    spec = LaunchSpec(argv=["/bin/sh", "-c", code], env=dict(os.environ), cwd="/tmp")
    paths = await start_holder(tmp_path / "held", spec, grace_s=30, owner=this_process().token())
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        with trio.fail_after(10):
            status = await held.wait()
    assert (status.code, status.signal) == (1, None)
    assert "fatal: no API key configured" in held.stderr_tail()


async def test_a_reattach_reads_nothing_before_its_gate_and_writes_meanwhile(
    tmp_path: Path,
) -> None:
    """A daemon start attaches to every holder before any replay (``reattach_all``): a
    reattaching runtime's records wait for the gate, its writes do not."""
    paths = await start_holder(
        tmp_path / "held", standin(), grace_s=30, owner=this_process().token()
    )
    async with trio.open_nursery() as nursery:
        first = await attach(paths, 0)
        await nursery.start(first.serve)
        await first.send_line(INITIALIZE)
        await line_with_id(first, 1)
        nursery.cancel_scope.cancel()  # the daemon goes away; the holder keeps it
    gate = trio.Event()
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        held.read_gate = gate
        await nursery.start(held.serve)
        # Written at once, though nothing was read: the holder journals it.
        await held.send_line(b'{"method": "initialized"}')
        await held.send_line(THREAD_START)
        with trio.move_on_after(0.5):
            # Its reply is journaled by the holder, and still not read here.
            while not any(k is Kind.OUT and b'"id":2' in p for k, _, p in journal(paths)):  # noqa: ASYNC110 (another process's file)
                await trio.sleep(0.02)
        assert held.offset == 0  # no record taken before the gate
        gate.set()
        # Then the replay from the start, and the reply to the write.
        seen: set[int] = set()
        with trio.fail_after(10):
            while not {1, 2} <= seen:
                lines = await held.receive_lines()
                seen |= {json.loads(line).get("id") for line in lines if isinstance(line, bytes)}
        await held.kill()


async def test_a_journal_that_takes_no_more_holds_the_provider_until_it_does(
    tmp_path: Path,
) -> None:
    paths = await start_holder(
        tmp_path / "held", standin(), grace_s=30, owner=this_process().token()
    )
    state = paths.read_state()
    assert state is not None
    holder = psutil.Process(state.holder_pid)
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        # The filesystem takes a few bytes more of the holder, then no more (the kernel's
        # file size limit: a full disk's write error, EFBIG for ENOSPC).
        size = paths.journal.stat().st_size + 16
        holder.rlimit(psutil.RLIMIT_FSIZE, (size, psutil.RLIM_INFINITY))
        await held.send_line(INITIALIZE)  # its IN record does not fit: a torn write
        with trio.move_on_after(1.5) as waited:
            await line_with_id(held, 1)
        assert waited.cancelled_caught  # the answer waits for the journal
        assert any(n.event == "journal_stalled" for n in held.notes)
        assert alive(state.provider_pid)
        holder.rlimit(psutil.RLIMIT_FSIZE, (psutil.RLIM_INFINITY, psutil.RLIM_INFINITY))
        await line_with_id(held, 1)  # room again: it comes, and the provider goes on
        await held.close_stdin()
        with trio.fail_after(10):
            status = await held.wait()
        # The journal has every record whole and in order: a reattach replays all of it.
        records = journal(paths)
        size = paths.journal.stat().st_size
        nursery.cancel_scope.cancel()
    assert status.code == 0
    assert [offset for _, offset, _ in records] == list(range(1, len(records) + 1))
    assert size == sum(HEADER.size + len(p) for _, _, p in records)
    assert [p for k, _, p in records if k is Kind.IN][:1] == [INITIALIZE]
    assert any(k is Kind.OUT and json.loads(p).get("id") == 1 for k, _, p in records)


async def test_a_journal_that_takes_nothing_for_too_long_ends_the_holder_saying_why(
    tmp_path: Path,
) -> None:
    # A provider that writes 32 MiB of stderr once the test has capped the journal.
    spam = "sleep 1; head -c 33554432 /dev/zero | tr '\\0' x >&2; sleep 30"
    spec = LaunchSpec(argv=["sh", "-c", spam], env=dict(os.environ), cwd="/tmp")
    paths = await start_holder(tmp_path / "held", spec, grace_s=30, owner=this_process().token())
    state = paths.read_state()
    assert state is not None
    size = paths.journal.stat().st_size + 16
    psutil.Process(state.holder_pid).rlimit(psutil.RLIMIT_FSIZE, (size, psutil.RLIM_INFINITY))
    async with trio.open_nursery() as nursery:
        held = await attach(paths, 0)
        await nursery.start(held.serve)
        with trio.fail_after(20):
            status = await held.wait()
        nursery.cancel_scope.cancel()
    assert status.signal == signal.SIGKILL
    why = f"its journal {paths.journal} could not be written (File too large)"
    assert f"ended, stopping it: {why}" in held.stderr_tail(), held.stderr_tail()
    await gone(state.holder_pid)
    await gone(state.provider_pid)
