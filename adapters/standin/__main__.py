"""``python -m adapters.standin TRANSCRIPT [options]``: the stand-in provider process.

Exit status: the recorded one (a recorded signal is re-raised on ourselves, so
the parent really sees "killed by signal N"), ``--exit-code`` if given, 2 for
a bad transcript or command line, 70 for a strict-mode mismatch.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Sequence
from typing import NoReturn

import trio

from adapters.standin import StandinOptions, serve
from adapters.transcript import Transcript, TranscriptError, load_transcript
from adapters.transcript_player import TranscriptMismatch
from adapters.transport import ExitStatus

EXIT_USAGE = 2
EXIT_MISMATCH = 70  # EX_SOFTWARE


def parse_args(argv: Sequence[str] | None = None) -> tuple[str, StandinOptions, str | None]:
    parser = argparse.ArgumentParser(
        prog="python -m adapters.standin",
        description="Play the provider side of a transcript over stdin/stdout.",
    )
    parser.add_argument("transcript", help="transcript NDJSON file (docs/transcripts.md)")
    parser.add_argument("--segment", type=int, default=0, help="which process of it (0-based)")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="playback speed: 2 = twice as fast as recorded, 0 = no delays",
    )
    parser.add_argument("--strict", action="store_true", help="exit 70 when a client frame differs")
    parser.add_argument(
        "--loop-turns",
        action="store_true",
        help="replay the last turn for every further turn request, until stdin closes",
    )
    parser.add_argument(
        "--threads", action="store_true", help="host many threads, as a shared codex app-server"
    )
    parser.add_argument("--crash-after-frames", type=int, metavar="N", help="SIGKILL self")
    parser.add_argument(
        "--crash-on-request",
        metavar="METHOD[:N]",
        help="SIGKILL self on reading the first (N-th) request with that method",
    )
    parser.add_argument("--hang-on-initialize", action="store_true", help="never answer initialize")
    parser.add_argument(
        "--garbage-after-frames", type=int, metavar="N", help="write one non-JSON line"
    )
    parser.add_argument(
        "--stop-after-frames", type=int, metavar="N", help="SIGSTOP self (a wedged provider)"
    )
    parser.add_argument(
        "--close-stdout-after-frames",
        type=int,
        metavar="N",
        help="close stdout and live on, answering nothing",
    )
    parser.add_argument(
        "--slow-ms", type=float, default=0.0, metavar="MS", help="extra delay per stdout line"
    )
    parser.add_argument("--exit-code", type=int, metavar="C", help="override the exit status")
    parser.add_argument(
        "--helpers-pidfile",
        metavar="PATH",
        help="start two long `sleep` helpers, one in our process group and one in a session "
        "of its own, and append 'group PID' and 'escaped PID' lines to PATH",
    )
    parser.add_argument(
        "--max-line-bytes", type=int, default=StandinOptions().max_line_bytes, metavar="N"
    )
    args = parser.parse_args(argv)
    if args.speed < 0:
        parser.error("--speed must be >= 0")
    if args.crash_on_request is not None:
        method, colon, count = args.crash_on_request.partition(":")
        if not method or (colon and not (count.isdigit() and int(count) > 0)):
            parser.error(
                "--crash-on-request takes METHOD or METHOD:N, N > 0 "
                f"(got {args.crash_on_request!r})"
            )
    options = StandinOptions(
        segment=args.segment,
        speed=args.speed,
        strict=args.strict,
        loop_turns=args.loop_turns,
        crash_after_frames=args.crash_after_frames,
        crash_on_request=args.crash_on_request,
        hang_on_initialize=args.hang_on_initialize,
        garbage_after_frames=args.garbage_after_frames,
        stop_after_frames=args.stop_after_frames,
        close_stdout_after_frames=args.close_stdout_after_frames,
        slow_ms=args.slow_ms,
        exit_code=args.exit_code,
        max_line_bytes=args.max_line_bytes,
        threads=args.threads,
    )
    return args.transcript, options, args.helpers_pidfile


#: Helpers stay referenced: they are meant to outlive us, not to be waited for.
_helpers: list[subprocess.Popen[bytes]] = []


def start_helpers(pidfile: str) -> None:
    """What a provider's tool calls leave behind: a child in our group, and one that escaped."""
    lines = []
    for name, escaped in (("group", False), ("escaped", True)):
        helper = subprocess.Popen(
            ["sleep", "300"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=escaped,
        )
        _helpers.append(helper)
        lines.append(f"{name} {helper.pid}\n")
    with open(pidfile, "a") as f:
        f.writelines(lines)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="standin: %(message)s")
    path, options, helpers_pidfile = parse_args(argv)
    if helpers_pidfile is not None:
        start_helpers(helpers_pidfile)
    try:
        transcript = load_transcript(path)
        transcript.segment(options.segment)
    except TranscriptError as exc:
        print(f"standin: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        status = trio.run(_run, transcript, options)
    except* TranscriptMismatch as group:
        for mismatch in group.exceptions:
            print(f"standin: mismatch: {mismatch}", file=sys.stderr)
        sys.exit(EXIT_MISMATCH)
    _exit_as(status)


async def _run(transcript: Transcript, options: StandinOptions) -> ExitStatus:
    stdin = _receive_stream(0)
    stdout = _send_stream(1)
    return await serve(
        transcript, options, stdin, stdout, _write_stderr, hang_up_stdout=_close_stdout_fd
    )


def _close_stdout_fd() -> None:
    # The stream we wrote through was a dup of fd 1: fd 1 must let go of the pipe as
    # well, or the parent never sees end of file. /dev/null takes its place, so no
    # file opened later can land on fd 1.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _is_pollable(fd: int) -> bool:
    # epoll refuses regular files, and making a terminal non-blocking would
    # break the shell that shares it: only pipes and sockets get trio streams.
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _receive_stream(fd: int) -> trio.abc.ReceiveStream:
    if _is_pollable(fd):
        return trio.lowlevel.FdStream(os.dup(fd))
    return _ThreadedReader(fd)


def _send_stream(fd: int) -> trio.abc.SendStream:
    if _is_pollable(fd):
        return trio.lowlevel.FdStream(os.dup(fd))
    return _ThreadedWriter(fd)


class _ThreadedReader(trio.abc.ReceiveStream):
    """Blocking reads in a worker thread, for a terminal or a file on stdin."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await trio.to_thread.run_sync(
            os.read, self._fd, max_bytes or 65536, abandon_on_cancel=True
        )

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class _ThreadedWriter(trio.abc.SendStream):
    """Blocking writes in a worker thread, for a terminal or a file on stdout."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.to_thread.run_sync(_write_all, self._fd, bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _exit_as(status: ExitStatus) -> NoReturn:
    sys.stderr.flush()
    if status.signal is not None:
        # Die of the recorded signal, with its default action, so the parent
        # observes a real signal death rather than an exit code.
        if status.signal not in (signal.SIGKILL, signal.SIGSTOP):  # those have no handler
            signal.signal(status.signal, signal.SIG_DFL)
        os.kill(os.getpid(), status.signal)
        sys.exit(128 + status.signal)  # a signal whose default is to ignore
    sys.exit(status.code if status.code is not None else 0)


if __name__ == "__main__":
    main()
