"""Typed, time-ordered identifiers for every entity family.

Ids are allocated by the core (never by adapter memory) so that they survive
recovery. Two ways to get one:

* :meth:`IdFactory.new` — a fresh id: 48 bits of milliseconds then 64 bits of
  randomness, hex, so ids of one family sort by creation time. A strictly
  increasing counter breaks ties inside one millisecond.
* :func:`derived_id` — an id computed from durable refs (a provider thread id
  plus a native item ref, say). Replaying the same frames yields the same ids,
  which is what makes adapter replay exact and recovery idempotent.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable
from typing import NewType, TypeVar

ProjectId = NewType("ProjectId", str)
ThreadId = NewType("ThreadId", str)
RunId = NewType("RunId", str)
RunAttemptId = NewType("RunAttemptId", str)
NodeId = NewType("NodeId", str)
CheckpointScopeId = NewType("CheckpointScopeId", str)
CheckpointId = NewType("CheckpointId", str)
ProviderSessionId = NewType("ProviderSessionId", str)
ProviderThreadId = NewType("ProviderThreadId", str)
ProviderTurnId = NewType("ProviderTurnId", str)
RuntimeRequestId = NewType("RuntimeRequestId", str)
MessageId = NewType("MessageId", str)
PlanId = NewType("PlanId", str)
TurnItemId = NewType("TurnItemId", str)
ContextTransferId = NewType("ContextTransferId", str)
ContextHandoffId = NewType("ContextHandoffId", str)
RawEventId = NewType("RawEventId", str)
EventId = NewType("EventId", str)
CommandId = NewType("CommandId", str)
#: A daemon of the fleet: stable per state dir (``<state-dir>/daemon-id``).
DaemonId = NewType("DaemonId", str)

#: The prefix of each family, so an id names what it is in logs and errors.
PREFIXES: dict[str, str] = {
    "ProjectId": "prj",
    "ThreadId": "thr",
    "RunId": "run",
    "RunAttemptId": "att",
    "NodeId": "nod",
    "CheckpointScopeId": "cks",
    "CheckpointId": "chk",
    "ProviderSessionId": "pss",
    "ProviderThreadId": "pth",
    "ProviderTurnId": "ptu",
    "RuntimeRequestId": "req",
    "MessageId": "msg",
    "PlanId": "pln",
    "TurnItemId": "itm",
    "ContextTransferId": "ctr",
    "ContextHandoffId": "cho",
    "RawEventId": "raw",
    "EventId": "evt",
    "DaemonId": "dmn",
}

IdT = TypeVar("IdT", bound=str)


def _prefix(kind: Callable[[str], IdT]) -> str:
    return PREFIXES[kind.__name__]


class IdFactory:
    """Allocates fresh ids; clock and randomness are injectable for tests."""

    def __init__(
        self,
        *,
        clock_ms: Callable[[], int] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._clock_ms = clock_ms
        # Seeded from the OS once: ids need uniqueness, not secrecy, and a syscall
        # per id showed up in the store's profile.
        self._rng = rng or random.Random(os.urandom(16))
        #: The last id's value, as its millisecond part, its hex, and its low 64 bits.
        self._ms = 0
        self._ms_hex = ""
        self._low = 0
        self._heads: dict[Callable[[str], str], str] = {}

    def new(self, kind: Callable[[str], IdT]) -> IdT:
        # One per stored event: a third of the store's per-event Python went here
        # (a 112-bit value through the format-spec machinery, a clock function call).
        clock = self._clock_ms
        ms = time.time_ns() // 1_000_000 if clock is None else clock()
        if ms > self._ms:
            self._ms = ms
            self._ms_hex = f"{ms:012x}"
            self._low = self._rng.getrandbits(64)
        else:
            # Same millisecond (or the clock stepped back): the counter breaks the tie,
            # as documented; randomness is drawn once per millisecond.
            self._low += 1
            if self._low >> 64:
                self._ms += 1
                self._ms_hex = f"{self._ms:012x}"
                self._low = 0
        head = self._heads.get(kind)
        if head is None:
            head = self._heads[kind] = f"{_prefix(kind)}_"
        # The NewType is the identity: skip its call. %-formatting of the low part
        # costs a third of a format spec's.
        return "%s%s%016x" % (head, self._ms_hex, self._low)  # type: ignore[return-value]  # noqa: UP031

    def new_many(self, kind: Callable[[str], IdT], count: int) -> list[IdT]:
        """``count`` ids, as ``count`` calls of ``new`` would give them within one
        millisecond: one clock read for all (a decision's events, ~0.5 µs each saved)."""
        if count <= 0:
            return []
        out = [self.new(kind)]
        head, ms_hex, low = self._heads[kind], self._ms_hex, self._low
        for _ in range(count - 1):
            low += 1
            if low >> 64:
                # The counter would carry into the millisecond: ``new`` handles it.
                self._low = low - 1
                out.extend(self.new(kind) for _ in range(count - len(out)))
                return out
            out.append("%s%s%016x" % (head, ms_hex, low))  # type: ignore[arg-type]  # noqa: UP031
        self._low = low
        return out


def derived_id(kind: Callable[[str], IdT], *parts: str) -> IdT:
    """A stable id for the entity named by ``parts`` (durable refs, ordinals)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=14).hexdigest()
    return kind(f"{_prefix(kind)}_{digest}")
