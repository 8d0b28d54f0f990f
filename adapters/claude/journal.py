"""What a held ``claude`` process's journal says about its turns (``supervisor/reattach.py``)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from adapters.protocol import JournalLine


class _Typed(msgspec.Struct):
    type: str = ""


_decode = msgspec.json.Decoder(_Typed).decode


def turn_sent(journal: Iterable[JournalLine], committed: int, begun_after: int | None) -> bool:
    """Whether the active turn's input (a user frame) reached the CLI.

    With ``begun_after`` (how far the daemon had read this journal when it began the
    turn): a user frame journaled after it, which can only be this turn's. Without it (a
    turn begun before this process ran it, or a row from before it was recorded): the
    journal's last one comes after the last ``result`` (a turn's end) the log has, at or
    below ``committed`` (one after it may be this very turn's, ended while no daemon read
    it), which misses a previous turn's end committed before its offset was.
    """
    last_start = last_end = 0
    for direction, offset, line in journal:
        if direction == "in" and b'"user"' in line and _type(line) == "user":
            if begun_after is not None and offset > begun_after:
                return True
            last_start = offset
        elif (
            direction == "out"
            and offset <= committed
            and b'"result"' in line
            and _type(line) == "result"
        ):
            last_end = offset
    return begun_after is None and last_start > last_end


def _type(line: bytes) -> str:
    try:
        return _decode(line).type
    except msgspec.DecodeError:
        return ""
