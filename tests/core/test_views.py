"""Thread detail is a window of the newest items, paged backwards without gaps or repeats."""

from __future__ import annotations

from pathlib import Path

import msgspec

from t3orch.core import open_core
from t3orch.domain.turn_items import AssistantMessage
from t3orch.projections.views import thread_detail
from t3orch.provider_events import (
    ItemCompleted,
    ProviderEvent,
    TurnStarted,
)
from tests.store.support import new_thread, started_turn


async def test_detail_pages_back_through_every_item(tmp_path: Path) -> None:
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        events: list[ProviderEvent] = [TurnStarted(native_turn_ref="t")]
        events += [
            ItemCompleted(native_item_ref=f"m{i}", content=AssistantMessage(text=f"item {i}"))
            for i in range(450)
        ]
        await core.service.ingest(b, events)
        seen: list[str] = []
        before = None
        pages = 0
        while True:
            with core.reader.snapshot():
                d = thread_detail(core.reader, tid, limit=200, before_position=before)
            pages += 1
            assert d.total_turn_items == 451  # the user's message and 450 replies
            ids = [msgspec.json.decode(r)["id"] for r in d.turn_items]
            seen = ids + seen
            assert len(d.messages) == len(ids)
            if d.older_before_position is None:
                break
            before = d.older_before_position
        assert pages == 3
        assert len(seen) == len(set(seen)) == 451
        with core.reader.snapshot():
            newest = thread_detail(core.reader, tid)
        assert msgspec.json.decode(newest.turn_items[-1])["text"] == "item 449"
        assert len(newest.visible_turn_items) == 200
