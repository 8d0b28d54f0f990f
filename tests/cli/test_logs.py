"""``t3orch logs`` on a state dir without a daemon, and where the daemon's log goes."""

from __future__ import annotations

import errno
import logging
import threading
import time
from pathlib import Path

import pytest

from t3orch import daemonlog
from t3orch.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["logs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_logs_prints_the_daemon_log_with_its_rotated_files_oldest_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "daemon.log.1").write_text("older line\n")
    (tmp_path / "daemon.log").write_text("one\ntwo\nthree\n")
    code, out, err = run(capsys, "--state-dir", str(tmp_path))
    assert code == 0, err
    assert out.splitlines()[1:] == ["older line", "one", "two", "three"]
    code, out, _ = run(capsys, "--state-dir", str(tmp_path), "-n", "2")
    assert out.splitlines()[1:] == ["two", "three"]


def test_bad_input_is_one_line_and_a_non_zero_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--state-dir", str(tmp_path / "absent"))
    assert code == 2 and out == "" and "does not exist" in err and len(err.splitlines()) == 1
    code, out, err = run(capsys, "pss_nope", "--state-dir", str(tmp_path))
    assert code == 3 and "no thread or provider session 'pss_nope'" in err
    code, out, err = run(capsys, "--state-dir", str(tmp_path), "-n", "-1")
    assert code == 2 and "--lines" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing was written


def test_follow_prints_appended_lines_and_survives_a_rotation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "daemon.log"
    log.write_text("before\n")
    stop = threading.Event()
    following = threading.Event()  # the log as it was is printed: -f waits for more
    pause = time.sleep

    def sleep(seconds: float) -> None:
        following.set()
        if stop.is_set():
            raise KeyboardInterrupt  # how a user ends `-f`
        pause(0.01)

    monkeypatch.setattr("t3orch.cli.logcmds.time.sleep", sleep)

    def writer() -> None:
        following.wait(10)
        with log.open("a") as f:
            f.write("appended\npartial")
        pause(0.1)
        log.rename(tmp_path / "daemon.log.1")
        log.write_text("after rotation\n")
        pause(0.1)
        stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    code, out, _ = run(capsys, "--state-dir", str(tmp_path), "-f")
    thread.join()
    assert code == 0
    assert out.splitlines()[1:] == ["before", "[daemon] appended", "[daemon] after rotation"]


def test_the_daemon_log_file_and_journald_priorities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    root = logging.getLogger()
    level = root.level
    handlers = daemonlog.configure(tmp_path)
    try:
        logging.getLogger("supervisor.session").warning("provider codex pid 7 crashed")
        logging.getLogger("t3orch.daemon").info("serving")
        logging.getLogger("supervisor.session").info("did not start: %s", "two\nlines")
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
    err = capsys.readouterr().err
    assert "<4>supervisor.session: provider codex pid 7 crashed" in err
    assert "<6>t3orch.daemon: serving" in err
    lines = (tmp_path / "daemon.log").read_text().splitlines()
    assert lines[0].endswith("Z WARNING supervisor.session: provider codex pid 7 crashed")
    assert lines[2].endswith("did not start: two lines")
    assert len(lines) == 3
    assert (tmp_path / "daemon.log").stat().st_mode & 0o777 == 0o600


class _FullDisk:
    """A log file's stream on a disk that takes no more."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        pass

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def tell(self) -> int:
        return 0


def test_a_log_file_that_takes_no_more_costs_one_line_not_a_traceback_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    level = root.level
    handlers = daemonlog.configure(tmp_path)
    (file,) = [h for h in handlers if isinstance(h, logging.FileHandler)]
    say = logging.getLogger("t3orch.daemon")
    try:
        say.info("before")
        real, file.stream = file.stream, _FullDisk()  # type: ignore[assignment]
        for n in range(3):
            say.warning("full %d", n)
        file.stream = real
        say.info("after")
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err
    path = tmp_path / "daemon.log"
    assert err.count(f"t3orch: {path} cannot be written ([Errno 28] No space left on device)") == 1
    assert err.count(f"t3orch: {path} is written again") == 1
    assert all(f"full {n}" in err for n in range(3))  # stderr had every line
    lines = path.read_text().splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines] == ["before", "after"]
