"""The Codex multiplexer's routing, over an in-memory provider transport (issue 21)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from adapters.codex.multiplex import CodexMultiplexer, VirtualProcess
from adapters.offset_lines import OffsetReads
from adapters.transport import ExitStatus, OversizedLine


class FakeProcess:
    """The provider transport only: what the multiplexer writes, and lines to read."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._send, self._recv = trio.open_memory_channel[bytes](100)
        self.stdin_closed = False
        self.killed = False
        self._ended = trio.Event()
        self.status = ExitStatus(code=0, signal=None)

    @property
    def pid(self) -> int:
        return 4242

    async def send_line(self, line: bytes) -> None:
        self.sent.append(json.loads(line))

    async def receive_line(self) -> bytes | OversizedLine | None:
        try:
            return await self._recv.receive()
        except trio.EndOfChannel:
            return None

    async def close_stdin(self) -> None:
        self.stdin_closed = True

    async def wait(self) -> ExitStatus:
        await self._ended.wait()
        return self.status

    def stderr_tail(self) -> str:
        return ""

    async def kill(self) -> None:
        self.killed = True
        self.end(ExitStatus(code=None, signal=9))

    def emit(self, frame: dict[str, Any]) -> None:
        self._send.send_nowait(json.dumps(frame).encode())

    def end(self, status: ExitStatus) -> None:
        self.status = status
        self._send.close()
        self._ended.set()


