"""What the client commands print, through the real entry point against a real daemon.

The daemon (``t3orch serve``) runs the stand-in provider playing a Codex turn that
asks to run a command and waits for the answer (the supervisor tests' transcript).
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from t3orch.cli.client import ThreadView
from t3orch.cli.clientcmds import _Screen
from tests.daemon.support import REPO, serve

APPROVAL = REPO / "tests/supervisor/transcripts/codex_approval_pending.ndjson"
COMMAND = "/bin/bash -lc 'touch approval_accept.txt && echo ran-approval_accept'"
TIMEOUT = 60.0
CLI = [sys.executable, "-m", "t3orch.cli.main"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("T3ORCH_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


@contextmanager
def _daemon(tmp_path: Path, extra_toml: str = "") -> Iterator[Path]:
    """A ``t3orch serve`` on a fresh state dir; stopped with SIGTERM (its stop ladder)."""
    standin = [sys.executable, "-m", "adapters.standin"]
    config = tmp_path / "t3orch.toml"
    config.write_text(
        f"[providers.standin]\ncommand = {json.dumps(standin)}\n"
        f"transcript = {json.dumps(str(APPROVAL))}\n{extra_toml}"
    )
    state = tmp_path / "state"
    with serve(state, config) as served:
        served.wait_notify("READY=1")
        try:
            yield state
        finally:
            served.proc.send_signal(signal.SIGTERM)
            served.proc.wait(timeout=30)


def _cli(
    state: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--state-dir", str(state)],
        cwd=REPO,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _popen(state: Path, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, *args, "--state-dir", str(state)],
        cwd=REPO,
        env=kw.pop("env", None) or _env(),
        stdin=subprocess.DEVNULL,
        stdout=kw.pop("stdout", subprocess.PIPE),
        stderr=kw.pop("stderr", subprocess.PIPE),
        **kw,
    )


def _read_until(fd: int, needle: str, within: float = TIMEOUT) -> str:
    """What ``fd`` yields until ``needle`` appears (fails naming what came instead)."""
    buf = b""
    deadline = time.monotonic() + within
    while needle.encode() not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            got = buf.decode(errors="replace")[-2000:]
            raise AssertionError(f"no {needle!r} within {within:.0f} s; got …{got!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pty whose other side closed
                chunk = b""
            if not chunk:
                raise AssertionError(f"closed before {needle!r}; got {buf.decode()!r}")
            buf += chunk
    return buf.decode(errors="replace")


def _until(check: Callable[[], Any], within: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {within:.0f} s")


def _new_thread(state: Path, tmp_path: Path) -> str:
    out = _cli(state, "thread", "new", "--provider", "standin", "--cwd", str(tmp_path))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _pending(state: Path) -> list[dict[str, Any]]:
    out = _cli(state, "requests", "--json")
    assert out.returncode == 0, out.stderr
    requests: list[dict[str, Any]] = json.loads(out.stdout)["requests"]
    return requests


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def test_send_wait_prints_each_pending_request_and_how_to_answer_it(tmp_path: Path) -> None:
    with _daemon(tmp_path) as state:
        tid = _new_thread(state, tmp_path)
        send = _popen(state, "send", tid, "run the escalated command", "--wait")
        try:
            assert send.stderr is not None and send.stdout is not None
            err = _read_until(send.stderr.fileno(), "or: t3orch deny")
            match = re.search(r"\? (req_\w+) waits for an answer: command: (.*)", err)
            assert match, err
            req, what = match.groups()
            assert what == COMMAND
            assert f"t3orch approve {req} --state-dir {state}" in err
            assert f"t3orch deny {req} --state-dir {state}" in err
            # What `requests` says it is (the WHAT column was always "-").
            listed = _cli(state, "requests")
            (row,) = [line for line in listed.stdout.splitlines() if line.startswith(req)]
            assert "/bin/bash -lc 'touch approval_accept.txt" in row
            (pending,) = _pending(state)
            assert pending["detail"]["summary"] == COMMAND
            answered = _cli(state, "approve", req)
            assert answered.returncode == 0, answered.stderr
            assert send.wait(timeout=TIMEOUT) == 0
            rest = send.stderr.read().decode()
            assert "completed" in rest and rest.count("waits for an answer") == 0
        finally:
            _stop(send)


def test_show_prints_one_header_per_run_with_a_run_queued_behind(tmp_path: Path) -> None:
    with _daemon(tmp_path) as state:
        tid = _new_thread(state, tmp_path)
        assert _cli(state, "send", tid, "run the escalated command").returncode == 0
        (first,) = _until(lambda: _pending(state))
        # Queued while run 1 waits: its message lands between run 1's items.
        assert _cli(state, "send", tid, "and then this").returncode == 0
        assert _cli(state, "approve", first["id"]).returncode == 0

        def run_one_done() -> bool:
            detail = json.loads(_cli(state, "show", tid, "--json").stdout)
            return any(r["ordinal"] == 1 and r["status"] == "completed" for r in detail["runs"])

        _until(run_one_done)
        out = _cli(state, "show", tid)
        assert out.returncode == 0, out.stderr
        headers = [line for line in out.stdout.splitlines() if line.startswith("── run")]
        assert [h.split(" · ")[0] for h in headers] == ["── run 1", "── run 2"], out.stdout
        run1, run2 = out.stdout.split("── run 2")
        assert "● tool output" in run1 and "you: and then this" in run2


def test_a_closed_pipe_ends_a_command_quietly(tmp_path: Path) -> None:
    with _daemon(tmp_path) as state:
        tid = _new_thread(state, tmp_path)
        # More than a pipe holds (64 KiB): `show` is still writing when the reader goes.
        big = "\n".join(f"line {i} " + "x" * 60 for i in range(1800))
        assert _cli(state, "send", tid, big).returncode == 0
        show = _popen(state, "show", tid)
        assert show.stdout is not None and show.stderr is not None
        head = [show.stdout.readline() for _ in range(2)]  # `t3orch show T | head -2`
        show.stdout.close()
        code = show.wait(timeout=TIMEOUT)
        err = show.stderr.read().decode()
        show.stderr.close()
        assert head[0].startswith(b"New thread")
        assert err == ""
        assert code == 128 + signal.SIGPIPE


def test_watch_shows_the_pending_request_and_the_text_coming_in(tmp_path: Path) -> None:
    with _daemon(tmp_path) as state:
        tid = _new_thread(state, tmp_path)
        # On a terminal: the progress line names the request the run waits on.
        master, slave = pty.openpty()
        watch = _popen(state, "watch", tid, stdout=slave, env=_env(COLUMNS="300"))
        os.close(slave)
        try:
            time.sleep(0.5)  # subscribed: what follows arrives live
            assert _cli(state, "send", tid, "run the escalated command").returncode == 0
            (req,) = _until(lambda: _pending(state))
            seen = _read_until(master, f"t3orch approve {req['id']}")
            assert f"? {req['id']} waits for an answer: command: {COMMAND}" in seen
            seen = _read_until(master, f"waiting for {req['id']} (command): /bin/bash")
            assert _cli(state, "approve", req["id"]).returncode == 0
            _read_until(master, "── run 1 completed")
        finally:
            _stop(watch)
            os.close(master)


def test_status_and_version_name_the_provider_versions_and_warn_when_newer(
    tmp_path: Path,
) -> None:
    codex = tmp_path / "codex"
    codex.write_text("#!/bin/sh\necho 'codex-cli 0.999.0'\n")
    claude = tmp_path / "claude"
    claude.write_text("#!/bin/sh\necho '2.1.327 (Claude Code)'\n")
    for fake in (codex, claude):
        fake.chmod(0o755)
    providers = (
        f"[providers.codex]\ncommand = [{json.dumps(str(codex))}]\n"
        f"[providers.claude]\ncommand = [{json.dumps(str(claude))}]\n"
    )
    with _daemon(tmp_path, providers) as state:

        def checked() -> list[dict[str, Any]] | None:
            st = json.loads(_cli(state, "status", "--json").stdout)
            found: list[dict[str, Any]] = st["providers"]
            return found if all(p["checked"] for p in found) else None

        by_kind = {p["provider"]: p for p in _until(checked)}
        assert by_kind["codex"]["version"] == "0.999.0"
        assert by_kind["codex"]["tested"] == "0.169.0" and by_kind["codex"]["newerThanTested"]
        assert by_kind["claude"]["version"] == "2.1.327"
        assert not by_kind["claude"]["newerThanTested"]
        out = _cli(state, "status")
        assert out.returncode == 0, out.stderr
        assert "codex 0.999.0 (tested 0.169.0)" in out.stdout
        assert "claude 2.1.327 (tested 2.1.327)" in out.stdout
        (warning,) = out.stderr.splitlines()
        assert "warning: codex 0.999.0 is newer than the version t3orch was tested with" in warning
    version = subprocess.run(
        [*CLI, "--version"],
        cwd=REPO,
        env=_env(T3ORCH_CONFIG=str(tmp_path / "t3orch.toml")),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert version.returncode == 0, version.stderr
    lines = version.stdout.splitlines()
    assert re.fullmatch(r"t3orch \d+\.\d+\.\d+", lines[0])
    assert f"codex 0.999.0 ({codex}; tested with 0.169.0)" in lines
    assert f"claude 2.1.327 ({claude}; tested with 2.1.327)" in lines
    assert any("warning: codex 0.999.0 is newer" in line for line in lines)


def test_help_begins_by_saying_what_t3orch_is() -> None:
    out = subprocess.run(
        [*CLI, "--help"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert out.returncode == 0
    usage, description = out.stdout.split("\n\n")[:2]
    assert usage.startswith("usage: t3orch")
    assert description.startswith("t3orch owns the coding-agent processes of this machine")


@pytest.mark.parametrize("copy", ["scripts/install-codex", "scripts/demo", "pyproject.toml"])
def test_the_pinned_versions_have_one_source(copy: str) -> None:
    from t3orch.provider_versions import CLAUDE_AGENT_SDK_TESTED, CODEX_TESTED

    text = (REPO / copy).read_text()
    pins = set(re.findall(r'CODEX_VERSION="([\d.]+)"', text))
    pins |= set(re.findall(r"claude-agent-sdk==([\d.]+)", text))
    assert pins and pins <= {CODEX_TESTED, CLAUDE_AGENT_SDK_TESTED}, (copy, pins)


def test_the_installed_pins_report_the_tested_versions() -> None:
    """The pinned installs (``./scripts/test`` makes them) say the versions we record."""
    from t3orch.config import codex_cache_binary
    from t3orch.provider_versions import TESTED, probe

    codex = codex_cache_binary()
    spec = __import__("importlib.util").util.find_spec("claude_agent_sdk")
    claude = Path(spec.submodule_search_locations[0]) / "_bundled" / "claude" if spec else None
    if not codex.exists() or claude is None or not claude.exists():
        pytest.skip("the pinned codex and claude are not installed (./scripts/test installs them)")
    assert probe("codex", [str(codex)]).version == TESTED["codex"]
    assert probe("claude", [str(claude)]).version == TESTED["claude"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_shows_the_text_coming_in_not_its_length() -> None:
    item = {
        "id": "tit_1",
        "type": "assistant_message",
        "runId": "run_1",
        "status": "running",
        "text": "an old silent pond, a frog jumps in",
    }
    run = {"id": "run_1", "ordinal": 1, "status": "running"}
    view = ThreadView({"thread": {}, "runs": [run], "turnItems": [item]})
    out = _Terminal()
    _Screen(out).spin(view)
    line = out.getvalue().rsplit("\r\033[K", 1)[-1]
    assert line.endswith("run 1 running · assistant message: an old silent pond, a frog jumps in")


def test_the_progress_line_shows_live_text_until_the_committed_text_replaces_it() -> None:
    item = {"id": "tit_1", "type": "assistant_message", "runId": "run_1", "status": "running"}
    run = {"id": "run_1", "ordinal": 1, "status": "running"}
    view = ThreadView({"thread": {}, "runs": [run], "turnItems": [{**item, "text": "an"}]})

    def shown() -> str:
        out = _Terminal()
        _Screen(out).spin(view)
        return out.getvalue().rsplit("assistant message: ", 1)[-1]

    def live(offset: int, text: str) -> None:
        view.apply_live({"itemId": "tit_1", "field": None, "offset": offset, "text": text})

    live(2, " old")
    live(6, " silent")
    assert shown() == "an old silent"
    live(40, " lost")  # a gap (a dropped frame): not shown
    assert shown() == "an old silent"
    # The committed delta catches up with part of it: the live text still runs ahead.
    view.apply(
        {"sequence": 5, "type": "turn_item.delta", "payload": {"itemId": "tit_1", "text": " old"}}
    )
    assert shown() == "an old silent"
    live(13, " pond")
    assert shown() == "an old silent pond"
    final = {**item, "status": "completed", "text": "an old silent pond, a frog"}
    view.apply({"sequence": 6, "type": "turn_item.upserted", "payload": {"item": final}})
    assert view.shown_text("tit_1") == "an old silent pond, a frog"
    assert view.live == {}
    # A late piece (its lane is best effort) is news of an item that is done.
    live(26, " jumps in")
    assert view.shown_text("tit_1") == "an old silent pond, a frog"
    assert view.live == {}


def test_an_upsert_that_leaves_out_unchanged_text_keeps_the_text_held() -> None:
    item = {"id": "tit_1", "type": "assistant_message", "runId": "run_1", "status": "running"}
    view = ThreadView({"thread": {}, "runs": [], "turnItems": [{**item, "text": "x" * 300}]})
    done = {**item, "status": "completed"}  # ``text`` left out: the frame says unchanged
    event = {"sequence": 2, "type": "turn_item.upserted", "payload": {"item": done}}
    touched = view.apply(event, ["text"])
    assert touched is not None and touched["text"] == "x" * 300
    assert view.items["tit_1"]["status"] == "completed"
