"""The daemon process's interpreter and process settings (``t3orch serve`` applies them).

* **Garbage collection.** Each event the writer decides allocates a dozen
  short-lived objects (structs, tuples, envelopes). With CPython's default
  young-generation threshold (700 allocations) a collection ran every ~60 events
  and a full one, walking every long-lived object, every ~6,000; bench/store.py
  spent ~10% of its CPU there. What exists once the daemon has started (modules,
  config) is moved out of the collector's sight for good, and the young
  generation is collected every 2,000 allocations. A pass costs ~0.5 µs per live
  young object, so the threshold is also the longest pause: at 20,000 one pass
  took 10-15 ms and, landing in bench/fanout.py's stream, put item upserts over
  their 20 ms p99; at 2,000 the passes there take 1-4 ms, for ~2% more collector
  CPU in bench/store.py (0.25 s against 0.16 s per 100,000 events).
* **GIL switch interval.** Three threads share the GIL under load: the event loop,
  the writer (whose SQLite calls release it) and the thread deciding the next
  batch. A thread coming back from SQLite waits up to the switch interval for the
  GIL; at CPython's 5 ms the writer sat idle behind the decider. 1 ms: +9% in
  bench/store.py (mean of 4 runs each, 19.0k -> 20.8k events/s).

* **Descriptors.** The soft RLIMIT_NOFILE is raised to the hard limit, at most
  65,536 (``NOFILE_TARGET``), never lowered. Every provider holds pipes and a log,
  every client a socket; a soft limit of 1,024 (the usual login default) leaves
  little room, and the API sizes its WebSocket bound from what is left. The cap
  keeps children (providers and the tools they run, which inherit the limit)
  away from limits in the millions, which make programs that close every
  possible descriptor slow; Node and Bun raise their own soft limit anyway.

Only ``t3orch serve`` does this, once its daemon is ready (``tune_interpreter``,
its one call site; the descriptor limit is raised before anything opens): tests
run many daemons in one interpreter and rely on prompt collection to report
unclosed resources where they happen. Whether each setting still pays is
measured by ``bench/store.py``'s realistic load, with and without it.
"""

from __future__ import annotations

import gc
import resource
import sys

#: Young generation every 2,000 allocations, older ones every 10 passes of the one below.
GC_THRESHOLDS = (2_000, 10, 10)
SWITCH_INTERVAL_S = 0.001
NOFILE_TARGET = 65_536


#: CPython's own settings (what ``reset_interpreter`` restores, for benchmarks).
_DEFAULT_THRESHOLDS = gc.get_threshold()
_DEFAULT_SWITCH_INTERVAL_S = sys.getswitchinterval()


def tune_interpreter() -> None:
    """The daemon's collector and GIL settings; what exists by now (startup objects,
    which live as long as the daemon) is kept out of every collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def reset_interpreter() -> None:
    """CPython's defaults again (a benchmark comparing with and without the tuning)."""
    gc.unfreeze()
    gc.collect()
    gc.set_threshold(*_DEFAULT_THRESHOLDS)
    sys.setswitchinterval(_DEFAULT_SWITCH_INTERVAL_S)


def raise_descriptor_limit(target: int = NOFILE_TARGET) -> int:
    """Raises the soft RLIMIT_NOFILE towards ``target`` within the hard limit; the new soft."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = target if hard == resource.RLIM_INFINITY else min(hard, target)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        except (OSError, ValueError):
            return soft
        return ceiling
    return soft
