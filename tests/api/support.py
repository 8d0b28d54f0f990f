"""An API under test: a real core and ``serve_api`` on a short temp state dir, and
a minimal JSON-RPC client over either transport (real sockets, 127.0.0.1 only)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio
import trio_websocket

from t3orch.api.auth import read_token
from t3orch.api.operations import CoreOperations
from t3orch.api.runner import ApiEndpoints, serve_api
from t3orch.api.transport import ConnectionGone, LineChannel
from t3orch.config import DaemonConfig
from t3orch.core import Core, open_core
from t3orch.state import prepare_state_dir

TIMEOUT = 10.0


@attrs.define
class Api:
    core: Core
    endpoints: ApiEndpoints
    state_dir: Path

    @property
    def token(self) -> str:
        return read_token(self.state_dir)


@asynccontextmanager
async def short_state_dir() -> AsyncIterator[Path]:
    # A Unix socket path has at most 107 bytes; pytest's tmp_path can be longer.
    d = Path(tempfile.mkdtemp(prefix="t3api-", dir="/tmp"))
    try:
        yield d / "state"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@asynccontextmanager
async def running_api(state_dir: Path | None = None, **daemon: Any) -> AsyncIterator[Api]:
    async with short_state_dir() as tmp:
        sd = state_dir or tmp
        db = prepare_state_dir(sd, create=True)
        async with open_core(db, synchronous="NORMAL") as core:
            config = DaemonConfig(**daemon)
            async with trio.open_nursery() as nursery:
                endpoints = await nursery.start(serve_api, core, CoreOperations(core), config)
                yield Api(core, endpoints, sd)
                nursery.cancel_scope.cancel()


def cid() -> str:
    return f"cmd-{uuid.uuid4().hex}"


class RpcFailed(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.error = error


class Client:
    """Sequential JSON-RPC: ``call`` waits for its response, stashing notifications."""

    def __init__(self, send: Any, recv: Any) -> None:
        self._send = send
        self._recv = recv
        self._ids = itertools.count(1)
        self.notes: deque[dict[str, Any]] = deque()

    async def raw(self, frame: str | bytes) -> None:
        await self._send(frame)

    async def recv(self) -> dict[str, Any]:
        with trio.fail_after(TIMEOUT):
            doc = msgspec.json.decode(await self._recv())
        assert isinstance(doc, dict)
        return doc

    async def request(self, method: str, params: Any = None) -> dict[str, Any]:
        rid = next(self._ids)
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        await self._send(msgspec.json.encode(msg).decode())
        return await self.response(rid)

    async def response(self, rid: Any) -> dict[str, Any]:
        while True:
            doc = await self.recv()
            if "id" in doc and doc.get("id") == rid:
                return doc
            if "method" in doc:
                self.notes.append(doc)
                continue
            raise AssertionError(f"unexpected frame {doc}")

    async def call(self, method: str, params: Any = None) -> Any:
        doc = await self.request(method, params)
        if "error" in doc:
            raise RpcFailed(doc["error"])
        return doc["result"]

    async def note(self) -> dict[str, Any]:
        if self.notes:
            return self.notes.popleft()
        doc = await self.recv()
        assert "method" in doc, doc
        return doc


@asynccontextmanager
async def ws_client(api: Api, token: str | None = "", **kwargs: Any) -> AsyncIterator[Client]:
    """``token=""`` uses the right token, ``None`` sends no header."""
    tok = api.token if token == "" else token
    headers = [(b"authorization", f"Bearer {tok}".encode())] if tok is not None else []
    async with ws_connect(api, "127.0.0.1", headers, **kwargs) as client:
        yield client


@asynccontextmanager
async def ws_connect(
    api: Api, host: str, headers: list[tuple[bytes, bytes]], **kwargs: Any
) -> AsyncIterator[Client]:
    """A WebSocket to the API's port with these handshake headers (and Host)."""
    # Our own TCP stream, closed by us: trio-websocket's client leaves its stream open
    # when the server is the side that closes (as it does for an oversized frame).
    stream = await trio.open_tcp_stream("127.0.0.1", api.endpoints.port)
    try:
        async with trio.open_nursery() as nursery:
            ws = await trio_websocket.wrap_client_stream(
                nursery, stream, host, "/", extra_headers=headers, **kwargs
            )
            try:
                yield Client(ws.send_message, ws.get_message)
            finally:
                with trio.move_on_after(2) as scope:
                    scope.shield = True
                    await ws.aclose()
                nursery.cancel_scope.cancel()
    finally:
        await stream.aclose()


@asynccontextmanager
async def unix_client(api: Api) -> AsyncIterator[Client]:
    stream = await trio.open_unix_socket(str(api.endpoints.socket_path))
    chan = LineChannel(stream, 64 * 1024 * 1024)

    async def send(frame: str | bytes) -> None:
        await chan.send(frame.encode() if isinstance(frame, str) else frame)

    async def recv() -> bytes:
        return await chan.receive()

    try:
        yield Client(send, recv)
    finally:
        await stream.aclose()


async def closed(client: Client) -> bool:
    """True when the server has closed this client's connection."""
    try:
        await client.recv()
    except (trio_websocket.ConnectionClosed, ConnectionGone):
        return True
    return False
