"""What a held ``claude`` process's journal says about its turns (``supervisor/reattach.py``)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from adapters.protocol import JournalLine


class _Typed(msgspec.Struct):
    type: str = ""


_decode = msgspec.json.Decoder(_Typed).decode


def turn_sent(journal: Iterable[JournalLine], committed: int) -> bool:
    """Whether the active turn's input (a user frame) reached the CLI: the journal's last
    one comes after the last ``result`` (a turn's end) the log has, at or below
    ``committed`` (one after it may be this very turn's, ended while no daemon read it)."""
    last_start = last_end = 0
    for direction, offset, line in journal:
        if direction == "in" and b'"user"' in line and _type(line) == "user":
            last_start = offset
        elif (
            direction == "out"
            and offset <= committed
            and b'"result"' in line
            and _type(line) == "result"
        ):
            last_end = offset
    return last_start > last_end


def _type(line: bytes) -> str:
    try:
        return _decode(line).type
    except msgspec.DecodeError:
        return ""
