"""Bad input changes nothing: malformed JSON, wrong types, unknown methods, huge frames."""

from __future__ import annotations

import trio
import trio_websocket

from tests.api.support import TIMEOUT, cid, closed, running_api, unix_client, ws_client
from tests.api.writes import new_thread

BAD = [
    ("{not json", -32700),
    ('["a batch"]', -32600),
    ('{"jsonrpc": "2.0", "id": 1}', -32600),
    ('{"jsonrpc": "1.0", "id": 1, "method": "daemon.status"}', -32600),
    ('{"jsonrpc": "2.0", "id": 1, "method": "daemon.status", "extra": 1}', -32600),
    ('{"jsonrpc": "2.0", "id": 1, "method": "no.such"}', -32601),
    ('{"jsonrpc": "2.0", "id": 1, "method": "run.send", "params": [1, 2]}', -32602),
    ('{"jsonrpc": "2.0", "id": 1, "method": "run.send", "params": {"threadId": "t"}}', -32602),
]


async def test_bad_requests_get_errors_and_change_nothing() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        head = api.core.reader.last_sequence()
        async with ws_client(api) as ws, unix_client(api) as ux:
            for client in (ws, ux):
                for frame, code in BAD:
                    await client.raw(frame)
                    doc = await client.recv()
                    assert doc["error"]["code"] == code, (frame, doc)
        async with ws_client(api) as c:
            typed = await c.request(
                "run.send", {"commandId": cid(), "threadId": tid, "text": 5, "mode": "queue"}
            )
            assert typed["error"]["code"] == -32602
            assert typed["error"]["data"] == {"path": "$.params.text"}
            assert "Expected `str`, got `int`" in typed["error"]["message"]
            extra = await c.request(
                "thread.archive", {"commandId": cid(), "threadId": tid, "force": True}
            )
            assert extra["error"]["code"] == -32602 and "force" in extra["error"]["message"]
            mode = await c.request(
                "run.send", {"commandId": cid(), "threadId": tid, "text": "x", "mode": "shout"}
            )
            assert mode["error"]["data"] == {"path": "$.params.mode"}
            empty = await c.request("run.send", {"commandId": "", "threadId": tid, "text": "x"})
            assert empty["error"]["data"] == {"path": "$.params.commandId"}
            # The id of a request that fails validation is still echoed when readable.
            await c.raw('{"jsonrpc": "2.0", "id": "abc", "method": 7}')
            assert (await c.recv())["id"] == "abc"
        assert api.core.reader.last_sequence() == head


async def test_notifications_get_no_reply() -> None:
    async with running_api() as api, ws_client(api) as c:
        await c.raw('{"jsonrpc": "2.0", "method": "daemon.status"}')
        await c.raw('{"jsonrpc": "2.0", "method": "no.such"}')
        doc = await c.request("daemon.status")
        assert doc["id"] == 1 and "result" in doc


async def test_oversized_frame_closes_that_connection_only() -> None:
    async with running_api(max_frame_bytes=4096) as api:
        async with ws_client(api) as bystander, unix_client(api) as ux_bystander:
            huge = '{"jsonrpc": "2.0", "id": 1, "method": "daemon.status", "params": {"x": "%s"}}'
            async with ws_client(api) as ws:
                await ws.raw(huge % ("y" * 10_000))
                with trio.fail_after(TIMEOUT):
                    assert await closed(ws)
            async with unix_client(api) as ux:
                await ux.raw(huge % ("y" * 10_000))
                doc = await ux.recv()
                assert (
                    doc["error"]["code"] == -32600
                    and "exceeds 4096 bytes" in doc["error"]["message"]
                )
                with trio.fail_after(TIMEOUT):
                    assert await closed(ux)
            # A frame without a newline is cut off as soon as it passes the limit.
            async with unix_client(api) as ux:
                await ux.raw("z" * 20_000)
                doc = await ux.recv()
                assert doc["error"]["code"] == -32600
            assert "result" in await bystander.request("daemon.status")
            assert "result" in await ux_bystander.request("daemon.status")
        async with ws_client(api) as fresh:
            assert "result" in await fresh.request("daemon.status")
        # Just under the limit is fine.
        async with ws_client(api) as ok:
            fits = huge % ("y" * 3000)
            await ok.raw(fits)
            assert (await ok.recv())["error"]["code"] == -32602  # unknown field x, not a close


