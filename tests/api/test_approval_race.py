"""Racing answers to one approval through the real API, with a supervisor and the stand-in.

The stand-in resolves a request a few milliseconds after it gets the answer, so a
losing answer can arrive while the request is still ``pending`` (decision recorded)
or after the provider resolved it. Either way the loser must hear that the request
was answered (``request_already_answered``); ``request_not_pending`` is for a
request that ended without an answer (it expired with its runtime).
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from supervisor.manager import SessionManager
from supervisor.providers import standin_settings
from t3orch.api.runner import serve_api
from t3orch.config import DaemonConfig
from t3orch.core import open_core
from t3orch.state import prepare_state_dir
from tests.api.support import Api, Client, RpcFailed, cid, short_state_dir, unix_client, ws_client
from tests.supervisor.standin_plan import APPROVAL_PENDING

RACES = 20


@asynccontextmanager
async def supervised_api() -> AsyncIterator[tuple[Api, SessionManager]]:
    async with short_state_dir() as sd:
        db = prepare_state_dir(sd, create=True)
        async with open_core(db, synchronous="NORMAL") as core:
            manager = SessionManager(
                core=core.service,
                reader=core.reader,
                providers={"standin": standin_settings(APPROVAL_PENDING)},
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(manager.run)
                try:
                    endpoints = await nursery.start(serve_api, core, manager, DaemonConfig())
                    yield Api(core, endpoints, sd), manager
                finally:
                    manager.stop_all()
                    with trio.move_on_after(15):
                        while manager.runners:  # noqa: ASYNC110 - runners leave by themselves
                            await trio.sleep(0.02)
                    nursery.cancel_scope.cancel()


async def pending_request(client: Client, thread_id: str) -> dict[str, Any]:
    with trio.fail_after(20):
        while True:
            view = await client.call("view.read", {"topic": "pendingRequests"})
            mine = [r for r in view["data"]["requests"] if r["threadId"] == thread_id]
            if mine:
                return mine[0]  # type: ignore[no-any-return]
            await trio.sleep(0.01)


async def answer(client: Client, request_id: str, decision: str, delay: float) -> dict[str, Any]:
    await trio.sleep(delay)
    try:
        return {
            "result": await client.call(
                "request.respond",
                {"commandId": cid(), "requestId": request_id, "decision": decision},
            )
        }
    except RpcFailed as exc:
        return {"error": exc.error}


async def race(first: Client, second: Client, request_id: str, delay: float) -> list[Any]:
    """``accept`` from ``first`` and, ``delay`` later, ``decline`` from ``second``."""
    outcomes: list[dict[str, Any]] = [{}, {}]

    async def one(k: int, client: Client, decision: str, wait: float) -> None:
        outcomes[k] = await answer(client, request_id, decision, wait)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0, first, "accept", 0.0)
        nursery.start_soon(one, 1, second, "decline", delay)
    return outcomes


async def test_the_loser_of_a_race_hears_already_answered_on_either_transport() -> None:
    async with supervised_api() as (api, _manager), ws_client(api) as ws, unix_client(api) as ux:
        made = await ux.call(
            "thread.create", {"commandId": cid(), "provider": "standin", "cwd": "/tmp"}
        )
        tid = made["result"]["threadId"]
        losers: list[dict[str, Any]] = []
        for i in range(RACES):
            sent = await ux.call("run.send", {"commandId": cid(), "threadId": tid, "text": f"r{i}"})
            run_id = sent["result"]["runId"]
            req = await pending_request(ux, tid)
            # The transports alternate; the decline comes 0..38 ms after the accept, so
            # some land before the provider resolves the request, some after.
            first, second = (ws, ux) if i % 2 else (ux, ws)
            delay = (i % 10) * 0.004 + (i // 10) * 0.002
            outcomes = await race(first, second, req["id"], delay)
            wins = [o for o in outcomes if "result" in o]
            lost = [o["error"] for o in outcomes if "error" in o]
            assert len(wins) == 1 and len(lost) == 1, outcomes
            assert lost[0]["data"]["code"] == "request_already_answered", (i, lost[0])
            assert "already answered" in lost[0]["message"]
            losers.append(lost[0])
            # The run goes on to its end before the next race.
            with trio.fail_after(20):
                while True:
                    row = api.core.reader.row("run", run_id)
                    assert row is not None
                    if row.decode().status in ("completed", "failed", "interrupted"):
                        break
                    await trio.sleep(0.01)
            # However late, an answer to an answered request hears so.
            late = await answer(first, req["id"], "cancel", 0)
            assert late["error"]["data"]["code"] == "request_already_answered", late
            assert "it is now resolved" in late["error"]["message"]
        assert len(losers) == RACES


async def test_a_request_that_expired_unanswered_is_not_pending() -> None:
    async with supervised_api() as (api, _manager), ws_client(api) as ws, unix_client(api) as ux:
        made = await ws.call(
            "thread.create", {"commandId": cid(), "provider": "standin", "cwd": "/tmp"}
        )
        tid = made["result"]["threadId"]
        await ws.call("run.send", {"commandId": cid(), "threadId": tid, "text": "go"})
        req = await pending_request(ws, tid)
        with api.core.reader.snapshot():
            (session,) = [r.decode() for r in api.core.reader.rows("provider_session")]
        os.killpg(session.pid, signal.SIGKILL)
        with trio.fail_after(20):
            while True:
                row = api.core.reader.row("runtime_request", req["id"])
                assert row is not None
                if row.decode().status == "expired":
                    break
                await trio.sleep(0.01)
        for client in (ws, ux):
            doc = await answer(client, req["id"], "accept", 0)
            assert doc["error"]["data"]["code"] == "request_not_pending", doc
            assert "expired" in doc["error"]["message"]
