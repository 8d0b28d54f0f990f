"""Writes from synchronous code (the publishing task) never tear a frame apart."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from t3orch.api.transport import ConnectionGone, SocketWrites

BIG = bytes(range(256)) * 16 * 1024  # 4 MiB: more than a socket pair's buffers hold


@asynccontextmanager
async def pair() -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    a, b = trio.socket.socketpair()
    for sock, opt in ((a, socket.SO_SNDBUF), (b, socket.SO_RCVBUF)):
        sock.setsockopt(socket.SOL_SOCKET, opt, 64 * 1024)
    ours, peer = trio.SocketStream(a), trio.SocketStream(b)
    try:
        yield ours, peer
    finally:
        await ours.aclose()
        await peer.aclose()


async def read_exactly(stream: trio.SocketStream, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = await stream.receive_some(size - len(out))
        assert chunk
        out += chunk
    return bytes(out)


async def test_a_whole_write_leaves_the_stream_free() -> None:
    async with pair() as (ours, peer):
        writes = SocketWrites(ours, trio.Semaphore(1, max_value=1))
        assert writes.idle()
        assert writes.write_now([b"one", b"two"])
        assert writes.idle()
        await writes.send_all(b"three")
        assert await read_exactly(peer, 11) == b"onetwothree"


async def test_the_rest_of_a_partial_write_goes_before_any_other_writer() -> None:
    async with pair() as (ours, peer):
        writes = SocketWrites(ours, trio.Semaphore(1, max_value=1))
        assert not writes.write_now([BIG[:1000], BIG[1000:]])  # the socket took part of it
        assert not writes.idle()
        async with trio.open_nursery() as nursery:

            async def other_writer() -> None:
                # Any other writer on the connection (trio-websocket's pong, say).
                async with writes.gate:
                    await ours.send_all(b"PONG")

            nursery.start_soon(other_writer)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(writes.send_all, b"TAIL")
            got = await read_exactly(peer, len(BIG) + 8)
        assert got == BIG + b"TAIL" + b"PONG"
        assert writes.idle()


async def test_a_write_to_a_closed_peer_surfaces_on_the_awaited_path() -> None:
    async with pair() as (ours, peer):
        writes = SocketWrites(ours, trio.Semaphore(1, max_value=1))
        await peer.aclose()
        assert not writes.write_now([b"x" * 1024])  # nothing is raised into the publisher
        with pytest.raises(ConnectionGone):
            await writes.send_all(b"y")
        assert writes.gate.value == 1
        await ours.aclose()
        assert not writes.idle()  # a closed socket's number may be another's by now
