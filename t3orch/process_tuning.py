"""The daemon process's interpreter settings (``t3orch serve`` applies them).

* **Garbage collection.** Each event the writer decides allocates a dozen
  short-lived objects (structs, tuples, envelopes). With CPython's default
  young-generation threshold (700 allocations) a collection ran every ~60 events
  and a full one, walking every long-lived object, every ~6,000; bench/store.py
  spent ~10% of its CPU there. Almost all of those objects die by reference
  counting: collecting young cycles every 20,000 allocations is enough, and what
  exists once the daemon has started (modules, config) is moved out of the
  collector's sight for good.
* **GIL switch interval.** Three threads share the GIL under load: the event loop,
  the writer (whose SQLite calls release it) and the thread deciding the next
  batch. A thread coming back from SQLite waits up to the switch interval for the
  GIL; at CPython's 5 ms the writer sat idle behind the decider. 1 ms: +9% in
  bench/store.py (mean of 4 runs each, 19.0k -> 20.8k events/s).

Only the daemon process does this: tests run many daemons in one interpreter and
rely on prompt collection to report unclosed resources where they happen.
"""

from __future__ import annotations

import gc
import sys

YOUNG_THRESHOLD = 20_000
SWITCH_INTERVAL_S = 0.001


def tune_process() -> None:
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
