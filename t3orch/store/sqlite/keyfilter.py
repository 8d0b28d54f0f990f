"""Which projection rows may exist: a Bloom filter over the ``rows`` table's keys.

Most rows a batch decides about are new (an item's node and row, a turn's run,
a message), and asking SQLite for a row that is not there costs a B-tree descent
through pages the writer's last commit evicted from the deciding connection's
cache: ~30 µs, a fifth of deciding in bench/store.py. A key the filter has never
seen is certainly absent, so the read is skipped; a false positive only costs
the read it would have made anyway.

Keys are added when a batch stages a row, before it commits: a batch that then
fails leaves keys of rows that do not exist, which are false positives too. The
store is the only writer of rows, so nothing else adds keys.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

Key = tuple[str, str]

#: Above this many rows the table is not scanned (~0.2 s per 100,000 rows, at every
#: daemon start) and every key may exist: deciding reads, as it would without a filter.
MAX_SCANNED_ROWS = 100_000
#: Bits per expected key, and bit positions per key: ~0.5% false positives when full.
_BITS_PER_KEY = 12
_PROBES = 4
#: The smallest filter made (128 KB of bits).
MIN_CAPACITY = 1 << 16


class KeyFilter:
    """Bloom filter of row keys, grown (and rebuilt from the table) as rows are added."""

    __slots__ = ("_bits", "_capacity", "_count", "_mask", "everything")

    def __init__(self, capacity: int | None = None) -> None:
        capacity = max(capacity or 0, MIN_CAPACITY)
        size = 1 << (capacity * _BITS_PER_KEY - 1).bit_length()  # bits, a power of two
        self._bits = bytearray(size >> 3)
        self._mask = size - 1
        self._capacity = capacity
        self._count = 0
        #: Holds every key (a table too large to scan): nothing is known absent.
        self.everything = False

    @classmethod
    def of_table(cls, conn: sqlite3.Connection, staged: Iterable[Key] = ()) -> KeyFilter:
        """A filter holding every key in ``rows`` (read on ``conn``) and ``staged``."""
        (count,) = conn.execute("SELECT count(*) FROM rows").fetchone()
        if count > MAX_SCANNED_ROWS:
            everything = cls()
            everything.everything = True
            return everything
        keys = cls(2 * count)
        for key in conn.execute("SELECT kind, id FROM rows"):
            keys.add(key)
        for key in staged:
            keys.add(key)
        return keys

    @property
    def full(self) -> bool:
        """More keys than it was sized for: rebuild it bigger (``of_table``)."""
        return self._count > self._capacity and not self.everything

    def add(self, key: Key) -> None:
        h = hash(key)
        step = (h >> 32) | 1
        bits, mask = self._bits, self._mask
        for _ in range(_PROBES):
            i = h & mask
            bits[i >> 3] |= 1 << (i & 7)
            h += step
        self._count += 1

    def __contains__(self, key: Key) -> bool:
        if self.everything:
            return True
        h = hash(key)
        step = (h >> 32) | 1
        bits, mask = self._bits, self._mask
        for _ in range(_PROBES):
            i = h & mask
            if not bits[i >> 3] & (1 << (i & 7)):
                return False
            h += step
        return True
