"""A small API client over the daemon's Unix socket, for the CLI.

One reader task routes responses to their callers by id and stream frames
(notifications) into a bounded queue: a CLI that stops reading its streams
stalls only itself, and the server ends those streams with ``resync``.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio

from t3orch.api.transport import ConnectionGone, LineChannel, socket_path_problem
from t3orch.domain.vocab import RUN_TERMINAL, TURN_ITEM_TERMINAL
from t3orch.projections.projector import DELTA_FIELD

#: Frames from the daemon are ours to trust in size (snapshots can be large).
MAX_INCOMING = 256 * 1024 * 1024
_CAMEL_DELTA = {
    k: "".join(p.title() if i else p for i, p in enumerate(v.split("_")))
    for k, v in DELTA_FIELD.items()
}


class DaemonNotRunning(Exception):
    """Nothing answers on the state dir's socket."""


class ApiError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        self.code: int = int(error.get("code", 0))
        self.message: str = str(error.get("message", ""))
        self.data: Any = error.get("data")
        super().__init__(self.message)

    @property
    def rejected(self) -> str | None:
        """The core's rejection code (``request_already_answered``…), when it is one."""
        if self.code == -32000 and isinstance(self.data, dict):
            return str(self.data.get("code"))
        return None


@attrs.define
class _Waiter:
    done: trio.Event = attrs.field(factory=trio.Event)
    reply: dict[str, Any] | None = None


