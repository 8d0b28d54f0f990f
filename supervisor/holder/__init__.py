"""A holder per provider runtime: the process that keeps a provider alive across a daemon restart.

``server`` is the holder process (``python -m supervisor.holder``), ``client``
the daemon's side of it (a :class:`~adapters.transport.ProviderProcess`, so
adapters do not change), ``wire`` the record format of its journal and socket,
``layout`` its files. Kept light: the holder forks before importing anything.
"""
