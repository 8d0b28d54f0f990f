"""The fleet: several daemons on one log, each owning its own machine's runtimes.

``members``: this daemon's id and its heartbeat in the registry; ``owners``: who
owns a thread, as the reads show it; ``routing``: commands for another daemon's
thread go to that daemon (``forward``), or are refused while it is offline.
"""