async def test_a_websocket_client_that_vanishes_mid_stream_is_cleaned_up() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        async with ws_client(api) as c:
            await c.call("subscribe", {"topic": "threadDetail", "threadId": tid})
        with trio.fail_after(TIMEOUT):
            while api.core.broadcast.subscriber_count:
                await api.core.service.send_message(tid, "anyone there?")
                await trio.sleep(0.01)
        async with ws_client(api) as c:
            assert (await c.call("daemon.status"))["api"]["connections"] == 1


async def test_binary_frames_are_accepted() -> None:
    async with running_api() as api:
        url = f"ws://127.0.0.1:{api.endpoints.port}/"
        headers = [(b"authorization", f"Bearer {api.token}".encode())]
        async with trio_websocket.open_websocket_url(url, extra_headers=headers) as ws:
            await ws.send_message(b'{"jsonrpc": "2.0", "id": 9, "method": "daemon.status"}')
            with trio.fail_after(TIMEOUT):
                assert '"id":9' in await ws.get_message()


def nested(depth: int, where: str) -> str:
    arrays = "[" * depth + "]" * depth
    objects = '{"a": ' * depth + "1" + "}" * depth
    deep = arrays if where.endswith("arrays") else objects
    if where.startswith("params"):
        return (
            '{"jsonrpc": "2.0", "id": 7, "method": "daemon.status", "params": {"x": ' + deep + "}}"
        )
    return deep


async def test_deeply_nested_json_is_an_error_and_the_connection_goes_on() -> None:
    async with running_api() as api, ws_client(api) as ws, unix_client(api) as ux:
        for client in (ws, ux):
            for where in ("params arrays", "params objects", "bare arrays", "bare objects"):
                for depth in (2_000, 100_000):
                    await client.raw(nested(depth, where))
                    doc = await client.recv()
                    assert doc["error"]["code"] in (-32700, -32600), (where, depth, doc)
                    assert doc["id"] is None
                    if where.startswith("params"):
                        assert doc["error"]["code"] == -32700
                        assert "nested too deeply" in doc["error"]["message"], doc
                # The same connection still answers.
                status = await client.call("daemon.status")
                assert status["pid"] > 0


async def test_integers_beyond_64_bits_are_invalid_params() -> None:
    huge = 10**30
    async with running_api() as api, ws_client(api) as ws, unix_client(api) as ux:
        tid = await new_thread(api.core.service)
        for client in (ws, ux):
            for method, params, path in [
                ("events.read", {"afterSequence": huge}, "$.params.afterSequence"),
                ("events.read", {"afterSequence": 1e30}, "$.params.afterSequence"),
                ("events.read", {"afterSequence": 2**63}, "$.params.afterSequence"),
                (
                    "subscribe",
                    {"topic": "threadShell", "afterSequence": huge},
                    "$.params.afterSequence",
                ),
                (
                    "view.read",
                    {"topic": "threadDetail", "threadId": tid, "beforePosition": huge},
                    "$.params.beforePosition",
                ),
                (
                    "view.read",
                    {"topic": "threadDetail", "threadId": tid, "beforePosition": -huge},
                    "$.params.beforePosition",
                ),
            ]:
                doc = await client.request(method, params)
                assert doc["error"]["code"] == -32602, (method, params, doc)
                assert doc["error"]["data"] == {"path": path}
            # The largest 64-bit cursor is merely ahead of the log.
            doc = await client.request("events.read", {"afterSequence": 2**63 - 1})
            assert "result" in doc or doc["error"]["code"] == -32000, doc
            assert (await client.call("daemon.status"))["pid"] > 0
