"""A NUL byte in a setting that reaches a provider's spawn (cwd, model) is refused: -32602."""

from __future__ import annotations

import pytest

from tests.api.support import cid, running_api, ws_client
from tests.api.writes import new_thread


@pytest.mark.parametrize("field", ["cwd", "model"])
async def test_thread_create_refuses_a_nul_byte(field: str) -> None:
    async with running_api() as api, ws_client(api) as c:
        head = api.core.reader.last_sequence()
        params = {"commandId": cid(), "provider": "standin", "cwd": "/tmp", field: "/tmp/a\x00b"}
        doc = await c.request("thread.create", params)
        assert doc["error"]["code"] == -32602, doc
        assert f"{field} must not contain a NUL byte" in doc["error"]["message"]
        assert api.core.reader.last_sequence() == head  # nothing was written


@pytest.mark.parametrize("field", ["cwd", "model"])
async def test_thread_configure_refuses_a_nul_byte(field: str) -> None:
    async with running_api() as api, ws_client(api) as c:
        tid = await new_thread(api.core.service)
        head = api.core.reader.last_sequence()
        params = {"commandId": cid(), "threadId": tid, field: "x\x00"}
        doc = await c.request("thread.configure", params)
        assert doc["error"]["code"] == -32602, doc
        assert f"{field} must not contain a NUL byte" in doc["error"]["message"]
        assert api.core.reader.last_sequence() == head
