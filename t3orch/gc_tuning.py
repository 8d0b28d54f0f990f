"""The daemon process's garbage-collector settings (``t3orch serve`` applies them).

Each event the writer decides allocates a dozen short-lived objects (structs,
tuples, envelopes). With CPython's default young-generation threshold (700
allocations) a collection ran every ~60 events and a full one, walking every
long-lived object, every ~6,000; bench/store.py spent ~10% of its CPU there.
Almost all of those objects die by reference counting: collecting young cycles
every 20,000 allocations is enough, and what exists once the daemon has started
(modules, config) is moved out of the collector's sight for good.

Only the daemon process does this: tests run many daemons in one interpreter and
rely on prompt collection to report unclosed resources where they happen.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)
