"""EventQueue: order, batches, bound, close, cancellation."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from t3orch.ingest.queue import EventQueue
from t3orch.provider_events import Diagnostic, ItemDelta, ProviderEvent


def delta(n: int) -> ItemDelta:
    return ItemDelta(raw_event_id=f"raw_{n}", native_item_ref="m", text=str(n))


def texts(events: list[ProviderEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, ItemDelta)]


async def test_take_hands_out_everything_queued_in_order() -> None:
    queue = EventQueue()
    queue.put(delta(0))
    queue.put_all([delta(1), delta(2)])
    queue.put(delta(3))
    assert texts(await queue.take()) == ["0", "1", "2", "3"]
    assert len(queue) == 0 and queue.take_nowait() == []


async def test_a_waiting_consumer_wakes_on_one_put() -> None:
    queue = EventQueue()
    taken: list[list[ProviderEvent]] = []

    async def consume() -> None:
        taken.append(await queue.take())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        assert taken == []
        queue.put(delta(0))
    assert [texts(batch) for batch in taken] == [["0"]]


async def test_put_reports_the_bound_and_room_waits_for_a_take() -> None:
    queue = EventQueue(high_water=3)
    assert not queue.put(delta(0))
    assert queue.put_all([delta(1), delta(2), delta(3)])  # a frame's events go in whole
    assert len(queue) == 4
    roomy = False

    async def produce() -> None:
        nonlocal roomy
        await queue.room()
        roomy = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        assert not roomy
        assert texts(queue.take_nowait()) == ["0", "1", "2", "3"]
    assert roomy


async def test_close_drops_later_events_and_ends_the_consumer_after_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = EventQueue(high_water=1)
    queue.put(delta(0))
    queue.close()
    caplog.set_level(logging.DEBUG, logger="t3orch.ingest.queue")
    assert not queue.put(delta(1))
    assert not queue.put_all([Diagnostic(level="info", code="c", message="m")])
    assert "ItemDelta" in caplog.text and "Diagnostic" in caplog.text
    with trio.fail_after(1):
        await queue.room()  # full, but nobody will take: a producer must not hang
        assert texts(await queue.take()) == ["0"]
        assert await queue.take() == []
        assert await queue.take() == []


async def test_close_wakes_a_waiting_consumer_and_producer() -> None:
    queue = EventQueue(high_water=1)
    ended: list[object] = []

    async def consume() -> None:
        ended.append(await queue.take())

    async def produce() -> None:
        queue.put(delta(0))
        other.put(delta(0))
        await other.room()
        ended.append("room")

    other = EventQueue(high_water=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        queue.close()
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        other.close()
    assert ended == [[], "room"]


async def test_a_cancelled_take_takes_nothing() -> None:
    queue = EventQueue()
    with trio.move_on_after(0.01):
        await queue.take()
    queue.put(delta(0))
    with trio.CancelScope() as scope:
        scope.cancel()
        await queue.take()
    assert len(queue) == 1
    assert texts(await queue.take()) == ["0"]


async def test_async_with_closes() -> None:
    queue = EventQueue()
    async with queue:
        queue.put(delta(0))
    assert queue.closed
    assert texts(await queue.take()) == ["0"]
    assert await queue.take() == []


def test_the_bound_is_positive() -> None:
    with pytest.raises(ValueError):
        EventQueue(high_water=0)
