"""Writes through the real core for API tests: runs, streamed replies, pending requests."""

from __future__ import annotations

from typing import Any

from t3orch.core import Core
from t3orch.domain.turn_items import (
    AssistantMessage,
)
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    TurnCompleted,
    TurnStarted,
)
from tests.store.support import new_thread, pending_approval, started_turn

__all__ = ["new_thread", "open_request", "streamed_turn", "write_op"]


async def streamed_turn(
    core: Core, thread_id: str, text: str = "the answer", step: int = 3, final: str | None = None
) -> str:
    """A run that streams ``text`` in deltas of ``step`` characters and completes with
    ``final`` (default: ``text``); returns the run id."""
    b = await started_turn(core.service, thread_id)
    assert b.turn is not None
    await core.service.ingest(
        b,
        [
            TurnStarted(native_turn_ref="t1"),
            ItemStarted(native_item_ref="m1", content=AssistantMessage()),
        ],
    )
    for i in range(0, len(text), step):
        await core.service.ingest(b, [ItemDelta(native_item_ref="m1", text=text[i : i + step])])
    await core.service.ingest(
        b,
        [
            ItemCompleted(
                native_item_ref="m1",
                content=AssistantMessage(text=text if final is None else final),
            ),
            TurnCompleted(native_turn_ref="t1", status="completed"),
        ],
    )
    return b.turn.run_id


async def open_request(core: Core, thread_id: str) -> dict[str, Any]:
    """A run waiting on a command approval; returns the pending request's row."""
    b, req = await pending_approval(core, thread_id)
    assert b.turn is not None
    return {"id": req.id, "runId": b.turn.run_id}


async def write_op(core: Core, op: str, thread_id: str, other_id: str) -> None:
    match op:
        case "send":
            await core.service.send_message(thread_id, "hello")
        case "turn":
            await streamed_turn(core, thread_id, "abcdefghij")
        case "long":
            # Long enough that live streams leave the completed text out.
            await streamed_turn(core, thread_id, "long reply é " * 40, step=130)
        case "request":
            await open_request(core, thread_id)
        case "other":
            await core.service.send_message(other_id, "elsewhere")
        case "thread":
            await new_thread(core.service)
        case _:
            raise AssertionError(op)
