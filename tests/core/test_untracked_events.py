"""What is made per streamed event stays out of the cyclic GC's sight (msgspec
``gc=False``): fewer tracked allocations, fewer and shorter collections. None of
these can be part of a reference cycle: they hold strings, numbers and structs."""

from __future__ import annotations

import gc

from t3orch.events import Correlation, EventDraft, EventEnvelope, TurnItemDelta
from t3orch.provider_events import ItemDelta
from t3orch.store.kinds import Chunk


def test_a_streamed_events_objects_are_not_tracked() -> None:
    delta = TurnItemDelta(item_id="itm_1", thread_id="thr_1", text="x")  # type: ignore[arg-type]
    corr = Correlation(provider="codex", native_item_ref="m")
    envelope = EventEnvelope(
        sequence=1,
        event_id="evt_1",  # type: ignore[arg-type]
        type="turn_item.delta",
        occurred_at="2026-12-01T00:00:00.000Z",
        thread_id=None,
        run_id=None,
        node_id=None,
        provider_session_id=None,
        command_id=None,
        correlation=corr,
        payload=delta,
    )
    made = [
        delta,
        corr,
        envelope,
        EventDraft(payload=delta, correlation=corr),
        Chunk(1, "itm_1", None, False, "x"),
        ItemDelta(native_item_ref="m", text="x"),
    ]
    assert [type(x).__name__ for x in made if gc.is_tracked(x)] == []
