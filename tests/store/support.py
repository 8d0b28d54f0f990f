"""Builders for store tests: a thread with runs, driven through the real core."""

from __future__ import annotations

from t3orch.commands.specs import CreateThread
from t3orch.core import Core
from t3orch.domain.provider import ProviderCapabilities
from t3orch.domain.request import RuntimeRequest
from t3orch.domain.turn_items import AssistantMessage, CommandExecution
from t3orch.ingest.binding import SessionBinding
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RequestOpened,
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
)
from t3orch.service import CoreService


async def new_thread(svc: CoreService, cwd: str = "/tmp", provider: str = "standin") -> str:
    res = await svc.create_thread(CreateThread(provider=provider, cwd=cwd))  # type: ignore[arg-type]
    return str(res.result["threadId"])


async def started_turn(svc: CoreService, thread_id: str, text: str = "hi") -> SessionBinding:
    sent = await svc.send_message(thread_id, text)
    session = await svc.open_session(thread_id)
    assert session.provider_thread_id is not None
    turn = await svc.begin_attempt(sent.result["runId"], session.provider_thread_id)
    return session.with_turn(turn)


def reply_events(turn_ref: str, text: str, chunks: int = 5) -> list[ProviderEvent]:
    size = max(1, len(text) // chunks)
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    return [
        SessionReady(provider_version="t", capabilities=ProviderCapabilities()),
        ThreadRefsLearned(native_thread_ref="native-1"),
        TurnStarted(native_turn_ref=turn_ref),
        ItemStarted(native_item_ref="m1", content=AssistantMessage()),
        *[ItemDelta(native_item_ref="m1", text=p) for p in parts],
        ItemCompleted(native_item_ref="m1", content=AssistantMessage(text=text)),
        TurnCompleted(native_turn_ref=turn_ref, status="completed"),
    ]


async def pending_approval(core: Core, thread_id: str) -> tuple[SessionBinding, RuntimeRequest]:
    """A run waiting on a command approval (``touch x``): its binding and the request."""
    b = await started_turn(core.service, thread_id)
    await core.service.ingest(
        b,
        [
            TurnStarted(native_turn_ref="t1"),
            ItemStarted(native_item_ref="c1", content=CommandExecution(input="touch x")),
            RequestOpened(
                native_request_ref="0",
                kind="command",
                native_item_ref="c1",
                summary="touch x",
                available_decisions=["accept", "decline"],
            ),
        ],
    )
    assert b.turn is not None
    with core.reader.snapshot():
        rows = core.reader.rows("runtime_request", thread_id=thread_id)
    (req,) = [
        r
        for r in (row.decode() for row in rows)
        if r.status == "pending" and r.provider_turn_id == b.turn.provider_turn_id
    ]
    return b, req
