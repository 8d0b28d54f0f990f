"""Thread lifecycle through the real CLI and a real daemon on the stand-in provider:
``thread new`` cwd defaults and checks, archive / unarchive / delete, and the
daemon-less reads of ``threads`` and ``show``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.daemon.support import REPO, Served, config_file, serve


def cli(state: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", *args, "--state-dir", str(state)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=90,
    )


def ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Served]:
    state = tmp_path / "state"
    with serve(state, config_file(tmp_path)) as d:
        d.wait_notify("READY=1")
        yield d
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0


def _thread_ids(state: Path, *flags: str) -> list[str]:
    doc = json.loads(ok(cli(state, "threads", "--json", *flags)))
    return [e["thread"]["id"] for e in doc["threads"]]


def test_thread_new_defaults_cwd_to_here_and_refuses_a_missing_one(
    daemon: Served, tmp_path: Path
) -> None:
    state = daemon.state_dir
    work = tmp_path / "work"
    work.mkdir()
    tid = ok(cli(state, "thread", "new", "--provider", "standin", cwd=work)).strip()
    (entry,) = json.loads(ok(cli(state, "threads", "--json")))["threads"]
    assert entry["thread"]["id"] == tid and entry["thread"]["cwd"] == str(work)

    missing = cli(state, "thread", "new", "--provider", "standin", "--cwd", str(work / "nope"))
    assert missing.returncode == 3
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{work / 'nope'} does not exist" in lines[0], missing.stderr
    a_file = work / "f.txt"
    a_file.write_text("x")
    not_dir = cli(state, "thread", "new", "--provider", "standin", "--cwd", str(a_file))
    assert not_dir.returncode == 3 and "is not a directory" in not_dir.stderr
    # Nothing was created by the refused ones.
    assert _thread_ids(state, "--all") == [tid]


def test_an_argument_that_is_not_utf8_is_named_and_nothing_is_done(
    daemon: Served, tmp_path: Path
) -> None:
    # Bytes a shell passes through (a Latin-1 file name, a pasted binary): Python hands
    # them over as lone surrogates, which failed only when the API frame was encoded.
    state = daemon.state_dir
    tid = ok(cli(state, "thread", "new", "--provider", "standin")).strip()
    bad = os.fsdecode(b"caf\xe9 \xff")
    cases = [
        (("send", tid, bad), "t3orch send: TEXT is not valid UTF-8 (byte 0xe9 at 3)"),
        (
            ("thread", "new", "--provider", "standin", "--cwd", os.fsdecode(b"/tmp/\xff")),
            "t3orch thread new: --cwd is not valid UTF-8 (byte 0xff at 5)",
        ),
        (
            ("thread", "new", "--provider", "standin", f"--title={bad}"),
            "t3orch thread new: --title is not valid UTF-8 (byte 0xe9 at 3)",
        ),
        (("show", bad), "t3orch show: THREAD is not valid UTF-8 (byte 0xe9 at 3)"),
    ]
    for argv, said in cases:
        out = cli(state, *argv)
        assert out.returncode == 2, out.stderr
        assert out.stderr.splitlines() == [f"{said}; nothing was done"]
    (entry,) = json.loads(ok(cli(state, "threads", "--json", "--all")))["threads"]
    assert entry["thread"]["id"] == tid and entry["runCount"] == 0


def test_archive_hides_and_refuses_runs_until_unarchived(daemon: Served) -> None:
    state = daemon.state_dir
    tid = ok(cli(state, "thread", "new", "--provider", "standin", "--title", "old")).strip()
    keep = ok(cli(state, "thread", "new", "--provider", "standin", "--title", "kept")).strip()
    assert f"{tid}: archived" in ok(cli(state, "thread", "archive", tid))
    assert _thread_ids(state) == [keep]
    assert set(_thread_ids(state, "--all")) == {tid, keep}
    assert "old (archived)" in ok(cli(state, "threads", "--all"))

    refused = cli(state, "send", tid, "hello")
    assert refused.returncode == 3 and f"thread {tid} is archived" in refused.stderr

    assert f"{tid}: unarchived" in ok(cli(state, "thread", "unarchive", tid))
    assert set(_thread_ids(state)) == {tid, keep}
    sent = cli(state, "send", tid, "hello again", "--wait", "--timeout", "60")
    assert sent.returncode == 0, sent.stderr


def _session_pids(state: Path) -> list[int]:
    doc = json.loads(ok(cli(state, "sessions", "--json")))
    return [s["pid"] for s in doc["sessions"] if s.get("pid") and s["status"] != "stopped"]


def test_delete_stops_the_runtime_keeps_the_log_and_refuses_later_commands(
    daemon: Served,
) -> None:
    state = daemon.state_dir
    tid = ok(cli(state, "thread", "new", "--provider", "standin", "--title", "gone")).strip()
    sent = cli(state, "send", tid, "hello there", "--wait", "--timeout", "60")
    assert sent.returncode == 0, sent.stderr
    (pid,) = _session_pids(state)
    assert psutil.pid_exists(pid)
    before = [json.loads(x) for x in ok(cli(state, "events")).splitlines()]
    mine = [e["sequence"] for e in before if e["threadId"] == tid]

    assert f"{tid}: deleted" in ok(cli(state, "thread", "delete", tid))
    # Its runtime was stopped and released before the command returned.
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
        assert time.monotonic() < deadline, "the deleted thread's provider still runs"
        time.sleep(0.05)
    assert _session_pids(state) == []

    refused = cli(state, "send", tid, "anyone?")
    assert refused.returncode == 3 and f"thread {tid} was deleted" in refused.stderr
    again = cli(state, "thread", "unarchive", tid)
    assert again.returncode == 3 and "was deleted" in again.stderr
    assert _thread_ids(state) == []
    assert "gone (deleted)" in ok(cli(state, "threads", "--all"))
    # A tombstone: every event of the thread is still in the log, and it still shows.
    after = [json.loads(x) for x in ok(cli(state, "events")).splitlines()]
    assert [e["sequence"] for e in after if e["threadId"] == tid][: len(mine)] == mine
    assert "you: hello there" in ok(cli(state, "show", tid))
    assert ok(cli(state, "check")).startswith("ok:")


def test_threads_and_show_read_the_store_without_a_daemon(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve(state, config_file(tmp_path)) as d:
        d.wait_notify("READY=1")
        tid = ok(cli(state, "thread", "new", "--provider", "standin", "--title", "t1")).strip()
        sent = cli(state, "send", tid, "hello there", "--wait", "--timeout", "60")
        assert sent.returncode == 0, sent.stderr
        live_show = ok(cli(state, "show", tid))
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
    assert not (state / "api.sock").exists() or cli(state, "status").returncode == 2
    listing = ok(cli(state, "threads"))
    assert tid in listing and "t1" in listing
    shown = ok(cli(state, "show", tid))
    assert "you: hello there" in shown and "run 1 · completed" in shown
    # The same, but for the host: its daemon has stopped, and the store says so.
    host = socket.gethostname()
    assert f"on {host} (offline))" in shown
    assert shown.replace(f"on {host} (offline))", f"on {host})") == live_show
    detail = json.loads(ok(cli(state, "show", tid, "--json")))
    assert detail["thread"]["id"] == tid
    unknown = cli(state, "show", "thr_nope")
    assert unknown.returncode == 3 and "no thread 'thr_nope'" in unknown.stderr
    # Other client commands still need the daemon, and say so.
    assert cli(state, "send", tid, "x").returncode == 2
    # No state dir at all: one line, exit 2, nothing created.
    nowhere = cli(tmp_path / "absent", "threads")
    assert nowhere.returncode == 2 and "does not exist" in nowhere.stderr
    assert not (tmp_path / "absent").exists()


def test_delete_refuses_a_thread_with_a_working_run(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve(state, config_file(tmp_path, "--slow-ms", "300")) as d:
        d.wait_notify("READY=1")
        tid = ok(cli(state, "thread", "new", "--provider", "standin")).strip()
        run_id = ok(cli(state, "send", tid, "hello there")).strip()
        busy = cli(state, "thread", "delete", tid)
        assert busy.returncode == 3, busy.stderr
        assert f"has run {run_id} still" in busy.stderr and "interrupt it" in busy.stderr
        assert len(busy.stderr.strip().splitlines()) == 1
        # Refused means untouched: the run finishes, the thread is listed, then it can go.
        waited = cli(state, "send", tid, "second", "--wait", "--timeout", "60")
        assert waited.returncode == 0, waited.stderr
        assert _thread_ids(state) == [tid]
        assert f"{tid}: deleted" in ok(cli(state, "thread", "delete", tid))
        # Deleting again is a no-op, not an error.
        assert ok(cli(state, "thread", "delete", tid))
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0


def test_thread_set_refuses_a_cwd_that_does_not_exist(daemon: Served, tmp_path: Path) -> None:
    state = daemon.state_dir
    tid = ok(cli(state, "thread", "new", "--provider", "standin", cwd=tmp_path)).strip()
    bad = cli(state, "thread", "set", tid, "--cwd", str(tmp_path / "gone"))
    assert bad.returncode == 3 and f"cwd {tmp_path / 'gone'} does not exist" in bad.stderr
    (entry,) = json.loads(ok(cli(state, "threads", "--json")))["threads"]
    assert entry["thread"]["cwd"] == str(tmp_path)


def test_a_read_the_store_cannot_answer_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `show` may grow reads beyond view.read: without a daemon they fail cleanly.
    import argparse

    import trio

    from t3orch.cli import clientcmds, threadcmds
    from t3orch.cli.client import ApiClient
    from t3orch.core import open_core
    from tests.store.support import new_thread

    async def populate() -> None:
        async with open_core(tmp_path / "events.sqlite3") as core:
            await new_thread(core.service)

    trio.run(populate)

    async def wants_status(client: ApiClient, args: argparse.Namespace) -> int:
        await client.call("daemon.status")
        return 0

    args = argparse.Namespace(state_dir=str(tmp_path), config=None, command="show")
    assert threadcmds.run_reader(args, wants_status, clientcmds.run_client) == 2
    err = capsys.readouterr().err
    assert err == "t3orch show: daemon.status needs a running daemon\n"
