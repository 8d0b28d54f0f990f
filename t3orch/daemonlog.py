"""The daemon's own log: one line per lifecycle step, to stderr and to a file.

``t3orch serve`` logs at INFO to stderr (journald under systemd: the lines carry
``<N>`` priority prefixes when ``$JOURNAL_STREAM`` says stderr is the journal, so
``journalctl -p warning`` works) and to ``<state-dir>/daemon.log``, rotated at
``MAX_BYTES`` with ``BACKUP_COUNT`` old files, so ``t3orch logs`` can read it with
or without a running daemon and without journald. Secrets never get here: the
provider text logged is the redacted stderr tail and redacted diagnostics.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG_NAME = "daemon.log"
#: Where each provider session's raw frames and stderr go (``adapters.diagnostics``).
RAW_DIR = "raw"
MAX_BYTES = 5 * 1024 * 1024
BACKUP_COUNT = 3
#: The file's lines: an ISO UTC timestamp, the level, the logger, the message.
FILE_FORMAT = "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s"
#: journald stamps lines itself; a terminal gets the level and the logger.
STDERR_FORMAT = "%(levelname)s %(name)s: %(message)s"

#: sd-daemon(3) priorities, for journald's level prefix.
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def log_path(state_dir: Path) -> Path:
    return state_dir / LOG_NAME


def raw_dir(state_dir: Path) -> Path:
    return state_dir / RAW_DIR


def log_files(state_dir: Path) -> list[Path]:
    """The daemon log and its rotated copies that exist, oldest first."""
    path = log_path(state_dir)
    rotated = [path.with_name(f"{path.name}.{i}") for i in range(BACKUP_COUNT, 0, -1)]
    return [p for p in [*rotated, path] if p.exists()]


class _OneLine(logging.Formatter):
    """A message on one line: journald and ``t3orch logs`` see one entry per step (a
    provider's multi-line error included); a traceback still follows on its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = " ".join(record.message.split("\n"))
        return super().formatMessage(record)


class _JournalFormatter(_OneLine):
    """Prefixes ``<priority>`` so journald files each line at its level."""

    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITY.get(record.levelno, 6)
        return f"<{priority}>" + super().format(record)


class _LogFile(logging.handlers.RotatingFileHandler):
    """``daemon.log``: a file that takes no more (a full disk) costs one line on stderr
    and one when it is written again, not a traceback for every line meanwhile (the
    lines themselves still reach stderr, journald under systemd)."""

    failing = False
    _erred = False

    def emit(self, record: logging.LogRecord) -> None:
        self._erred = False
        super().emit(record)
        if self.failing and not self._erred:
            self.failing = False
            sys.stderr.write(f"t3orch: {self.baseFilename} is written again\n")

    def handleError(self, record: logging.LogRecord) -> None:
        self._erred = True
        if not self.failing:
            self.failing = True
            why = sys.exc_info()[1]
            sys.stderr.write(
                f"t3orch: {self.baseFilename} cannot be written ({why}); "
                "the daemon's log goes to stderr only until it can\n"
            )


def configure(
    state_dir: Path, *, level: int = logging.INFO, stderr: bool = True
) -> list[logging.Handler]:
    """Log to ``<state-dir>/daemon.log`` (and to stderr); returns the handlers added.

    The state dir must exist and be checked already (``prepare_state_dir``).
    """
    root = logging.getLogger()
    root.setLevel(level)
    added: list[logging.Handler] = []
    if stderr:
        err = logging.StreamHandler(sys.stderr)
        if os.environ.get("JOURNAL_STREAM"):
            err.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
        else:
            err.setFormatter(_OneLine(STDERR_FORMAT))
        added.append(err)
    path = log_path(state_dir)
    old_umask = os.umask(0o077)  # the log names the user's sessions and paths
    try:
        file = _LogFile(path, maxBytes=MAX_BYTES, backupCount=BACKUP_COUNT, encoding="utf-8")
    finally:
        os.umask(old_umask)
    formatter = _OneLine(FILE_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    file.setFormatter(formatter)
    added.append(file)
    for handler in added:
        root.addHandler(handler)
    return added


@contextmanager
def logging_to(state_dir: Path, *, stderr: bool) -> Iterator[Path]:
    """:func:`configure` for a block: ``t3orch demo`` and ``drill`` keep their daemon's
    log in its state dir, off the terminal their report is printed on."""
    root = logging.getLogger()
    level = root.level
    handlers = configure(state_dir, stderr=stderr)
    try:
        yield log_path(state_dir)
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
