"""Wall-clock timestamps, injectable so tests control them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

WallClock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC with milliseconds and a ``Z``: sortable as text."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
