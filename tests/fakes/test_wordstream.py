"""A streamed reply's pace (both fakes): due times on a schedule, and each write noted."""

from __future__ import annotations

import pytest

from fixtures.fakes import wordstream
from fixtures.fakes.wordstream import Schedule, WriteTimes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_late_write_does_not_delay_the_words_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(wordstream.time, "monotonic", clock)
    schedule = Schedule()
    assert schedule.wait_for(0.02) == pytest.approx(0.02)
    clock.now += 0.05  # woke 30 ms late: the second word was due at +0.04
    assert schedule.wait_for(0.02) == 0.0
    assert schedule.wait_for(0.02) == pytest.approx(0.01)  # the third is due at +0.06


def test_write_times_are_read_after_a_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(wordstream.time, "monotonic", clock)
    times = WriteTimes()
    times.wrote()
    clock.now += 1
    times.wrote()
    assert times.since(100.5) == [101.0]
