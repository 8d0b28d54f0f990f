"""Starting the API over a running core: both listeners, the token, the port file."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from functools import partial
from pathlib import Path

import attrs
import trio

from t3orch.api.auth import TOKEN_FILE, load_or_create_token
from t3orch.api.operations import Operations
from t3orch.api.reads import ApiReader
from t3orch.api.server import ApiLimits, ApiServer
from t3orch.api.transport import (
    Admission,
    bound_port,
    descriptor_limit,
    open_unix_listener,
    open_websocket_listeners,
    serve_unix,
    serve_websocket,
)
from t3orch.config import DaemonConfig
from t3orch.core import Core
from t3orch.web.http import PageServer

SOCKET_FILE = "api.sock"
PORT_FILE = "api.port"


class ApiBindRefused(Exception):
    """A non-loopback bind that the config did not explicitly allow."""


@attrs.frozen
class ApiEndpoints:
    host: str
    port: int
    socket_path: Path
    token_path: Path


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _write_port(path: Path, port: int) -> None:
    # Atomic: a client never reads a half-written port.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


async def serve_api(
    core: Core,
    operations: Operations,
    config: DaemonConfig,
    *,
    state_dir: Path | None = None,
    task_status: trio.TaskStatus[ApiEndpoints] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serves the API until cancelled; ``nursery.start`` returns the bound endpoints.

    The token, socket and port file go in ``state_dir``: by default the one holding
    the core's database, so they sit next to the store they give access to (a store
    on a server names it: the daemon's own state dir).
    """
    if not _loopback(config.api_host) and not config.api_allow_remote:
        raise ApiBindRefused(
            f"refusing to bind the API to non-loopback {config.api_host!r}: "
            "set daemon.api_allow_remote = true to allow it"
        )
    state_dir = state_dir or Path(core.location).parent
    token = load_or_create_token(state_dir)
    sock_path = state_dir / SOCKET_FILE
    port_file = state_dir / PORT_FILE
    # Bind both before serving either: a setup error is raised as itself.
    unix = await open_unix_listener(sock_path)
    try:
        tcp = await open_websocket_listeners(config.api_host, config.api_port)
    except BaseException:
        await _close_unix(unix, sock_path)
        raise
    reader = ApiReader(core.location)
    limits = ApiLimits(
        max_frame_bytes=config.max_frame_bytes,
        subscription_buffer=config.subscription_buffer,
    )
    admission = Admission.within(
        config.api_max_connections,
        config.api_max_unauthenticated,
        config.api_auth_timeout_s,
        descriptor_limit(),
    )
    server = ApiServer(core, operations, token, reader, limits, admission)
    port = bound_port(tcp)
    server.web.bound(config.api_host, port)
    page = PageServer(server.web)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(serve_websocket, http=page.handle),
                server.handle_websocket,
                tcp,
                limits.max_frame_bytes,
                admission,
            )
            await nursery.start(serve_unix, server.handle_unix, unix)
            _write_port(port_file, port)
            server.endpoints = {
                "websocket": {"host": config.api_host, "port": port},
                "socket": str(sock_path),
            }
            task_status.started(
                ApiEndpoints(config.api_host, port, sock_path, state_dir / TOKEN_FILE)
            )
    finally:
        with contextlib.suppress(FileNotFoundError):
            port_file.unlink()
        with trio.CancelScope(shield=True):
            for listener in tcp:
                await listener.aclose()
            await _close_unix(unix, sock_path)
        server.close()
        reader.close()


async def _close_unix(listener: trio.SocketListener, path: Path) -> None:
    await listener.aclose()
    # Gone with the daemon: a client then says "not running" instead of "refused".
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
