"""The store's documented exception types. Each message names what was wrong."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every store failure."""


class StateDirInvalid(StoreError):
    """The state directory cannot be used (not a directory, not writable, …)."""


class StoreCorrupt(StoreError):
    """The database file is damaged, or is not a t3orch store at all."""


class SchemaTooNew(StoreError):
    """The store was written by a newer t3orch; opening it would risk its data."""


class StoreFull(StoreError):
    """The disk (or the database's size limit) is full; the batch was not committed."""


class StoreClosed(StoreError):
    """The writer has stopped; nothing more can be appended."""


class StoreNotDurable(StoreError):
    """Making a commit durable failed (an ``fsync`` error): it may not be on disk.

    The writer stops at once (the daemon with it): after a failed ``fsync`` the
    kernel may have dropped the dirty pages, so a later ``fsync`` that succeeds
    proves nothing (PostgreSQL's "fsync gate"). Nobody is told the batch committed;
    a restart reads back what the disk kept.
    """


class CommandRejected(Exception):
    """A command was refused by its handler; nothing was written.

    ``code`` is a stable machine-readable reason, ``message`` says what was wrong.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
