"""The bounds on WebSocket connections (count, auth timeout), through the real server."""

from __future__ import annotations

import socket

import pytest
import trio
import trio_websocket

from t3orch.api.transport import FD_RESERVE, Admission
from tests.api.support import Client, closed, running_api, unix_client, ws_client

AUTH_TIMEOUT_S = 0.5


async def raw_connect(port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port)


async def read_to_eof(stream: trio.SocketStream, within: float) -> bytes:
    data = b""
    with trio.fail_after(within):
        while chunk := await stream.receive_some(4096):
            data += chunk
    return data


async def until_unauthenticated(client: Client, count: int) -> None:
    with trio.fail_after(2):
        while (await client.call("daemon.status"))["api"]["unauthenticated"] != count:  # noqa: ASYNC110 - the server's state, seen over the API
            await trio.sleep(0.01)


async def test_an_idle_connection_without_the_token_is_closed_at_the_auth_timeout() -> None:
    async with running_api(api_auth_timeout_s=AUTH_TIMEOUT_S) as api:
        port = api.endpoints.port
        raw = await raw_connect(port)
        started = trio.current_time()
        async with ws_client(api, token=None) as anon, ws_client(api) as owner:
            # Unauthorized but answered, until the deadline.
            doc = await anon.request("daemon.status")
            assert doc["error"]["code"] == -32001
            with trio.fail_after(AUTH_TIMEOUT_S + 3):
                with pytest.raises(trio_websocket.ConnectionClosed) as gone:
                    while True:
                        await anon.recv()
            assert gone.value.reason.code == 1008
            assert "unauthorized" in (gone.value.reason.reason or "")
            # A handshake that never started: closed by the same deadline.
            assert await read_to_eof(raw, within=3) == b""
            assert trio.current_time() - started >= AUTH_TIMEOUT_S * 0.9
            # The owner, past the same timeout, is still served.
            await trio.sleep(AUTH_TIMEOUT_S)
            status = await owner.call("daemon.status")
            assert status["api"]["unauthenticated"] == 0
        await raw.aclose()


async def test_past_the_bound_a_connection_is_refused_at_once_and_the_owner_is_not() -> None:
    async with running_api(api_max_unauthenticated=4, api_auth_timeout_s=30) as api:
        port = api.endpoints.port
        held = [await raw_connect(port) for _ in range(4)]
        async with unix_client(api) as ux:
            await until_unauthenticated(ux, 4)
            extra = await raw_connect(port)
            refusal = await read_to_eof(extra, within=2)
            assert refusal.startswith(b"HTTP/1.1 503 ")
            await extra.aclose()
            # Without the token over WebSocket: refused the same way.
            with pytest.raises(BaseExceptionGroup) as rejected:
                async with ws_client(api, token=None):
                    pass
            assert rejected.group_contains(trio_websocket.ConnectionRejected)
            status = await ux.call("daemon.status")
            assert status["api"]["refused"] == 2
            assert status["api"]["limits"]["maxUnauthenticated"] == 4
            # Slots freed, the owner gets in over WebSocket; it does not hold one.
            for s in held:
                await s.aclose()
            # Their peers hung up before a handshake: their places are free at once.
            await until_unauthenticated(ux, 0)
            async with ws_client(api) as owner:
                assert (await owner.call("daemon.status"))["api"]["unauthenticated"] == 0
                assert not await _closed_soon(owner)


async def _closed_soon(client) -> bool:  # type: ignore[no-untyped-def]
    with trio.move_on_after(0.2):
        return await closed(client)
    return False


def test_the_websocket_bound_fits_the_descriptor_limit() -> None:
    a = Admission.within(256, 32, 10.0, nofile=256)
    assert a.max_connections == 256 - FD_RESERVE and a.max_unauthenticated == 32
    b = Admission.within(256, 32, 10.0, nofile=65_536)
    assert (b.max_connections, b.max_unauthenticated) == (256, 32)
    c = Admission.within(256, 32, 10.0, nofile=FD_RESERVE + 8)
    assert (c.max_connections, c.max_unauthenticated) == (8, 8)
    assert socket.SOMAXCONN > 0
