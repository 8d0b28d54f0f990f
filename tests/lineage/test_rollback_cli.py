"""``t3orch rollback`` and ``fork --worktree`` through the real daemon and CLI (stand-in).

The daemon is a ``t3orch serve`` child on a real git repository in a temp dir; every
command is the CLI in a child process whose stdin is not a terminal, or in this
process with a terminal stood in for stdin (the answer typed).
"""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from t3orch.cli.main import main
from tests.daemon.support import REPO, config_file, rows, rpc, serve


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=u", "-c", "user.email=u@x", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@contextmanager
def daemon(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    with serve(state, config_file(tmp_path)) as d:
        d.wait_notify("READY=1")
        yield state
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=20) == 0


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", *args, "--state-dir", str(state)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(state: Path, *args: str) -> str:
    proc = cli(state, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def checkpoints(state: Path, tid: str, n: int) -> list[dict[str, Any]]:
    """The thread's run checkpoints, once there are ``n`` (taken at each run's end)."""
    deadline = time.monotonic() + 20
    while True:
        res = json.loads(ok(state, "checkpoints", tid, "--json"))
        runs = [c for c in res["checkpoints"] if c["appRunOrdinal"] is not None]
        if len(runs) >= n or time.monotonic() > deadline:
            assert len(runs) == n, res
            return sorted(runs, key=lambda c: c["appRunOrdinal"])
        time.sleep(0.05)


def run(state: Path, tid: str, text: str, n: int) -> dict[str, Any]:
    ok(state, "send", tid, text, "--wait")
    return checkpoints(state, tid, n)[-1]


def files(repo: Path) -> dict[str, str]:
    return {
        str(p.relative_to(repo)): p.read_text()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }


def repo_at(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "user commit")
    return repo


def test_rollback_lists_asks_and_can_itself_be_rolled_back(tmp_path: Path) -> None:
    repo = repo_at(tmp_path)
    with daemon(tmp_path) as state:
        tid = ok(state, "thread", "new", "--provider", "standin", "--cwd", str(repo)).strip()
        cp1 = run(state, tid, "first", 1)
        (repo / "a.txt").write_text("two\n")
        (repo / "b.txt").write_text("b\n")
        run(state, tid, "second", 2)
        # Made by hand after the last run: a rollback to run 1 deletes it.
        (repo / "mine.txt").write_text("mine\n")
        (repo / "a.txt").write_text("three\n")
        before = files(repo)

        refused = cli(state, "rollback", tid, "--to", cp1["id"])
        assert refused.returncode == 3
        [line] = refused.stderr.strip().splitlines()
        assert "not a terminal" in line and "--yes" in line and "nothing was changed" in line
        assert "  restore a.txt" in refused.stdout
        assert "  delete b.txt" in refused.stdout and "  delete mine.txt" in refused.stdout
        assert "runs rolled back: 2" in refused.stdout
        assert files(repo) == before
        assert [c["status"] for c in checkpoints(state, tid, 2)] == ["ready", "ready"]

        out = ok(state, "rollback", tid, "--to", cp1["id"], "--yes")
        assert "  delete mine.txt" in out
        assert files(repo) == {"a.txt": "one\n"}
        undo = re.search(rf"undo: t3orch rollback {tid} --to (chk_\w+)", out)
        assert undo is not None, out
        assert "1 written back, 2 deleted" in out

        # The rollback rolled back: the hand-made file and the rest are back.
        out = ok(state, "rollback", tid, "--to", undo.group(1), "--yes")
        assert files(repo) == before
        assert "runs rolled back: none" in out
        doc = json.loads(ok(state, "checkpoints", tid, "--json"))
        kinds = {c["id"]: c["appRunOrdinal"] for c in doc["checkpoints"]}
        assert kinds[undo.group(1)] is None
        [row] = [ln for ln in ok(state, "checkpoints", tid).splitlines() if undo.group(1) in ln]
        assert row.split()[1] == "undo"


def test_rollback_asks_on_a_terminal_and_a_no_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = repo_at(tmp_path)
    with daemon(tmp_path) as state:
        tid = ok(state, "thread", "new", "--provider", "standin", "--cwd", str(repo)).strip()
        cp1 = run(state, tid, "first", 1)
        (repo / "mine.txt").write_text("mine\n")

        class Tty(io.StringIO):
            def isatty(self) -> bool:
                return True

        for answer, code in (("n\n", 3), ("y\n", 0)):
            monkeypatch.setattr(sys, "stdin", Tty(answer))
            assert main(["rollback", tid, "--to", cp1["id"], "--state-dir", str(state)]) == code
            out, err = capsys.readouterr()
            assert "roll back? [y/N]" in err and "  delete mine.txt" in out
            if code == 3:
                assert "not confirmed; nothing was changed" in err
                assert (repo / "mine.txt").read_text() == "mine\n"
        assert not (repo / "mine.txt").exists()
        assert "undo: t3orch rollback" in out


def test_a_fork_sharing_the_cwd_is_refused_unless_confirmed_and_a_worktree_fork_is_not(
    tmp_path: Path,
) -> None:
    repo = repo_at(tmp_path)
    with daemon(tmp_path) as state:
        tid = ok(state, "thread", "new", "--provider", "standin", "--cwd", str(repo)).strip()
        run(state, tid, "first", 1)
        (repo / "parent.txt").write_text("the parent's work\n")

        shared = ok(state, "fork", tid).strip()
        fcp1 = run(state, shared, "in the fork", 1)
        (repo / "fork.txt").write_text("the fork's work\n")
        before = files(repo)
        # Without a confirmation the API refuses; the CLI names the parent.
        proc = cli(state, "rollback", shared, "--to", fcp1["id"])
        assert proc.returncode == 3 and files(repo) == before
        assert f"warning: {tid} use this work tree too" in proc.stdout
        with pytest.raises(RuntimeError, match="shared_work_tree"):
            rpc(
                state,
                "thread.rollback",
                {"commandId": "c-shared", "threadId": shared, "checkpointId": fcp1["id"]},
            )
        assert files(repo) == before
        out = ok(state, "rollback", shared, "--to", fcp1["id"], "--yes")
        assert "  delete fork.txt" in out and not (repo / "fork.txt").exists()
        del before["fork.txt"]

        # A worktree fork: its own git worktree, its provider runs there.
        wt_fork = ok(state, "fork", tid, "--worktree").strip()
        detail = json.loads(ok(state, "show", wt_fork, "--json"))["thread"]
        wt = Path(detail["worktreePath"])
        assert detail["cwd"] == str(wt) and wt.is_dir() and wt != repo
        assert str(wt) in git(repo, "worktree", "list")
        assert (wt / "a.txt").read_text() == "one\n"  # the parent's HEAD
        wcp1 = run(state, wt_fork, "in the worktree", 1)
        pts = [pt for pt in rows(state, "provider_thread") if pt.app_thread_id == wt_fork]
        held = {pt.provider_session_id for pt in pts}
        sessions = [s for s in rows(state, "provider_session") if s.id in held]
        assert {pt.cwd for pt in pts} == {s.cwd for s in sessions} == {str(wt)}
        (wt / "wt.txt").write_text("only in the worktree\n")
        out = ok(state, "rollback", wt_fork, "--to", wcp1["id"], "--yes")
        assert "warning" not in out and "  delete wt.txt" in out
        assert not (wt / "wt.txt").exists()
        assert files(repo) == before  # the parent's files were never touched
