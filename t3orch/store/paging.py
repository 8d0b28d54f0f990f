"""A thread's rows newest first, in pages: what every backend's ``recent`` reads.

A page is one bounded query keyed on the last row of the page before (``position``
then ``id``, the index order), so nothing stays open between pages: no statement
or read transaction of SQLite (an unfinished one would pin the WAL), no pooled
connection of PostgreSQL. Callers mostly stop within a few rows (the previous run,
the scopes this run opened), so the first page is small and later ones grow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from t3orch.store.kinds import Row

E = TypeVar("E")

#: A page's rows are before this (position, id), newest first.
Cursor = tuple[int, str]
#: Newer than every stored row.
NEWEST: Cursor = (2**62, "")
FIRST_PAGE = 8
LAST_PAGE = 256

#: Reads at most ``limit`` rows before the cursor, newest first.
ReadPage = Callable[[Cursor, int], Sequence[Row]]


def newest_first(read_page: ReadPage) -> Iterator[Row]:
    cursor, size = NEWEST, FIRST_PAGE
    while True:
        rows = read_page(cursor, size)
        yield from rows
        if len(rows) < size:
            return
        cursor = (rows[-1].position, rows[-1].id)
        size = min(2 * size, LAST_PAGE)


def entities_newest_first(
    entity: type[E], read_page: ReadPage, value: Callable[[Row], object]
) -> Iterator[E]:
    """The rows' entities of type ``entity``, each decoded (``value``) as it is asked for."""
    for row in newest_first(read_page):
        if isinstance(v := value(row), entity):
            yield v
