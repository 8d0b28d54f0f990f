"""A turn's timeline for the benchmark: monotonic stamps at the hops, off by default.

``T3ORCH_TIMELINE=<file>`` in a daemon's environment turns it on: each :func:`stamp`
appends ``<CLOCK_MONOTONIC ns> <name>`` to that file, from any thread. The clock is
the machine's, so a client (``bench/stream.py``) stamps its own send and receive on
the same axis and cuts the file into turns. Off, a stamp is one global read.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TextIO

_out: TextIO | None = None
_lock = threading.Lock()


def start(path: str | None = None) -> None:
    """Stamp into ``path`` (default: ``$T3ORCH_TIMELINE``; unset: stay off)."""
    global _out
    path = path if path is not None else os.environ.get("T3ORCH_TIMELINE")
    if path and _out is None:
        _out = open(path, "a", buffering=1, encoding="ascii")  # noqa: SIM115 (kept open)


def stamp(name: str) -> None:
    """The time ``name`` happened (a hop of a turn), when the timeline is on."""
    out = _out
    if out is not None:
        line = f"{time.monotonic_ns()} {name}\n"
        with _lock:
            out.write(line)


def read(path: str) -> list[tuple[float, str]]:
    """A timeline file's stamps: (monotonic seconds, name), in file order."""
    stamps: list[tuple[float, str]] = []
    with open(path, encoding="ascii") as f:
        for line in f:
            ns, _, name = line.rstrip("\n").partition(" ")
            if ns.isdigit():
                stamps.append((int(ns) / 1e9, name))
    return stamps
