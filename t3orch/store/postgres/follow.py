"""Publishing every daemon's commits to this daemon's subscribers, in sequence order.

On a shared log this daemon's writer sees only its own commits. The follower is
the one publisher of the daemon's broadcast: the writer hands it each committed
batch (a listener on the writer's own broadcast), and a ``LISTEN t3orch_log``
connection on a worker thread tells it when any daemon's commit moved the head.
It publishes strictly in sequence order, as the subscription cursors require: a
local batch right after what was published goes out at once, on the writer's
publishing task (no added latency); a local batch behind a gap (another daemon
committed in between), or a notified head past what was published, makes it
read the log by sequence from what was published on, and publish that.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence

import psycopg
import trio

from t3orch.events import EventEnvelope
from t3orch.store.broadcast import Broadcast
from t3orch.store.errors import StoreError
from t3orch.store.interface import LogReads
from t3orch.store.postgres.backend import CHANNEL, connect

log = logging.getLogger(__name__)

#: How often the listening thread looks up from waiting (to stop, or to reconnect).
POLL_S = 0.25
#: Between attempts to listen again after the connection was lost.
RECONNECT_S = 1.0
_PAGE = 1000


class LogFollower:
    def __init__(self, url: str, log_reads: LogReads, public: Broadcast, published: int) -> None:
        self._url = url
        self._reads = log_reads
        self._public = public
        #: The last sequence published: everything up to it went out, in order.
        self.published = published
        #: Local batches that could not go out at once, oldest first.
        self._pending: list[Sequence[EventEnvelope]] = []
        #: The highest head a notification (or a local batch) announced.
        self._known_head = published
        self._wake_send, self._wake = trio.open_memory_channel[None](math.inf)
        self._stop = threading.Event()

    # -- inputs ---------------------------------------------------------------------

    def local(self, events: Sequence[EventEnvelope]) -> None:
        """The writer's committed batch (a Broadcast listener, on the trio thread)."""
        if not events:
            return
        if not self._pending and events[0].sequence == self.published + 1:
            self._publish(events)
            return
        if events[-1].sequence > self.published:
            self._pending.append(events)
            self._known_head = max(self._known_head, events[-1].sequence)
            self._wake_send.send_nowait(None)

    def _notified(self, head: int) -> None:
        """A commit moved the head to ``head`` (0: listening again, anything may be new).
        This daemon hears its own commits too: those are published already."""
        self._known_head = max(self._known_head, head)
        if head == 0 or self._known_head > self.published:
            self._wake_send.send_nowait(None)

    # -- the service ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listening = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._listen_thread, listening)
            try:
                await listening.wait()
                # Commits between the open and the LISTEN: read once.
                self._wake_send.send_nowait(None)
                task_status.started()
                await self._catch_up_loop()
            finally:
                # The listening thread looks up every POLL_S; the nursery waits for it.
                self._stop.set()

    async def _listen_thread(self, listening: trio.Event) -> None:
        token = trio.lowlevel.current_trio_token()

        def heard(head: int) -> None:
            token.run_sync_soon(self._notified, head)

        def started() -> None:
            token.run_sync_soon(listening.set)

        try:
            await trio.to_thread.run_sync(self._listen, heard, started, abandon_on_cancel=False)
        finally:
            listening.set()

    def _listen(self, heard: Callable[[int], None], started: Callable[[], None]) -> None:
        """The listening thread: waits for notifications until told to stop."""
        first = True
        while not self._stop.is_set():
            try:
                conn = connect(self._url)
            except StoreError as exc:
                if first:
                    started()
                    first = False
                log.warning("cannot listen for other daemons' commits: %s", exc)
                self._stop.wait(RECONNECT_S)
                continue
            try:
                conn.execute(f"LISTEN {CHANNEL}")
                if first:
                    started()
                    first = False
                else:
                    heard(0)  # listening again: read what was missed meanwhile
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=POLL_S):
                        heard(int(note.payload))
            except (psycopg.Error, ValueError) as exc:
                log.warning("lost the connection listening for commits: %s", exc)
                self._stop.wait(RECONNECT_S)
                heard(0)
            finally:
                conn.close()

    async def _catch_up_loop(self) -> None:
        while True:
            await self._wake.receive()
            while True:
                try:
                    self._wake.receive_nowait()
                except trio.WouldBlock:
                    break
            try:
                await self._catch_up()
            except StoreError as exc:
                log.warning("cannot read other daemons' commits: %s", exc)
                await trio.sleep(RECONNECT_S)
                self._wake_send.send_nowait(None)

    async def _catch_up(self) -> None:
        """Publish, in order, everything committed after ``published``."""
        while True:
            self._drain_pending()
            page = await trio.to_thread.run_sync(self._reads.read_events, self.published, _PAGE)
            fresh = [e for e in page if e.sequence > self.published]
            if fresh:
                self._publish(fresh)
                continue
            self._drain_pending()
            if not self._pending:
                return
            # A pending batch past a gap the log does not show yet: it will.
            await trio.sleep(0.01)

    def _drain_pending(self) -> None:
        while self._pending:
            head = self._pending[0]
            if head[-1].sequence <= self.published:
                self._pending.pop(0)
            elif head[0].sequence <= self.published + 1:
                self._pending.pop(0)
                self._publish([e for e in head if e.sequence > self.published])
            else:
                return

    def _publish(self, events: Sequence[EventEnvelope]) -> None:
        self.published = events[-1].sequence
        self._public.publish(events)
