"""Commands over the API: results with sequences, idempotency, rejections, races."""

from __future__ import annotations

import trio

from tests.api.support import TIMEOUT, RpcFailed, cid, running_api, unix_client, ws_client
from tests.api.writes import new_thread, open_request


async def head(api) -> int:  # type: ignore[no-untyped-def]
    return int(api.core.reader.last_sequence())


async def test_commands_return_their_committed_sequence() -> None:
    async with running_api() as api, ws_client(api) as c:
        made = await c.call(
            "thread.create",
            {"commandId": cid(), "provider": "claude", "cwd": "/tmp", "title": "t", "model": "m"},
        )
        tid = made["result"]["threadId"]
        assert made["sequence"] == await head(api)
        sent = await c.call("run.send", {"commandId": cid(), "threadId": tid, "text": "hi"})
        assert sent["result"]["runId"].startswith("run_")
        assert sent["sequence"] == await head(api) > made["sequence"]
        archived = await c.call("thread.archive", {"commandId": cid(), "threadId": tid})
        assert archived["result"] == {"threadId": tid}
        doc = await c.request("run.send", {"commandId": cid(), "threadId": tid, "text": "again"})
        assert doc["error"]["code"] == -32000
        assert doc["error"]["data"] == {
            "code": "thread_archived",
            "message": f"thread {tid} is archived",
        }


async def test_a_repeated_command_id_returns_the_first_result_and_writes_nothing() -> None:
    async with running_api() as api, ws_client(api) as a, unix_client(api) as b:
        command = cid()
        params = {"commandId": command, "provider": "codex", "cwd": "/srv"}
        first = await a.call("thread.create", params)
        before = await head(api)
        # The same id again, on another connection and transport: the first answer.
        assert await b.call("thread.create", params) == first
        assert await a.call("thread.create", {**params, "cwd": "/elsewhere"}) == first
        assert await head(api) == before
        tid = first["result"]["threadId"]
        send = {"commandId": cid(), "threadId": tid, "text": "once"}
        runs = [await a.call("run.send", send) for _ in range(3)]
        assert runs[0] == runs[1] == runs[2]
        shell = await a.call("view.read", {"topic": "threadShell"})
        (entry,) = shell["data"]["threads"]
        assert entry["runCount"] == 1


async def test_two_clients_racing_to_answer_one_request() -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        req = await open_request(api.core, tid)
        outcomes: dict[str, object] = {}
        async with ws_client(api) as a, ws_client(api) as b:

            async def answer(name: str, client, decision: str) -> None:  # type: ignore[no-untyped-def]
                try:
                    outcomes[name] = await client.call(
                        "request.respond",
                        {"commandId": cid(), "requestId": req["id"], "decision": decision},
                    )
                except RpcFailed as exc:
                    outcomes[name] = exc.error

            with trio.fail_after(TIMEOUT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(answer, "a", a, "accept")
                    nursery.start_soon(answer, "b", b, "decline")
        wins = [o for o in outcomes.values() if "result" in o]  # type: ignore[operator]
        losses = [o for o in outcomes.values() if "code" in o]  # type: ignore[operator]
        assert len(wins) == 1 and len(losses) == 1
        assert losses[0]["data"]["code"] == "request_already_answered"  # type: ignore[index]
        assert "already answered" in losses[0]["message"]  # type: ignore[index]
        row = api.core.reader.row("runtime_request", req["id"])
        assert row is not None
        assert row.decode().decision == wins[0]["result"]["decision"]  # type: ignore[index]


async def test_operations_that_need_a_runtime_say_so() -> None:
    async with running_api() as api, ws_client(api) as c:
        tid = await new_thread(api.core.service)
        req = await open_request(api.core, tid)
        for method, params in [
            ("run.interrupt", {"runId": req["runId"]}),
            ("run.send", {"threadId": tid, "text": "steer", "mode": "steer"}),
        ]:
            doc = await c.request(method, {"commandId": cid(), **params})
            assert doc["error"]["data"]["code"] == "no_supervisor", (method, doc)
        doc = await c.request("run.interrupt", {"commandId": cid(), "runId": "run_nope"})
        assert doc["error"]["data"]["code"] == "unknown_run"
        doc = await c.request(
            "request.respond", {"commandId": cid(), "requestId": req["id"], "decision": "maybe"}
        )
        assert doc["error"]["data"]["code"] == "invalid_decision"
        doc = await c.request(
            "request.respond",
            {"commandId": cid(), "requestId": req["id"], "decision": "acceptForSession"},
        )
        assert doc["error"]["data"]["code"] == "decision_not_offered", doc


async def test_status_and_events_read() -> None:
    async with running_api() as api, unix_client(api) as c:
        tid = await new_thread(api.core.service)
        await api.core.service.send_message(tid, "x")
        status = await c.call("daemon.status")
        assert status["pid"] > 0 and status["headSequence"] == await head(api)
        assert status["api"]["websocket"]["port"] == api.endpoints.port
        assert status["writer"]["events"] == await head(api)
        page = await c.call("events.read", {"afterSequence": 1, "limit": 2})
        assert [e["sequence"] for e in page["events"]] == [2, 3]
        assert page["headSequence"] == await head(api)
        assert (api.state_dir / "api.port").read_text().strip() == str(api.endpoints.port)
