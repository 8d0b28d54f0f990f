"""Command handlers: the only writers of V2 events.

Each handler returns a ``decide`` function that the single writer runs inside
the append transaction, so validation sees exactly the state it changes. A
refusal raises :class:`~t3orch.store.errors.CommandRejected` and writes nothing.
"""
