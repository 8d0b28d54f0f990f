"""Event ids for a decision's events drawn at once are the ids one at a time would be."""

from __future__ import annotations

import random

from t3orch.ids import EventId, IdFactory


def _factory(start_ms: int = 1_700_000_000_000, seed: int = 3) -> tuple[IdFactory, list[int]]:
    now = [start_ms]
    return IdFactory(clock_ms=lambda: now[0], rng=random.Random(seed)), now


def test_many_ids_are_the_ids_one_at_a_time_would_be() -> None:
    one, _ = _factory()
    many, _ = _factory()
    singles = [one.new(EventId) for _ in range(5)]
    assert many.new_many(EventId, 5) == singles
    assert many.new_many(EventId, 0) == []
    assert many.new(EventId) == one.new(EventId)
    assert len(set(singles)) == 5 and singles == sorted(singles)


def test_a_counter_at_its_end_carries_into_the_next_millisecond() -> None:
    ids, now = _factory()
    first = ids.new(EventId)
    ids._low = (1 << 64) - 3  # two ids left in this millisecond
    batch = ids.new_many(EventId, 4)
    assert len(set([first, *batch])) == 5
    assert [first, *batch] == sorted([first, *batch])
    assert batch[0].startswith(first[:16]) and batch[1].startswith(first[:16])
    assert not batch[2].startswith(first[:16])
    now[0] += 5
    assert ids.new(EventId) > batch[-1]
