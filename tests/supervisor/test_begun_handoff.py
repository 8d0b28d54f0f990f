"""Which handoffs a turn begun by one daemon carries when the next daemon sends it.

``reattach.begun_handoff`` reads them from the log: each handoff's item names the
provider turn whose input it went with. A steering restart (a later attempt of the run
on the same conversation) carries none, or the provider is told twice; a recovered
attempt on a conversation started afresh carries what it was given again, or the
history is lost to the provider. The real core and store; no provider runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NamedTuple

from supervisor.reattach import begun_handoff
from t3orch.commands.specs import CreateThread
from t3orch.core import open_core
from t3orch.domain.provider import ProviderThread
from t3orch.domain.turn_items import AssistantMessage, Handoff
from t3orch.ids import ProviderThreadId, TurnItemId, derived_id
from t3orch.ingest.binding import TurnBinding
from t3orch.provider_events import ItemCompleted, TurnCompleted, TurnStarted
from t3orch.service import CoreService
from t3orch.store.interface import ReadModel


class Switched(NamedTuple):
    svc: CoreService
    reader: ReadModel
    run: str
    pt: ProviderThreadId
    told: str
    first: TurnBinding


async def _completed_run(svc: CoreService, thread_id: str, text: str) -> None:
    run = (await svc.send_message(thread_id, text)).result["runId"]
    session = await svc.open_session(thread_id)
    assert session.provider_thread_id is not None
    turn = await svc.begin_attempt(run, session.provider_thread_id)
    await svc.ingest(
        session.with_turn(turn),
        [
            TurnStarted(native_turn_ref="t"),
            ItemCompleted(native_item_ref="m", content=AssistantMessage(text=f"ack: {text}")),
            TurnCompleted(native_turn_ref="t", status="completed"),
        ],
    )


@asynccontextmanager
async def _switched(tmp_path: Path) -> AsyncIterator[Switched]:
    """A thread whose run 1 completed on the stand-in, switched to Claude, run 2's first
    attempt begun on Claude's new provider thread with what it is told of run 1."""
    async with open_core(tmp_path / "e.db", synchronous="NORMAL") as core:
        svc = core.service
        spec = CreateThread(provider="standin", cwd=str(tmp_path))
        tid = (await svc.create_thread(spec)).result["threadId"]
        await _completed_run(svc, tid, "remember the word PAPAYA")
        await svc.switch_provider(tid, "claude")
        run = (await svc.send_message(tid, "two")).result["runId"]
        session = await svc.open_session(tid)
        pt = session.provider_thread_id
        assert session.provider == "claude" and pt is not None
        told, first = await svc.begin_attempt_with_handoff(run, pt)
        assert told is not None and "User: remember the word PAPAYA" in told
        yield Switched(svc, core.reader, run, pt, told, first)


async def test_a_steering_restart_carries_nothing_its_first_attempt_carried(
    tmp_path: Path,
) -> None:
    async with _switched(tmp_path) as (svc, reader, run, pt, told, first):
        pt_row = reader.get(ProviderThread, pt)
        assert pt_row is not None
        (handoff_id,) = pt_row.handoff_ids
        item = reader.get(Handoff, derived_id(TurnItemId, handoff_id))
        assert item is not None and item.provider_turn_id == first.provider_turn_id
        assert begun_handoff(reader, first, pt) == told

        restart = await svc.begin_attempt(run, pt, "steering_restart")
        assert begun_handoff(reader, restart, pt) is None, "the conversation was told"


async def test_a_recovered_attempt_on_a_conversation_started_afresh_carries_it_again(
    tmp_path: Path,
) -> None:
    async with _switched(tmp_path) as (svc, reader, run, pt, told, first):
        # The provider crashed mid-turn: the recovered attempt is begun on the same
        # provider thread, whose conversation then starts afresh (nothing confirmed it).
        recovered = await svc.begin_attempt(run, pt, "provider_recovery")
        assert begun_handoff(reader, recovered, pt) is None
        await svc.forget_conversation(pt)
        again = await svc.prepare_handoff(run, pt, recovered.provider_turn_id)
        assert again == told, "the same summary, once more"
        assert begun_handoff(reader, recovered, pt) == again
        assert begun_handoff(reader, first, pt) is None, "it went with the recovered one"
        pt_row = reader.get(ProviderThread, pt)
        assert pt_row is not None and len(pt_row.handoff_ids) == 1
