"""Browser auth on the WebSocket port: login codes, the cookie, Origin and Host checks.

In-process daemon API (no browser): raw HTTP requests and WebSocket handshakes
with exactly the headers a browser would send, from the daemon's page and from
a page of another origin on the same machine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio_websocket

from t3orch.web.session import CODE_TTL_S, WebAuth
from tests.api.support import Api, Client, running_api, unix_client, ws_connect


async def http_get(port: int, path: str, *headers: str, host: str | None = None) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    lines = [f"GET {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", *headers]
    await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):
            data += chunk
    await stream.aclose()
    return data


def status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def header(reply: bytes, name: str) -> str | None:
    for line in reply.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower().encode():
            return value.strip().decode()
    return None


async def login_cookie(api: Api) -> str:
    async with unix_client(api) as c:
        url = (await c.call("web.login"))["url"]
    path = url.split(str(api.endpoints.port), 1)[1]
    reply = await http_get(api.endpoints.port, path)
    assert status(reply) == 303 and header(reply, "location") == "/"
    cookie = header(reply, "set-cookie")
    assert cookie is not None
    return cookie.split(";", 1)[0]


@asynccontextmanager
async def browser_ws(api: Api, *headers: tuple[bytes, bytes]) -> AsyncIterator[Client]:
    # As a browser does: the Host header names the port.
    async with ws_connect(api, f"127.0.0.1:{api.endpoints.port}", list(headers)) as client:
        yield client


async def refused(api: Api, *headers: tuple[bytes, bytes]) -> int | None:
    """The status of the handshake's refusal; None when it was accepted."""
    codes: list[int] = []
    try:
        async with browser_ws(api, *headers):
            pass
    except* trio_websocket.ConnectionRejected as group:
        codes += [e.status_code for e in group.exceptions if hasattr(e, "status_code")]
    return codes[0] if codes else None


async def test_a_login_code_works_once_and_sets_a_strict_httponly_cookie() -> None:
    async with running_api() as api:
        async with unix_client(api) as c:
            login = await c.call("web.login")
        assert login["url"].startswith(f"http://127.0.0.1:{api.endpoints.port}/login?code=")
        path = login["url"].split(str(api.endpoints.port), 1)[1]
        first = await http_get(api.endpoints.port, path)
        assert status(first) == 303 and header(first, "location") == "/"
        cookie = header(first, "set-cookie") or ""
        assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= {p.strip() for p in cookie.split(";")}
        # Spent: a second visit (a leaked URL, the browser history) logs nobody in.
        second = await http_get(api.endpoints.port, path)
        assert status(second) == 403 and header(second, "set-cookie") is None
        assert b"t3orch web" in second
        wrong = await http_get(api.endpoints.port, "/login?code=guess")
        assert status(wrong) == 403


def test_a_login_code_expires_after_a_minute() -> None:
    now = [100.0]
    web = WebAuth("0" * 64, clock=lambda: now[0])
    late, fresh = web.issue_code(), web.issue_code()
    now[0] += CODE_TTL_S + 0.01
    assert web.redeem(late) is None
    cookie = web.redeem(web.issue_code())
    assert cookie is not None and web.redeem(fresh) is None
    good = [(b"cookie", f"t3orch_session={cookie}".encode())]
    assert web.cookie_valid(good)
    tampered = [(b"cookie", f"t3orch_session=x{cookie}".encode())]
    assert not web.cookie_valid(tampered)
    # Another token (a rotated api-token) makes every cookie worthless.
    assert not WebAuth("1" * 64).cookie_valid(good)


async def test_the_page_is_served_on_the_api_port_without_cors() -> None:
    async with running_api() as api:
        port = api.endpoints.port
        page = await http_get(port, "/")
        assert status(page) == 200 and b'src="/app.js"' in page
        assert header(page, "content-type") == "text/html; charset=utf-8"
        script = await http_get(port, "/app.js")
        assert status(script) == 200 and b"threadDetail" in script
        assert "frame-ancestors 'none'" in (header(page, "content-security-policy") or "")
        for reply in (page, script):
            assert header(reply, "access-control-allow-origin") is None
        assert status(await http_get(port, "/../pyproject.toml")) == 404
        # A request from another origin's page, or through a DNS-rebound name: refused.
        evil = await http_get(port, "/app.js", "Origin: http://127.0.0.1:8000")
        assert status(evil) == 403 and header(evil, "access-control-allow-origin") is None
        rebound = await http_get(port, "/", host=f"attacker.example:{port}")
        assert status(rebound) == 421


async def test_the_websocket_takes_the_cookie_only_from_the_daemons_own_origin() -> None:
    async with running_api() as api:
        port = api.endpoints.port
        cookie = (b"cookie", (await login_cookie(api)).encode())
        own = (b"origin", f"http://127.0.0.1:{port}".encode())
        async with browser_ws(api, cookie, own) as c:
            assert (await c.call("daemon.status"))["api"]["connections"] >= 1
        # The same cookie from a page on another local port (same *site*: the browser
        # sends it): the handshake is refused, nothing is read or driven.
        for origin in (b"http://127.0.0.1:8000", b"http://localhost:8000", b"null"):
            assert await refused(api, cookie, (b"origin", origin)) == 403
        # A cookie without an Origin is not a browser's: it needs the token.
        async with browser_ws(api, cookie) as c:
            assert (await c.request("daemon.status"))["error"]["code"] == -32001
        # A bad cookie from the right origin: unauthorized.
        bad = (b"cookie", b"t3orch_session=abc.def")
        async with browser_ws(api, bad, own) as c:
            assert (await c.request("daemon.status"))["error"]["code"] == -32001


async def test_a_request_head_that_arrives_in_pieces_is_still_told_apart() -> None:
    async with running_api() as api:
        port = api.endpoints.port
        # A page request whose head comes in two writes: still the page.
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /style.css HTTP/1.1\r\n")
        await trio.sleep(0.05)
        await stream.send_all(f"Host: 127.0.0.1:{port}\r\n\r\n".encode())
        reply = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                reply += chunk
        await stream.aclose()
        assert status(reply) == 200 and header(reply, "content-type") == "text/css; charset=utf-8"
        # A WebSocket handshake split before its Upgrade header: still a WebSocket.
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        await trio.sleep(0.05)
        await stream.send_all(
            b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        with trio.fail_after(5):
            answer = await stream.receive_some(65536)
        await stream.aclose()
        assert answer.startswith(b"HTTP/1.1 101")
