"""The SQLite store's commit loop: the next batch is decided while one commits.

COMMIT runs without the GIL in one call, so deciding the batch behind it on a
second thread really overlaps it; writing rows takes the GIL back after every
row and would wait behind the deciding thread each time, so that is not
overlapped. A batch decided on top of one that then fails to commit is thrown
away and decided again (nothing of it was written). See staging.py for how a
batch is decided on top of one not yet committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from t3orch.store.errors import StoreError
from t3orch.store.interface import BatchSource, Outcome, Submission
from t3orch.store.sqlite.staging import PreparedBatch


class PipelinedStore(Protocol):
    """The steps of a commit the loop runs apart (``SQLiteStore`` is one): a protocol,
    so that the backend, which starts the loop, is not imported back by it."""

    @property
    def pipelined(self) -> bool: ...

    def prepare_batch(
        self, submissions: Sequence[Submission], behind: PreparedBatch | None = None
    ) -> PreparedBatch: ...

    def write_batch(self, batch: PreparedBatch) -> None: ...

    def commit_written(self, batch: PreparedBatch) -> list[Outcome]: ...

    def forget_prepared(self) -> None: ...


def pipelined(store: PipelinedStore, batches: BatchSource) -> None:
    """Take, decide, write, commit; while a batch commits, decide the next."""
    with ThreadPoolExecutor(1, thread_name_prefix="t3orch decider") as decider:
        _Pipeline(store, batches, decider).run()


class _Pipeline:
    def __init__(self, store: PipelinedStore, batches: BatchSource, decider: ThreadPoolExecutor):
        self.store = store
        self.batches = batches
        self.decider = decider

    def run(self) -> None:
        store, batches = self.store, self.batches
        ahead: tuple[list[Submission], PreparedBatch] | None = None
        while not batches.stopping:
            if ahead is None:
                batch = batches.take(wait=True)
                if batch is None:
                    return
                ahead = self._decided(batch)
                continue
            batch, prepared = ahead
            ahead = None
            try:
                store.write_batch(prepared)
            except StoreError as exc:
                self._failed(exc)
                continue
            # Taken once the batch is written: what queued while it was is decided
            # while it commits, instead of waiting for the next turn.
            following = (batches.take(wait=False) or []) if store.pipelined else []
            behind: Future[PreparedBatch] | None = None
            if following:
                behind = self.decider.submit(store.prepare_batch, following, prepared)
            try:
                outcomes = store.commit_written(prepared)
            except StoreError as exc:
                if behind is not None:
                    # Decided on top of a batch that is not in the log: decide it again.
                    _settled(behind)
                self._failed(exc)
                if following:
                    ahead = self._decided(following)
                continue
            batches.done(outcomes)
            if behind is not None:
                try:
                    ahead = (following, behind.result())
                except StoreError as exc:
                    self._failed(exc)

    def _decided(self, batch: list[Submission]) -> tuple[list[Submission], PreparedBatch] | None:
        try:
            return batch, self.store.prepare_batch(batch)
        except StoreError as exc:
            self._failed(exc)
            return None

    def _failed(self, exc: StoreError) -> None:
        # Nothing decided on top of the failed batch survives (it is decided again).
        self.store.forget_prepared()
        self.batches.done(exc)


def _settled(future: Future[PreparedBatch]) -> None:
    """Wait for ``future``, whatever its end (its result is thrown away)."""
    try:
        future.result()
    except Exception:
        return


__all__ = ["pipelined"]
