"""What a held Codex process's journal says about its turns (``supervisor/reattach.py``)."""

from __future__ import annotations

from collections.abc import Iterable

from adapters.protocol import JournalLine


def turn_sent(journal: Iterable[JournalLine]) -> bool:
    """Whether the journal's last ``turn/start`` came after the last ``turn/completed``: a
    turn begun in the log whose request never reached the provider has neither."""
    last_start = last_end = 0
    for at, (direction, line) in enumerate(journal, 1):
        if direction == "in" and b'"turn/start"' in line:
            last_start = at
        elif direction == "out" and b'"turn/completed"' in line:
            last_end = at
    return last_start > last_end
