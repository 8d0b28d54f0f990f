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


class StoreStalled(StoreError):
    """The batch was not committed, for a reason that passes (no room, no server): the
    writer refuses commands meanwhile and tries the rest again until they commit."""

    #: What the writer logs once a batch commits after it.
    resumed = "the store takes commits again"


class StoreFull(StoreStalled):
    """The disk (or the database's size limit) is full; the batch was not committed."""

    resumed = "the store has room again"


class StoreUnavailable(StoreStalled):
    """The store's server cannot be reached (stopped, restarting, the network) and the
    batch was not sent to it; nothing was committed."""

    resumed = "the store's server answers again"


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
