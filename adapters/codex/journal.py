"""What a held Codex process's journal says about its turns (``supervisor/reattach.py``)."""

from __future__ import annotations

from collections.abc import Iterable

from adapters.protocol import JournalLine


def turn_sent(journal: Iterable[JournalLine], committed: int) -> bool:
    """Whether the active turn's ``turn/start`` reached Codex: the journal's last one comes
    after the last ``turn/completed`` the log has (at or below ``committed``; one after it
    may be this very turn's, completed while no daemon read it)."""
    last_start = last_end = 0
    for direction, offset, line in journal:
        if direction == "in" and b'"turn/start"' in line:
            last_start = offset
        elif direction == "out" and offset <= committed and b'"turn/completed"' in line:
            last_end = offset
    return last_start > last_end
