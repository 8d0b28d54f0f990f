"""The daemon process's settings: its descriptor limit (``t3orch serve`` raises it).

The soft RLIMIT_NOFILE is raised to the hard limit, at most 65,536
(``NOFILE_TARGET``), never lowered. Every provider holds pipes and a log, every
client a socket; a soft limit of 1,024 (the usual login default) leaves little
room, and the API sizes its WebSocket bound from what is left. The cap keeps
children (providers and the tools they run, which inherit the limit) away from
limits in the millions, which make programs that close every possible
descriptor slow; Node and Bun raise their own soft limit anyway.

The interpreter itself runs on CPython's defaults (collector thresholds, GIL
switch interval): the tuning the daemon had did not pay at a realistic load
(``bench/store.py``, ``bench/fanout.py``; docs/decisions.md, issue 16).
"""

from __future__ import annotations

import resource

NOFILE_TARGET = 65_536


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
