"""How an event, a command receipt and a streamed delta are stored: the same in every backend.

The backends store an event as the columns of ``EVENT_COLUMNS`` (correlation and
payload as JSON), a receipt's result as JSON, and a turn item's streamed text as its
``turn_item.delta`` events, folded into the item's row when it is next written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from t3orch.domain.vocab import TURN_ITEM_TERMINAL
from t3orch.events import Correlation, EventEnvelope, EventPayload, TurnItemDelta
from t3orch.store.interface import CommandReceipt
from t3orch.store.kinds import Chunk, Row

#: The columns an event is read back from, in the order ``envelope`` takes them.
EVENT_COLUMNS = (
    "sequence, event_id, type, occurred_at, thread_id, run_id, node_id, "
    "provider_session_id, command_id, correlation, payload"
)
_payload_decoder: msgspec.json.Decoder[EventPayload] = msgspec.json.Decoder(EventPayload)
_correlation_decoder = msgspec.json.Decoder(Correlation)
_delta_decoder = msgspec.json.Decoder(TurnItemDelta)


def envelope(r: Sequence[Any]) -> EventEnvelope:
    """The event of a row of ``EVENT_COLUMNS``."""
    return EventEnvelope(
        sequence=r[0],
        event_id=r[1],
        type=r[2],
        occurred_at=r[3],
        thread_id=r[4],
        run_id=r[5],
        node_id=r[6],
        provider_session_id=r[7],
        command_id=r[8],
        correlation=_correlation_decoder.decode(r[9]),
        payload=_payload_decoder.decode(r[10]),
    )


def receipt_row(r: CommandReceipt) -> tuple[Any, ...]:
    """A receipt as the columns of its table, its result as JSON."""
    return (
        r.command_id,
        r.command_type,
        r.accepted_at,
        r.result_sequence,
        msgspec.json.encode(r.result),
    )


def chunk_of(seq: int, payload: bytes) -> Chunk:
    """The streamed text of the ``turn_item.delta`` event ``seq`` with this payload."""
    d = _delta_decoder.decode(payload)
    return Chunk(seq, d.item_id, d.field, d.replace, d.text)


def streaming(row: Row) -> bool:
    """A turn item that may have streamed text after its row (terminal ones ignore it)."""
    return row.kind == "turn_item" and row.status not in TURN_ITEM_TERMINAL
