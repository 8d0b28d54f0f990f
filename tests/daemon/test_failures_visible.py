"""Why a provider failed, through the real daemon and the CLI (issues 14.6, 14.7, 15.6, 15.4).

Each test runs ``t3orch serve`` as a child process with a provider command that
fails in one way (a script that prints a fatal error and exits, a binary that is
not there, the stand-in with a secret on its stderr, a raw-log disk that is full),
then reads what the user reads: the CLI's default output, ``t3orch logs`` and
every byte the state dir holds.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from t3orch.cli.main import main
from t3orch.config import load_config
from t3orch.daemon import serve_until_signalled, stop_agents
from t3orch.store import writer as writer_module
from t3orch.store.sqlite.backend import SQLiteStore
from tests.daemon.support import REPO, Served, wait_for

#: A secret the provider prints; the redactor masks ``*_API_KEY=value`` and ``Bearer …``.
CANARY = "sk-canary-5f0c1e2d9a8b7c6d"
FATAL = "fatal: no API key configured"


def cli(capsys: pytest.CaptureFixture[str], state: Path, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--state-dir", str(state)])
    out, err = capsys.readouterr()
    return code, out, err


@contextmanager
def daemon(tmp: Path, config: str, *, preamble: str = "") -> Iterator[Served]:
    """``t3orch serve`` on ``tmp/state`` with this TOML; ``preamble`` runs in it first."""
    state = tmp / "state"
    path = tmp / "t3orch.toml"
    path.write_text(config)
    sock_path = tmp / f"notify-{time.monotonic_ns()}.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(sock_path))
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "PYTHONPATH": str(REPO)}
    code = f"{preamble}\nimport sys\nfrom t3orch.cli.main import main\nsys.exit(main(sys.argv[1:]))"
    args = [sys.executable, "-c", code, "serve", "--state-dir", str(state), "--config", str(path)]
    proc = subprocess.Popen(
        args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    served = Served(proc, state, listener)
    try:
        served.wait_notify("READY=1")
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        # Its exit leaves held providers to their holders: stopped as `stop-agents` does.
        stop_agents(state)
        if proc.stderr:
            proc.stderr.close()
        listener.close()
        sock_path.unlink(missing_ok=True)


def stop(served: Served) -> str:
    """SIGTERM the daemon; its stderr."""
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=30) == 0
    assert served.proc.stderr is not None
    return served.proc.stderr.read().decode()


def files_holding(root: Path, needle: str) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``needle`` (SQLite, WAL, logs…)."""
    return [
        path
        for path in sorted(root.rglob("*"))
        if path.is_file() and needle.encode() in path.read_bytes()
    ]