async def _frames(member: VirtualProcess, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with trio.fail_after(2):
        while len(out) < n:
            lines = await member.receive_lines()
            assert lines, "the member's stream ended"
            out += [json.loads(line) for line in lines if isinstance(line, bytes)]
    return out


async def _send(member: VirtualProcess, frame: dict[str, Any]) -> None:
    await member.send_line(json.dumps(frame).encode())


async def _opened(
    mux: CodexMultiplexer, proc: FakeProcess, member: VirtualProcess, thread: str
) -> None:
    """``member`` starts ``thread``: its id 1, the process answers."""
    await _send(member, {"id": 1, "method": "thread/start", "params": {"cwd": "/w"}})
    call = proc.sent[-1]
    proc.emit({"method": "thread/started", "params": {"thread": {"id": thread}}})
    proc.emit({"id": call["id"], "result": {"thread": {"id": thread}}})
    got = await _frames(member, 2)
    assert got[0]["method"] == "thread/started"
    assert got[1] == {"id": 1, "result": {"thread": {"id": thread}}}


async def _two_threads(
    mux: CodexMultiplexer, proc: FakeProcess
) -> tuple[VirtualProcess, VirtualProcess]:
    a, b = mux.join(), mux.join()
    await _opened(mux, proc, a, "thr-a")
    await _opened(mux, proc, b, "thr-b")
    return a, b


@pytest.fixture
async def shared(nursery: trio.Nursery) -> tuple[CodexMultiplexer, FakeProcess]:
    proc = FakeProcess()
    mux = CodexMultiplexer(proc)
    await nursery.start(mux.run)
    return mux, proc


async def test_request_ids_are_remapped_and_frames_routed_by_thread(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    mux, proc = shared
    a, b = await _two_threads(mux, proc)
    # Both numbered their request 1: the process saw two ids.
    assert len({f["id"] for f in proc.sent}) == 2
    proc.emit({"method": "item/agentMessage/delta", "params": {"threadId": "thr-b", "delta": "B"}})
    proc.emit({"method": "item/agentMessage/delta", "params": {"threadId": "thr-a", "delta": "A"}})
    proc.emit({"id": 0, "method": "item/commandExecution/requestApproval",
               "params": {"threadId": "thr-a"}})  # fmt: skip
    assert [f["params"]["delta"] for f in await _frames(b, 1)] == ["B"]
    got_a = await _frames(a, 2)
    assert got_a[0]["params"]["delta"] == "A"
    assert got_a[1]["id"] == 0 and got_a[1]["method"].endswith("requestApproval")
    # A reply to the server's request goes out as it is (its id is the process's).
    await _send(a, {"id": 0, "result": {"decision": "accept"}})
    assert proc.sent[-1] == {"id": 0, "result": {"decision": "accept"}}


async def test_initialize_is_sent_once_per_process(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    mux, proc = shared
    a, b = mux.join(), mux.join()
    await _send(a, {"id": 1, "method": "initialize", "params": {"clientInfo": {}}})
    proc.emit({"id": proc.sent[-1]["id"], "result": {"userAgent": "codex"}})
    assert await _frames(a, 1) == [{"id": 1, "result": {"userAgent": "codex"}}]
    await _send(a, {"method": "initialized"})
    await _send(b, {"id": 1, "method": "initialize", "params": {"clientInfo": {}}})
    await _send(b, {"method": "initialized"})
    assert await _frames(b, 1) == [{"id": 1, "result": {"userAgent": "codex"}}]
    assert [f["method"] for f in proc.sent] == ["initialize", "initialized"]


async def test_leaving_unsubscribes_and_the_last_leave_closes_the_process(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    mux, proc = shared
    a, b = await _two_threads(mux, proc)
    await a.close_stdin()
    assert await a.receive_lines() == []
    assert await a.wait() == ExitStatus(code=0, signal=None)
    assert proc.sent[-1]["method"] == "thread/unsubscribe"
    assert proc.sent[-1]["params"] == {"threadId": "thr-a"}
    assert not proc.stdin_closed
    # The unsubscribe's answer is the multiplexer's own; b still hears its thread.
    proc.emit({"id": proc.sent[-1]["id"], "result": {"status": "unsubscribed"}})
    proc.emit({"method": "turn/started", "params": {"threadId": "thr-b"}})
    assert [f["method"] for f in await _frames(b, 1)] == ["turn/started"]
    await b.close_stdin()
    assert proc.stdin_closed and not mux.open


async def test_the_process_ending_ends_every_member_with_its_status(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    mux, proc = shared
    a, b = mux.join(), mux.join()
    await _opened(mux, proc, a, "thr-a")
    proc.end(ExitStatus(code=None, signal=9))
    for member in (a, b):
        with trio.fail_after(2):
            assert await member.receive_lines() == []
            assert await member.wait() == ExitStatus(code=None, signal=9)
    assert mux.ended.is_set()


async def test_a_thread_joining_a_process_that_already_ended_gets_its_exit(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    # A provider that fails at once can be read to its exit before its first thread
    # joins (the pool starts the multiplexer, then joins): that thread must still end,
    # with the process's own exit, not wait for an end nothing will send.
    mux, proc = shared
    proc.end(ExitStatus(code=1, signal=None))
    with trio.fail_after(2):
        await mux.ended.wait()
    member = mux.join()
    with trio.fail_after(2):
        assert await member.receive_lines() == []
        assert await member.wait() == ExitStatus(code=1, signal=None)
    assert mux.members == []


async def test_threadless_frames_and_subagents(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    mux, proc = shared
    a, b = await _two_threads(mux, proc)
    proc.emit({"method": "account/rateLimits/updated", "params": {"rateLimits": {}}})
    proc.emit({"id": 5, "method": "account/chatgptAuthTokens/refresh", "params": {}})
    child = {"id": "thr-c", "parentThreadId": "thr-b"}
    proc.emit({"method": "thread/started", "params": {"thread": child}})
    proc.emit({"method": "turn/started", "params": {"threadId": "thr-c"}})
    got_a = await _frames(a, 2)
    assert [f["method"] for f in got_a] == [
        "account/rateLimits/updated",
        "account/chatgptAuthTokens/refresh",
    ]
    got_b = await _frames(b, 3)
    assert [f["method"] for f in got_b] == [
        "account/rateLimits/updated",
        "thread/started",
        "turn/started",
    ]


async def test_a_killed_member_leaves_without_killing_a_shared_process(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    mux, proc = shared
    a, b = mux.join(), mux.join()
    await a.kill()
    assert await a.wait() == ExitStatus(code=None, signal=9)
    assert not proc.killed and mux.open
    await b.kill()
    assert proc.killed


async def test_a_member_leaving_before_initialize_is_answered_lets_the_next_send_its_own(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    mux, proc = shared
    a, b = mux.join(), mux.join()
    await _send(a, {"id": 1, "method": "initialize", "params": {"clientInfo": {}}})
    with trio.fail_after(2):  # before: b waited for an answer that could never come
        await _b_initializes_after_a_leaves(a, b, proc)
    assert [f["method"] for f in proc.sent] == ["initialize", "initialize"]
    proc.emit({"id": proc.sent[-1]["id"], "result": {"userAgent": "codex"}})
    assert await _frames(b, 1) == [{"id": 1, "result": {"userAgent": "codex"}}]


async def _b_initializes_after_a_leaves(
    a: VirtualProcess, b: VirtualProcess, proc: FakeProcess
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send, b, {"id": 1, "method": "initialize", "params": {}})
        await trio.testing.wait_all_tasks_blocked()
        assert len(proc.sent) == 1  # b waits for a's answer
        await a.kill()


def _numbered(proc: FakeProcess) -> OffsetReads:
    """The process's lines one at a time, numbered from 1 as a journal's offsets."""
    counter = iter(range(1, 100))

    async def read() -> list[tuple[int, bytes | OversizedLine]]:
        line = await proc.receive_line()
        return [] if line is None else [(next(counter), line)]

    return read


async def test_a_multiplexer_rebuilt_from_a_journal_routes_as_the_first_did() -> None:
    """A reattach (issue 21): the earlier daemon's requests (journal ``IN`` records) and the
    process's lines, in journal order, rebuild the routing; each member gets its own
    requests back with its own ids and mutes its lines up to its own committed offset."""
    proc = FakeProcess()
    mux = CodexMultiplexer(proc, holder_id="h", journaled=_numbered(proc))
    a = mux.join("pa", committed=3)
    b = mux.join("pb", committed=0)
    got_a: list[tuple[int, bytes]] = []
    a.on_input = lambda offset, line: got_a.append((offset, line))
    mutes: list[bool] = []
    a.on_mute = mutes.append
    # What the earlier daemon sent, as the journal has it (ids carry the member's tag).
    mux.replayed(0, json.dumps({"id": "pa|1", "method": "thread/start", "params": {}}).encode())
    async with trio.open_nursery() as nursery:
        await nursery.start(mux.run)
        proc.emit({"id": "pa|1", "result": {"thread": {"id": "TA"}}})  # offset 1
        mux.replayed(1, json.dumps({"id": "pb|1", "method": "thread/start"}).encode())
        proc.emit({"id": "pb|1", "result": {"thread": {"id": "TB"}}})  # 2
        proc.emit({"method": "item/agentMessage/delta", "params": {"threadId": "TA"}})  # 3
        proc.emit(
            {
                "id": 0,
                "method": "item/commandExecution/requestApproval",
                "params": {"threadId": "TA"},
            }
        )  # 4: pending across the restart
        proc.emit({"method": "turn/completed", "params": {"threadId": "TB"}})  # 5
        (opened_a, delta, approval) = await _frames(a, 3)
        assert opened_a == {"id": 1, "result": {"thread": {"id": "TA"}}}
        assert delta["params"]["threadId"] == "TA"
        assert approval["id"] == 0
        assert [json.loads(line)["id"] for _, line in got_a] == [1]
        # Up to its committed offset 3 muted, the approval (4) is news.
        assert mutes[0] is True and mutes[-1] is False
        assert a.delivered == 4
        opened_b, ended_b = await _frames(b, 2)
        assert opened_b["id"] == 1 and ended_b["method"] == "turn/completed"
        # The answer goes to the process as it is; a new request gets a's tag.
        await _send(a, {"id": 0, "result": {"decision": "accept"}})
        await _send(a, {"id": 2, "method": "turn/start", "params": {"threadId": "TA"}})
        assert [f["id"] for f in proc.sent] == [0, "pa|2"]
        nursery.cancel_scope.cancel()


async def test_a_subagent_named_only_by_its_spawn_item_goes_to_its_parents_member(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    """0.169.0 sends no ``thread/started`` for a spawned agent's thread, and the thread
    speaks before the spawn item names it: its lines wait for the item, then go to the
    member of the thread that spawned it, in the process's order."""
    mux, proc = shared
    a, b = await _two_threads(mux, proc)
    spawn = {"type": "collabAgentToolCall", "id": "call_1", "tool": "spawnAgent"}
    proc.emit({"method": "item/started", "params": {"threadId": "thr-b",
               "item": {**spawn, "receiverThreadIds": []}}})  # fmt: skip
    proc.emit({"method": "thread/status/changed", "params": {"threadId": "thr-c"}})
    proc.emit({"method": "item/completed", "params": {"threadId": "thr-b",
               "item": {**spawn, "receiverThreadIds": ["thr-c"]}}})  # fmt: skip
    proc.emit({"method": "turn/started", "params": {"threadId": "thr-c"}})
    proc.emit({"method": "turn/started", "params": {"threadId": "thr-a"}})
    got_b = await _frames(b, 4)
    assert [(f["method"], f["params"]["threadId"]) for f in got_b] == [
        ("item/started", "thr-b"),
        ("thread/status/changed", "thr-c"),
        ("item/completed", "thr-b"),
        ("turn/started", "thr-c"),
    ]
    assert [f["params"]["threadId"] for f in await _frames(a, 1)] == ["thr-a"]
    assert "thr-c" in b.threads and "thr-c" in mux.loaded


async def test_a_subagents_kept_lines_are_news_after_a_reattach_that_had_not_claimed_them() -> None:
    """The earlier daemon committed a line of the parent's (4) after the child's first
    line (3), which it was still keeping: a replay from the journal mutes the parent's
    lines up to 4 but hands the child's line over unmuted, with the spawn item (5)."""
    proc = FakeProcess()
    mux = CodexMultiplexer(proc, holder_id="h", journaled=_numbered(proc))
    a = mux.join("pa", committed=4)
    mux.replayed(0, json.dumps({"id": "pa|1", "method": "thread/start", "params": {}}).encode())
    spawn = {"type": "collabAgentToolCall", "id": "call_1", "tool": "spawnAgent"}
    batches: list[tuple[bool, list[str]]] = []
    mutes: list[bool] = []
    a.on_mute = mutes.append
    async with trio.open_nursery() as nursery:
        await nursery.start(mux.run)
        proc.emit({"id": "pa|1", "result": {"thread": {"id": "TA"}}})  # 1
        proc.emit({"method": "item/started", "params": {"threadId": "TA", "item": spawn}})  # 2
        proc.emit({"method": "thread/status/changed", "params": {"threadId": "TC"}})  # 3
        proc.emit({"method": "item/agentMessage/delta", "params": {"threadId": "TA"}})  # 4
        proc.emit({"method": "item/completed", "params": {"threadId": "TA",
                   "item": {**spawn, "receiverThreadIds": ["TC"]}}})  # fmt: skip
        with trio.fail_after(2):
            while sum(len(names) for _, names in batches) < 5:
                lines = await a.receive_lines()
                names = [json.loads(line).get("method", "reply") for line in lines]
                batches.append((mutes[-1], names))
        nursery.cancel_scope.cancel()
    assert batches[-1] == (False, ["thread/status/changed", "item/completed"])
    assert [name for muted, names in batches if muted for name in names] == [
        "reply",
        "item/started",
        "item/agentMessage/delta",
    ]
    assert a.delivered == 5


async def test_a_subagents_line_while_another_member_opens_a_thread_goes_to_its_parent(
    shared: tuple[CodexMultiplexer, FakeProcess],
) -> None:
    """A thread no member has yet is not the opening member's: a subagent of b speaking
    while c's thread/start waits for its reply is b's (named by b's spawn item after), and
    c still gets its own thread's lines, before its reply, in the process's order."""
    mux, proc = shared
    a, b = await _two_threads(mux, proc)
    c = mux.join()
    await _send(c, {"id": 1, "method": "thread/start", "params": {"cwd": "/w"}})
    opening = proc.sent[-1]
    spawn = {"type": "collabAgentToolCall", "id": "call_1", "tool": "spawnAgent"}
    proc.emit({"method": "thread/status/changed", "params": {"threadId": "thr-sub"}})
    proc.emit({"method": "thread/started", "params": {"thread": {"id": "thr-new"}}})
    proc.emit({"method": "item/completed", "params": {"threadId": "thr-b",
               "item": {**spawn, "receiverThreadIds": ["thr-sub"]}}})  # fmt: skip
    proc.emit({"id": opening["id"], "result": {"thread": {"id": "thr-new"}}})
    proc.emit({"method": "turn/started", "params": {"threadId": "thr-sub"}})
    got_b = await _frames(b, 3)
    assert [(f.get("method"), f["params"].get("threadId")) for f in got_b] == [
        ("thread/status/changed", "thr-sub"),
        ("item/completed", "thr-b"),
        ("turn/started", "thr-sub"),
    ]
    got_c = await _frames(c, 2)
    assert got_c == [
        {"method": "thread/started", "params": {"thread": {"id": "thr-new"}}},
        {"id": 1, "result": {"thread": {"id": "thr-new"}}},
    ]
    assert "thr-sub" in b.threads and "thr-sub" not in c.threads
    assert c.threads == {"thr-new"}
    # a got none of it: its next line is its own.
    proc.emit({"method": "turn/started", "params": {"threadId": "thr-a"}})
    assert [f["params"]["threadId"] for f in await _frames(a, 1)] == ["thr-a"]
