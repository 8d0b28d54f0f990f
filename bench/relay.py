"""The floor of a durable relay: the least a process between a client and a provider
must do on a turn's critical path to keep the promise "a started turn is never lost".

``python bench/relay.py DB -- PROVIDER_ARGV...`` runs the provider as its child and
relays JSON lines between its own stdio and the provider's, decoding each line (as
any adapter must, to know what it is). A turn's start (Codex ``turn/start``, Claude
``user``) is committed to SQLite (WAL) before it is written to the provider and made
durable (the ``-wal``'s fsync) while the provider has it; a turn's end (``turn/completed``,
``result``) is committed and fsynced before the client is told. Nothing else is stored:
no items, no projections, no subscribers, no holder. ``bench/stream.py --floor`` drives
the providers through it beside the direct and t3orch clients, so the figure a plain
turn through t3orch is held to has, in the same run, the figure of this much less.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import AsyncIterator

import msgspec
import trio

_decode = msgspec.json.Decoder(dict[str, object]).decode
_STARTS = (b'"turn/start"', b'"type":"user"', b'"type": "user"')


class Log:
    """One table of rows, committed without a sync (WAL, NORMAL) and then fsynced: as the
    daemon's writer makes a commit visible first and durable after."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, body BLOB)")
        self.wal = os.open(path + "-wal", os.O_RDONLY | os.O_CREAT, 0o600)

    def commit(self, body: bytes) -> None:
        self.db.execute("BEGIN")
        self.db.execute("INSERT INTO log (body) VALUES (?)", (body,))
        self.db.execute("COMMIT")

    def sync(self) -> None:
        os.fsync(self.wal)


async def lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    buffer = b""
    while chunk := await stream.receive_some(65536):
        buffer += chunk
        *whole, buffer = buffer.split(b"\n")
        for line in whole:
            yield line + b"\n"


async def to_provider(
    log: Log, client: trio.abc.ReceiveStream, provider: trio.abc.SendStream
) -> None:
    async with trio.open_nursery() as nursery:
        async for line in lines(client):
            _decode(line)
            if any(mark in line for mark in _STARTS):
                await trio.to_thread.run_sync(log.commit, line)
                await provider.send_all(line)
                nursery.start_soon(trio.to_thread.run_sync, log.sync)
            else:
                await provider.send_all(line)
    await provider.aclose()


async def to_client(
    log: Log, provider: trio.abc.ReceiveStream, client: trio.abc.SendStream
) -> None:
    async for line in lines(provider):
        frame = _decode(line)
        if frame.get("method") == "turn/completed" or frame.get("type") == "result":

            def durable(line: bytes = line) -> None:
                log.commit(line)
                log.sync()

            await trio.to_thread.run_sync(durable)
        await client.send_all(line)


async def main(db: str, argv: list[str]) -> None:
    log = Log(db)
    process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1)
    assert process.stdin is not None and process.stdout is not None
    client_in = trio.lowlevel.FdStream(os.dup(0))
    client_out = trio.lowlevel.FdStream(os.dup(1))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(to_provider, log, client_in, process.stdin)
            await to_client(log, process.stdout, client_out)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            process.kill()
            await process.wait()


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: relay.py DB -- PROVIDER_ARGV...")
    trio.run(main, sys.argv[1], sys.argv[3:])