def failing_script(tmp: Path) -> Path:
    script = tmp / "fake-codex"
    # It fails on the first frame it reads (the daemon's initialize), so that frame is
    # in the session's raw log however fast the provider dies.
    script.write_text(
        "#!/bin/sh\n"
        "read -r first\n"
        f'echo "{FATAL}" >&2\n'
        f'echo "export OPENAI_API_KEY={CANARY}" >&2\n'
        f'echo "Authorization: Bearer {CANARY}" >&2\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    return script


def new_thread(capsys: pytest.CaptureFixture[str], state: Path, provider: str) -> str:
    code, out, err = cli(
        capsys, state, "thread", "new", "--provider", provider, "--cwd", str(state)
    )
    assert code == 0, err
    return out.strip()


def test_a_provider_that_prints_a_fatal_error_and_exits_says_why_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = failing_script(tmp_path)
    with daemon(tmp_path, f"[providers.codex]\ncommand = [{json.dumps(str(script))}]\n") as d:
        tid = new_thread(capsys, d.state_dir, "codex")
        code, _, err = cli(capsys, d.state_dir, "send", tid, "hello", "--wait", "--timeout", "30")
        assert code == 1
        assert FATAL in err and "exited with code 1" in err, err

        code, out, _ = cli(capsys, d.state_dir, "show", tid)
        assert code == 0
        assert "run 1 · failed" in out
        assert (
            f"failed: codex runtime failed to start: provider exited with code 1; stderr: {FATAL}"
            in out
        )

        code, out, _ = cli(capsys, d.state_dir, "sessions")
        (row,) = [line for line in out.splitlines() if line.startswith("pss_")]
        assert "ERROR" in out.splitlines()[0]
        assert " error " in row and FATAL in row and "exited with code 1" in row
        daemon_err = stop(d)

    # The daemon's log says it, one line each, in its file and on stderr.
    code, out, _ = cli(capsys, d.state_dir, "logs")
    assert code == 0
    assert "exited with code 1 (crash)" in out and FATAL in out
    assert "exited with code 1 (crash)" in daemon_err
    # A thread's logs: its lines of the daemon log, its session's stderr and frames.
    code, out, _ = cli(capsys, d.state_dir, "logs", tid)
    assert code == 0
    assert "-- stderr" in out and f"\n{FATAL}\n" in out
    assert "→ request initialize" in out
    # The secret on its stderr reached no file: not the store, its WAL, nor any log.
    assert files_holding(d.state_dir, CANARY) == []
    assert "[REDACTED]" in (d.state_dir / "daemon.log").read_text()


def test_a_missing_provider_binary_is_named_not_stopped_with_code_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-codex"
    with daemon(tmp_path, f"[providers.codex]\ncommand = [{json.dumps(str(missing))}]\n") as d:
        tid = new_thread(capsys, d.state_dir, "codex")
        code, _, err = cli(capsys, d.state_dir, "send", tid, "hello", "--wait", "--timeout", "30")
        assert code == 1
        why = f"cannot run {missing}: No such file or directory"
        assert why in err, err
        code, out, _ = cli(capsys, d.state_dir, "show", tid)
        assert f"failed: codex runtime failed to start: {why}" in out, out
        code, out, _ = cli(capsys, d.state_dir, "sessions")
        (row,) = [line for line in out.splitlines() if line.startswith("pss_")]
        assert " error " in row and why in row, out
        assert "stopped" not in row and "code 0" not in row
        stop(d)
    code, out, _ = cli(capsys, d.state_dir, "logs", tid)
    assert "did not start" in out and why in out


def test_a_thread_whose_cwd_is_gone_names_the_cwd_not_a_binary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = (
        f"[providers.standin]\ncommand = {json.dumps([sys.executable, '-m', 'adapters.standin'])}\n"
    )
    gone = tmp_path / "gone"
    gone.mkdir()
    with daemon(tmp_path, config) as d:
        code, out, err = cli(
            capsys, d.state_dir, "thread", "new", "--provider", "standin", "--cwd", str(gone)
        )
        assert code == 0, err
        tid = out.strip()
        gone.rmdir()
        code, _, err = cli(capsys, d.state_dir, "send", tid, "hello", "--wait", "--timeout", "30")
        assert code == 1
        why = f"the thread's cwd {gone} cannot be entered: No such file or directory"
        assert why in err and "cannot run" not in err, err
        code, out, _ = cli(capsys, d.state_dir, "show", tid)
        assert f"failed: standin runtime failed to start: {why}" in out, out


def test_a_secret_on_a_working_providers_stderr_reaches_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stand-in, behind a shell that prints secrets first; then a crash, whose
    # stderr tail becomes the session's lastError.
    shell = (
        f'echo "OPENAI_API_KEY={CANARY}" >&2;'
        f" echo \"curl -H 'Authorization: Bearer {CANARY}'\" >&2;"
        ' exec "$0" "$@"'
    )
    command = ["sh", "-c", shell, sys.executable, "-m", "adapters.standin"]
    with daemon(tmp_path, f"[providers.standin]\ncommand = {json.dumps(command)}\n") as d:
        tid = new_thread(capsys, d.state_dir, "standin")
        code, _, err = cli(capsys, d.state_dir, "send", tid, "hello", "--wait", "--timeout", "30")
        assert code == 0, err
        session = json.loads(cli(capsys, d.state_dir, "sessions", "--json")[1])["sessions"][0]
        pid = session["pid"]
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            (session,) = json.loads(cli(capsys, d.state_dir, "sessions", "--json")[1])["sessions"]
            if session["status"] == "error":
                break
            time.sleep(0.1)
        assert "killed by signal 9" in session["lastError"]
        assert "OPENAI_API_KEY=[REDACTED]" in session["lastError"]
        stderr_file = d.state_dir / "raw" / f"{session['id']}.stderr"
        assert "Bearer [REDACTED]" in stderr_file.read_text()
        assert files_holding(d.state_dir, CANARY) == []
        # The next message restarts it, and the daemon's log tells the story.
        code, _, err = cli(capsys, d.state_dir, "send", tid, "again", "--wait", "--timeout", "30")
        assert code == 0, err
        stop(d)
    assert files_holding(d.state_dir, CANARY) == []
    lines = (d.state_dir / "daemon.log").read_text().splitlines()
    (crash,) = [ln for ln in lines if "killed by signal 9 (crash)" in ln]
    assert f"pid {pid} " in crash and "stderr: " in crash
    assert sum("released (crash)" in ln for ln in lines) == 1
    (restart,) = [ln for ln in lines if "restarting the provider of thread" in ln]
    assert "1 crash(es) in 60s" in restart
    assert sum("provider standin spawned: pid" in ln for ln in lines) == 2


#: Inside the daemon: every raw-log file write fails with ENOSPC once 4 KB are written.
FULL_DISK = """
import errno
import adapters.diagnostics as diagnostics

_real_open = diagnostics.open_log_file
_written = [0]

class _FullDisk:
    def __init__(self, file):
        self._file = file

    def write(self, data):
        if _written[0] + len(data) > 4096:
            raise OSError(errno.ENOSPC, "No space left on device")
        _written[0] += len(data)
        return self._file.write(data)

    def flush(self):
        self._file.flush()

    def tell(self):
        return self._file.tell()

    def close(self):
        self._file.close()

diagnostics.open_log_file = lambda path, mode: _FullDisk(_real_open(path, mode))
"""


def test_a_full_raw_log_disk_leaves_the_daemon_serving_and_runs_completing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = (
        f"[providers.standin]\ncommand = {json.dumps([sys.executable, '-m', 'adapters.standin'])}\n"
    )
    with daemon(tmp_path, config, preamble=FULL_DISK) as d:
        tid = new_thread(capsys, d.state_dir, "standin")
        for text in ("one", "two", "three"):
            code, _, err = cli(capsys, d.state_dir, "send", tid, text, "--wait", "--timeout", "30")
            assert code == 0, err
        code, out, _ = cli(capsys, d.state_dir, "status")
        assert code == 0
        detail = json.loads(cli(capsys, d.state_dir, "show", tid, "--json")[1])
        assert [r["status"] for r in detail["runs"]] == ["completed"] * 3
        # The canonical log is whole: every run has its user message and its reply.
        for run in detail["runs"]:
            kinds = [i["type"] for i in detail["visibleTurnItems"] if i["runId"] == run["id"]]
            assert kinds.count("user_message") == 1 and "assistant_message" in kinds, kinds
        (session,) = json.loads(cli(capsys, d.state_dir, "sessions", "--json")[1])["sessions"]
        assert session["status"] == "ready" and session["pid"]
        daemon_err = stop(d)
    assert "Traceback" not in daemon_err
    # Said once: one log line and one diagnostic for the session.
    assert daemon_err.count("No space left on device") == 1, daemon_err
    log = (d.state_dir / "daemon.log").read_text()
    assert log.count("cannot write (No space left on device)") == 1
    code, out, _ = cli(capsys, d.state_dir, "events")
    diagnostics = [
        e
        for e in map(json.loads, out.splitlines())
        if e["type"] == "provider.diagnostic" and e["payload"]["code"] == "raw_log_unwritable"
    ]
    assert len(diagnostics) == 1
    assert "No space left on device" in diagnostics[0]["payload"]["message"]


APPROVAL = REPO / "tests" / "supervisor" / "transcripts" / "codex_approval_pending.ndjson"


def test_the_daemon_log_has_a_line_per_lifecycle_step_and_logs_follows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = (
        "[daemon]\nidle_timeout_s = 1\n"
        f"[providers.standin]\ntranscript = {json.dumps(str(APPROVAL))}\n"
    )
    with daemon(tmp_path, config) as d:
        tid = new_thread(capsys, d.state_dir, "standin")
        log_file = d.state_dir / "daemon.log"
        follower = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "t3orch.cli.main",
                "logs",
                tid,
                "-f",
                "--state-dir",
                str(d.state_dir),
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            code, out, _ = cli(capsys, d.state_dir, "send", tid, "run the escalated command")
            assert code == 0
            run_id = out.strip()

            def pending() -> list[dict[str, object]]:
                out = cli(capsys, d.state_dir, "requests", "--json")[1]
                return [q for q in json.loads(out)["requests"] if q["threadId"] == tid]

            (request,) = wait_for(pending, 20, "a pending approval")
            assert cli(capsys, d.state_dir, "approve", request["id"])[0] == 0

            def run_status() -> str:
                detail = json.loads(cli(capsys, d.state_dir, "show", tid, "--json")[1])
                return next(r["status"] for r in detail["runs"] if r["id"] == run_id)

            wait_for(lambda: run_status() == "completed", 20, "the run completed")
            # Idle for a second: the reaper releases the runtime.
            wait_for(lambda: "reaping the idle runtime" in log_file.read_text(), 20, "the reap")
            wait_for(lambda: "released (idle_timeout)" in log_file.read_text(), 20, "the release")
        finally:
            time.sleep(0.5)  # the follower polls every 0.2 s
            follower.terminate()
            followed, _ = follower.communicate(timeout=10)
        stop(d)
    log = log_file.read_text()
    lines = log.splitlines()
    # One line each, stamped, with the pid and the cause where there is one.
    assert all(line[:4].isdigit() and line[23] == "Z" for line in lines), lines
    assert sum("settled what the previous daemon left: nothing" in ln for ln in lines) == 1
    (spawned,) = [ln for ln in lines if "provider standin spawned: pid " in ln]
    assert tid in spawned
    assert sum("asks the user: command request" in ln for ln in lines) == 1
    assert sum(f"request {request['id']} answered: accept" in ln for ln in lines) == 1
    (warned,) = [ln for ln in lines if "config_warning" in ln and "bubblewrap" in ln]
    assert " WARNING " in warned
    (exited,) = [ln for ln in lines if "provider standin pid " in ln and "(idle_timeout)" in ln]
    assert "exited with code 0" in exited
    assert any("SIGTERM: stopping" in ln for ln in lines)
    # `logs THREAD -f` printed the steps as they were written, and the session's frames.
    text = followed.decode()
    assert "[daemon]" in text and "asks the user: command" in text and "answered: accept" in text
    assert " frames] " in text and "item/commandExecution/requestApproval" in text


async def test_sigterm_while_the_store_has_no_room_to_start_stops_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A full disk as SQLite reports it on every write: the start's first commit waits
    # for room (the writer tries again), so the daemon is not serving yet.
    def full(self: SQLiteStore, batch: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(SQLiteStore, "_write", full)
    monkeypatch.setattr(writer_module, "FULL_RETRY_S", 0.05)
    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_until_signalled, load_config(None), tmp_path / "state")
        with trio.fail_after(10):
            while "wait for room" not in caplog.text:  # noqa: ASYNC110 (a log, no event)
                await trio.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)
        with trio.fail_after(10):
            while "stopping before serving" not in caplog.text:  # noqa: ASYNC110
                await trio.sleep(0.02)
    assert "serving " not in caplog.text