class ApiClient:
    def __init__(self, channel: LineChannel) -> None:
        self._channel = channel
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}
        self._notes_send, self._notes = trio.open_memory_channel[dict[str, Any]](4096)
        self._gone = False

    async def _read(self) -> None:
        try:
            while True:
                doc = msgspec.json.decode(await self._channel.receive())
                rid = doc.get("id") if isinstance(doc, dict) else None
                if isinstance(rid, int) and rid in self._waiting:
                    waiter = self._waiting.pop(rid)
                    waiter.reply = doc
                    waiter.done.set()
                elif isinstance(doc, dict) and "method" in doc:
                    await self._notes_send.send(doc)
        except ConnectionGone:
            pass
        finally:
            self._gone = True
            self._notes_send.close()
            for waiter in self._waiting.values():
                waiter.done.set()

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        if self._gone:
            raise DaemonNotRunning("the daemon closed the connection")
        rid = next(self._ids)
        waiter = self._waiting[rid] = _Waiter()
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        try:
            await self._channel.send(msgspec.json.encode(frame))
        except ConnectionGone:
            raise DaemonNotRunning("the daemon closed the connection") from None
        await waiter.done.wait()
        if waiter.reply is None:
            raise DaemonNotRunning("the daemon closed the connection before answering")
        if "error" in waiter.reply:
            raise ApiError(waiter.reply["error"])
        return waiter.reply["result"]

    async def notification(self) -> dict[str, Any]:
        """The next stream frame; DaemonNotRunning when the daemon has gone."""
        try:
            return await self._notes.receive()
        except trio.EndOfChannel:
            raise DaemonNotRunning("the daemon closed the connection") from None

    async def subscribe(
        self, topic: str, thread_id: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Subscribes and returns ``(subscription, snapshot data)``; events follow."""
        params: dict[str, Any] = {"topic": topic}
        if thread_id is not None:
            params["threadId"] = thread_id
        sub = await self.call("subscribe", params)
        while True:
            note = await self.notification()
            p = note["params"]
            if note["method"] == "snapshot" and p["subscription"] == sub["subscription"]:
                return str(sub["subscription"]), dict(p["data"])


@asynccontextmanager
async def connect(socket_path: Path) -> AsyncIterator[ApiClient]:
    if problem := socket_path_problem(socket_path):
        # No daemon can serve there (``serve`` refuses such a state dir); the kernel's
        # own error has no errno to print.
        raise DaemonNotRunning(f"no t3orch daemon can serve {socket_path.parent}: {problem}")
    try:
        stream = await trio.open_unix_socket(os.fspath(socket_path))
    except FileNotFoundError:
        raise DaemonNotRunning(
            f"no t3orch daemon is running for {socket_path.parent} (no {socket_path.name})"
        ) from None
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOTSOCK):
            raise DaemonNotRunning(
                f"no t3orch daemon is running for {socket_path.parent} "
                f"({socket_path.name} refuses connections)"
            ) from None
        raise DaemonNotRunning(
            f"cannot reach the daemon at {socket_path}: {exc.strerror}"
        ) from None
    client = ApiClient(LineChannel(stream, MAX_INCOMING))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._read)
            yield client
            nursery.cancel_scope.cancel()
    finally:
        await stream.aclose()


class ThreadView:
    """A thread's runs and turn items kept current from its ``threadDetail`` stream."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.reset(snapshot)

    def reset(self, snapshot: dict[str, Any]) -> None:
        """Starts over from a fresh snapshot (after a ``resync``)."""
        self.thread: dict[str, Any] = snapshot["thread"]
        self.runs: dict[str, dict[str, Any]] = {r["id"]: r for r in snapshot["runs"]}
        self.items: dict[str, dict[str, Any]] = {
            i["id"]: i for i in snapshot.get("visibleTurnItems", snapshot["turnItems"])
        }
        #: The thread's pending runtime requests (approvals, questions) by id.
        self.requests: dict[str, dict[str, Any]] = {
            q["id"]: q for q in snapshot.get("pendingRequests", [])
        }
        self.sequence: int = int(snapshot.get("snapshotSequence", 0))
        #: Item id -> its main text as far as ``liveText`` frames told (not committed).
        self.live: dict[str, str] = {}

    def apply_live(self, params: dict[str, Any]) -> None:
        """Folds a ``liveText`` frame in provisionally (docs/api.md, "Live text")."""
        if params.get("field") is not None:
            return
        item_id = params["itemId"]
        item = self.items.get(item_id)
        if item is not None and item.get("status") in TURN_ITEM_TERMINAL:
            return  # a piece after the item's final upsert: its text is all committed
        base = self.shown_text(item_id)
        offset = int(params["offset"])
        if offset <= len(base):
            self.live[item_id] = base[:offset] + params["text"]

    def shown_text(self, item_id: str) -> str:
        """The item's main text to show: the live text while it runs ahead of the
        committed text, else the committed text."""
        item = self.items.get(item_id)
        field = _CAMEL_DELTA.get(item["type"]) if item else None
        committed = (item.get(field) or "") if item is not None and field else ""
        live = self.live.get(item_id, "")
        return live if len(live) > len(committed) and live.startswith(committed) else committed

    def apply(self, event: dict[str, Any], unchanged: Sequence[str] = ()) -> dict[str, Any] | None:
        """Folds one event in; returns the turn item it changed, if any. ``unchanged``:
        the ``event`` frame's fields left out of its item, which the view keeps."""
        if event["sequence"] <= self.sequence:
            return None  # de-duplicate by sequence
        self.sequence = event["sequence"]
        p = event["payload"]
        match event["type"]:
            case "thread.upserted":
                self.thread = p["thread"]
            case "run.upserted":
                self.runs[p["run"]["id"]] = p["run"]
            case "runtime_request.upserted":
                req = p["request"]
                if req["status"] == "pending":
                    self.requests[req["id"]] = req
                else:
                    self.requests.pop(req["id"], None)
            case "turn_item.upserted":
                item = p["item"]
                if item.get("hidden"):
                    return None
                held = self.items.get(item["id"])
                for name in unchanged:
                    if held is not None and name in held:
                        item[name] = held[name]
                self.items[item["id"]] = item
                if item.get("status") in TURN_ITEM_TERMINAL:
                    self.live.pop(item["id"], None)  # the final text replaces it
                return dict(item)
            case "turn_item.delta":
                item = self.items.get(p["itemId"])
                field = _CAMEL_DELTA.get(item["type"]) if item else None
                if item is None or field is None:
                    return None
                item[field] = (item.get(field) or "") + p["text"]
                return dict(item)
        return None

    def live_runs(self) -> list[dict[str, Any]]:
        return [r for r in self.runs.values() if r["status"] not in RUN_TERMINAL]
