"""Proves the stored projections equal a rebuild from the log."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from t3orch.events import EventEnvelope
from t3orch.projections.projector import apply
from t3orch.store.kinds import Chunk, Row


class MemoryRows:
    """A row sink in plain dicts: the rebuild target."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = {}
        self.chunks: dict[int, Chunk] = {}

    def append_chunk(self, chunk: Chunk) -> None:
        self.chunks[chunk.seq] = chunk

    def drop_chunks(self, item_id: str) -> None:
        for seq in [s for s, c in self.chunks.items() if c.item_id == item_id]:
            del self.chunks[seq]

    def put_row(self, row: Row) -> None:
        # The same contract as the store: an update keeps the first position.
        existing = self.rows.get((row.kind, row.id))
        if existing is not None and existing.position != row.position:
            row = attrs.evolve(row, position=existing.position)
        self.rows[(row.kind, row.id)] = row


@attrs.frozen
class CheckReport:
    events: int
    rows: int
    differences: list[str]
    projection_sequence: int
    last_sequence: int

    @property
    def ok(self) -> bool:
        return not self.differences


def rebuild(events: Iterable[EventEnvelope]) -> tuple[MemoryRows, int, list[str]]:
    sink = MemoryRows()
    count = 0
    gaps: list[str] = []
    previous = 0
    for env in events:
        if env.sequence <= previous:
            gaps.append(f"sequence {env.sequence} follows {previous}: not strictly increasing")
        previous = env.sequence
        apply(env, sink)
        count += 1
    return sink, count, gaps


def compare(stored: Iterable[Row], rebuilt: MemoryRows, limit: int = 20) -> list[str]:
    diffs: list[str] = []
    seen: set[tuple[str, str]] = set()
    for row in stored:
        key = (row.kind, row.id)
        seen.add(key)
        other = rebuilt.rows.get(key)
        if other is None:
            diffs.append(f"{row.kind} {row.id}: stored but absent from the rebuild")
        elif other != row:
            fields = [
                f
                for f in ("thread_id", "position", "status", "body")
                if getattr(other, f) != getattr(row, f)
            ]
            diffs.append(f"{row.kind} {row.id}: differs from the rebuild in {', '.join(fields)}")
        if len(diffs) >= limit:
            return diffs
    for key in rebuilt.rows.keys() - seen:
        diffs.append(f"{key[0]} {key[1]}: in the rebuild but not stored")
        if len(diffs) >= limit:
            break
    return diffs


def compare_chunks(stored: Iterable[Chunk], rebuilt: MemoryRows, limit: int = 20) -> list[str]:
    mine = {c.seq: c for c in stored}
    diffs = [
        f"streamed chunk {seq}: differs from the rebuild"
        for seq in sorted(mine.keys() | rebuilt.chunks.keys())
        if mine.get(seq) != rebuilt.chunks.get(seq)
    ]
    return diffs[:limit]
