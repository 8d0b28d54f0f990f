"""Client-side folds of stream events onto a snapshot, written from the docs' contract
(not from the server's code), so a test can check snapshot(N) + events(>N) == snapshot(end)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Which field a ``turn_item.delta`` appends to, per item type (camelCase, as on the wire).
DELTA_FIELD = {
    "assistant_message": "text",
    "reasoning": "text",
    "plan": "markdown",
    "command_execution": "output",
    "file_change": "diffStr",
    "file_search": "output",
    "web_search": "output",
}


class DetailFold:
    """The parts of ``threadDetail`` a live client maintains: thread, runs, items, requests."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.thread = snapshot["thread"]
        self.runs = {r["id"]: r for r in snapshot["runs"]}
        self.items = {i["id"]: i for i in snapshot["turnItems"]}
        self.pending = {q["id"]: q for q in snapshot["pendingRequests"]}

    def apply(self, event: dict[str, Any], unchanged: Sequence[str] = ()) -> None:
        p = event["payload"]
        match event["type"]:
            case "thread.upserted":
                self.thread = p["thread"]
            case "run.upserted":
                self.runs[p["run"]["id"]] = p["run"]
            case "turn_item.upserted":
                item = p["item"]
                # Fields the frame left out: the client's own value is the current one.
                for name in unchanged:
                    item[name] = self.items[item["id"]][name]
                self.items[item["id"]] = item
            case "turn_item.delta":
                item = self.items.get(p["itemId"])
                field = DELTA_FIELD.get(item["type"]) if item else None
                if item is not None and field is not None:
                    item[field] = (item.get(field) or "") + p["text"]
            case "runtime_request.upserted":
                req = p["request"]
                if req["status"] == "pending":
                    self.pending[req["id"]] = req
                else:
                    self.pending.pop(req["id"], None)

    def state(self) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "runs": list(self.runs.values()),
            "turnItems": list(self.items.values()),
            "pendingRequests": list(self.pending.values()),
        }

    @staticmethod
    def of(snapshot: dict[str, Any]) -> dict[str, Any]:
        return DetailFold(snapshot).state()


class PendingFold:
    """``pendingRequests``: requests appear while pending and leave when they move on."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.requests = {q["id"]: q for q in snapshot["requests"]}

    def apply(self, event: dict[str, Any], unchanged: Sequence[str] = ()) -> None:
        if event["type"] != "runtime_request.upserted":
            return
        req = event["payload"]["request"]
        if req["status"] == "pending":
            self.requests[req["id"]] = req
        else:
            self.requests.pop(req["id"], None)

    def state(self) -> list[Any]:
        return list(self.requests.values())

    @staticmethod
    def of(snapshot: dict[str, Any]) -> list[Any]:
        return PendingFold(snapshot).state()


class SessionsFold:
    """``providerSessions``: one entry per session, replaced whole on each upsert."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.sessions = {s["id"]: s for s in snapshot["sessions"]}

    def apply(self, event: dict[str, Any], unchanged: Sequence[str] = ()) -> None:
        if event["type"] == "provider_session.upserted":
            s = event["payload"]["session"]
            self.sessions[s["id"]] = s

    def state(self) -> list[Any]:
        return list(self.sessions.values())

    @staticmethod
    def of(snapshot: dict[str, Any]) -> list[Any]:
        return SessionsFold(snapshot).state()


FOLDS: dict[str, Any] = {
    "threadDetail": DetailFold,
    "pendingRequests": PendingFold,
    "providerSessions": SessionsFold,
}


def concerns(topic: str, thread_id: str | None, event: dict[str, Any]) -> bool:
    """Which stored events a topic's stream must deliver (the documented contract)."""
    match topic:
        case "threadDetail":
            return bool(event["threadId"] == thread_id)
        case "pendingRequests":
            return bool(event["type"] == "runtime_request.upserted")
        case "providerSessions":
            return event["type"] in (
                "provider_session.upserted",
                "provider.usage",
                "provider.diagnostic",
            )
        case "threadShell":
            return event["type"] in ("thread.upserted", "run.upserted", "runtime_request.upserted")
    raise AssertionError(topic)
