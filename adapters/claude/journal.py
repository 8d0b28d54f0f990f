"""What a held ``claude`` process's journal says about its turns (``supervisor/reattach.py``)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from adapters.protocol import JournalLine


class _Typed(msgspec.Struct):
    type: str = ""


_decode = msgspec.json.Decoder(_Typed).decode


def turn_sent(journal: Iterable[JournalLine]) -> bool:
    """Whether the journal's last user frame (a turn's input) came after the last
    ``result`` (a turn's end): a turn begun in the log whose input never reached the
    CLI has neither."""
    last_start = last_end = 0
    for at, (direction, line) in enumerate(journal, 1):
        if direction == "in" and b'"user"' in line and _type(line) == "user":
            last_start = at
        elif direction == "out" and b'"result"' in line and _type(line) == "result":
            last_end = at
    return last_start > last_end


def _type(line: bytes) -> str:
    try:
        return _decode(line).type
    except msgspec.DecodeError:
        return ""
