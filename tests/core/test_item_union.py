"""One turn item union from the adapter to the API, and the stored JSON it always had.

An adapter says what an item is with a variant of ``TurnItem`` left unbound; ingest
binds that value. The stored rows and event payloads keep the JSON the two
parallel unions wrote (``STORED``: bytes written by the code before they were one),
so old logs decode and ``t3orch check`` still matches their rows byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from t3orch.core import open_core
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    ItemContent,
    Subagent,
    TurnItem,
    UserMessage,
    unbound_fields,
)
from t3orch.events import TurnItemUpserted
from t3orch.ingest.changes import Changes
from t3orch.provider_events import ItemCompleted, ItemStarted, TurnCompleted
from tests.store.support import new_thread, started_turn

_REFS = (
    '"id":"itm_1","threadId":"thr_1","runId":"run_1","nodeId":"nod_1","providerTurnId":"ptn_1",'
    '"nativeItemRef":{"value":"i1","strength":"scoped"},"status":"completed",'
    '"createdAt":"2026-12-01T00:00:00.000Z","updatedAt":"2026-12-01T00:00:01.000Z"'
)

#: Turn item rows as the code before the union was one encoded them.
STORED = [
    '{"type":"user_message","messageId":"msg_1","text":"hi",' + _REFS + ',"hidden":true}',
    '{"type":"assistant_message","messageId":"msg_2","text":"hello",' + _REFS + ',"hidden":false}',
    '{"type":"reasoning","text":"t","summary":"s",' + _REFS + ',"hidden":false}',
    '{"type":"plan","planId":"pln_1","markdown":"- x",' + _REFS + ',"hidden":false}',
    '{"type":"file_change","fileName":"a.py","additions":1,"deletions":null,"diffStr":null,'
    '"oldStr":null,"newStr":null,"changes":[{"path":"a.py","kind":"update","diff":"+x"}],'
    + _REFS
    + ',"hidden":false}',
    '{"type":"command_execution","input":"ls","output":"a\\n","exitCode":0,"cwd":"/w",'
    + _REFS
    + ',"hidden":false}',
    '{"type":"file_search","query":"q","path":"/w","output":"o",' + _REFS + ',"hidden":false}',
    '{"type":"web_search","query":"q","output":"",' + _REFS + ',"hidden":false}',
    '{"type":"compaction","title":"Compacted",' + _REFS + ',"hidden":false}',
    '{"type":"dynamic_tool","toolName":"mcp","input":{"a":1},"output":[1],'
    + _REFS
    + ',"hidden":false}',
    '{"type":"subagent","toolName":"Task","description":"d","prompt":"p","agentType":"x",'
    '"childNativeThreadRef":"c","output":"r",' + _REFS + ',"hidden":false}',
]


@pytest.mark.parametrize("stored", STORED, ids=lambda s: json.loads(s)["type"])
def test_stored_items_decode_and_encode_to_the_same_bytes(stored: str) -> None:
    item = msgspec.json.decode(stored, type=TurnItem)  # type: ignore[var-annotated]
    assert unbound_fields(item) == []
    assert msgspec.json.encode(item) == stored.encode()
    event = b'{"type":"turn_item.upserted","item":' + stored.encode() + b"}"
    upserted = msgspec.json.decode(event, type=TurnItemUpserted)
    assert msgspec.json.encode(upserted) == event


def test_an_adapters_item_is_its_content_alone() -> None:
    # The content union of the adapters is the turn item union: same classes.
    content: ItemContent = CommandExecution(input="ls")
    assert isinstance(content, CommandExecution)
    assert msgspec.json.decode(msgspec.json.encode(content)) == {
        "type": "command_execution",
        "input": "ls",
        "output": "",
        "exitCode": None,
        "cwd": None,
        "hidden": False,
    }
    assert set(unbound_fields(UserMessage(text="hi"))) == {
        "id",
        "thread_id",
        "run_id",
        "node_id",
        "provider_turn_id",
        "native_item_ref",
        "status",
        "created_at",
        "updated_at",
        "message_id",
    }


class _NoState:
    def now(self) -> str:
        return "2026-12-01T00:00:00.000Z"


def test_an_unbound_item_never_reaches_the_log() -> None:
    ch = Changes(_NoState())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not bound: no id, thread_id"):
        ch.put("turn_item", AssistantMessage(text="hi"))
    assert ch.drafts == []


async def test_ingest_binds_the_adapters_value_in_the_stored_shape(tmp_path: Path) -> None:
    spawn = Subagent(tool_name="Task", prompt="look")
    async with open_core(tmp_path / "e.db") as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid)
        await core.service.ingest(
            b,
            [
                ItemStarted(native_item_ref="c1", content=CommandExecution(input="ls")),
                ItemCompleted(
                    native_item_ref="c1", content=CommandExecution(input="ls", output="a\n")
                ),
                ItemCompleted(native_item_ref="s1", content=spawn),
                TurnCompleted(native_turn_ref="t1", status="completed"),
            ],
        )
        with core.reader.snapshot():
            rows = {
                r.decode().native_item_ref.value: r
                for r in core.reader.rows("turn_item", thread_id=tid)
                if r.decode().native_item_ref is not None
            }
    command = rows["c1"].decode()
    assert type(command) is CommandExecution and command.output == "a\n"
    assert command.thread_id == tid and command.run_id == b.turn.run_id  # type: ignore[union-attr]
    assert unbound_fields(command) == []
    # The keys in the order the stored rows always had them.
    expected = list(json.loads(STORED[5]))
    assert list(json.loads(rows["c1"].body)) == expected
    assert list(json.loads(rows["s1"].body)) == list(json.loads(STORED[10]))
    assert spawn.id is msgspec.UNSET  # binding made a new value
