"""A faked filesystem's ``fsync`` for the SQLite writer (``SQLiteStore(fsync=...)``).

Every call is recorded (the inode it synced) and then really made; once armed, the
next call first waits for a condition (the test's "what happened meanwhile"), or
fails as a dying disk does (``EIO``).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable

WAIT_S = 10.0


class FsyncGate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The inode of each descriptor synced, in call order.
        self.synced: list[int] = []
        self._hold: Callable[[], bool] | None = None
        self._only_if: Callable[[], bool] | None = None
        self._fail = False
        #: Whether the held call's condition came true before it went on.
        self.held: bool | None = None
        #: Set while an armed call waits; ``entered`` once it started waiting.
        self.entered = threading.Event()

    def hold_until(
        self, condition: Callable[[], bool], *, only_if: Callable[[], bool] | None = None
    ) -> None:
        """The next fsync (the next one when ``only_if()`` says so) waits, at most
        WAIT_S, until ``condition()`` (polled)."""
        with self._lock:
            self._hold, self._only_if, self.held = condition, only_if, None

    def fail_next(self) -> None:
        """The next fsync fails with EIO (and syncs nothing)."""
        with self._lock:
            self._fail = True

    def __call__(self, fd: int) -> None:
        with self._lock:
            hold = self._hold
            if hold is not None and (self._only_if is None or self._only_if()):
                self._hold = None
            else:
                hold = None
            fail, self._fail = self._fail, False
        if fail:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        if hold is not None:
            self.entered.set()
            deadline = time.monotonic() + WAIT_S
            while not (met := hold()) and time.monotonic() < deadline:
                time.sleep(0.001)
            self.held = met
        self.synced.append(os.fstat(fd).st_ino)
        os.fsync(fd)
