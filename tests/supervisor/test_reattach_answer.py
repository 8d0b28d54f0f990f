"""An approval pending across a daemon restart, answered the moment the next daemon has
reattached (issue 20): READY comes after the attaches, not after the journal replays, so the
answer may reach a Codex runtime before its replay has rebuilt the request; it waits for the
replay (bounded) instead of being refused as stale. On a held process of its own and on a
held shared (multiplexed) one, the stand-in playing Codex with a long reply before it asks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from adapters.ownership import this_process
from supervisor import shared_codex
from supervisor.holder import client
from supervisor.holder.client import HeldProcess, holder_launchers
from supervisor.holder.layout import HeldPaths, held_root
from supervisor.providers import standin_settings
from supervisor.reattach import find_held
from supervisor.shared_codex import HolderSettings
from tests.holder.support import holders_stopped, stderr_a_moment_later
from tests.supervisor.support import rig

REPO = Path(__file__).resolve().parents[2]
APPROVAL = REPO / "tests" / "supervisor" / "transcripts" / "codex_approval_pending.ndjson"
#: Deltas before the request: enough that its replay takes longer than an answer's trip.
DELTAS = 20_000
OWNER = this_process().token()


def _long_journal_then_approval(tmp: Path) -> Path:
    """The approval transcript with a reply of ``DELTAS`` deltas streamed before the
    command item that asks (the journal's replay has them all to map first)."""
    steps = [json.loads(line) for line in APPROVAL.read_text().splitlines()]
    lines = APPROVAL.read_text().splitlines()
    ask = next(i for i, line in enumerate(lines) if "waitingOnApproval" in line)
    ids = {"threadId": steps[ask]["frame"]["params"]["threadId"]}
    turn = next(s for s in steps if s.get("frame", {}).get("method") == "turn/started")
    ids["turnId"] = turn["frame"]["params"]["turn"]["id"]
    item = {"type": "agentMessage", "id": "msg_0", "text": "", "phase": None}
    params = {**ids, "itemId": "msg_0", "delta": "x"}
    delta = {"method": "item/agentMessage/delta", "params": params}
    reply = [
        {"method": "item/started", "params": {"item": item, **ids}},
        *([delta] * DELTAS),
        {"method": "item/completed", "params": {"item": {**item, "text": "x" * DELTAS}, **ids}},
    ]
    played = [{"step": "emit_inbound", "afterMs": 0, "frame": f} for f in reply]
    path = tmp / "long_then_approval.ndjson"
    path.write_text("".join(json.dumps(s) + "\n" for s in steps[:ask] + played + steps[ask:]))
    return path


def _approval_then_stderr(tmp: Path) -> Path:
    """The approval transcript with Codex writing on stderr a moment after it asks (the
    journal held before the next attach ends on stderr records)."""
    lines = APPROVAL.read_text().splitlines()
    ask = next(i for i, line in enumerate(lines) if "requestApproval" in line)
    noise = [{"step": "emit_stderr", "text": f"warming up {k}\n"} for k in range(3)]
    noise[0]["afterMs"] = 300
    played = [json.dumps(step) for step in noise]
    path = tmp / "approval_then_stderr.ndjson"
    path.write_text("\n".join([*lines[: ask + 1], *played, *lines[ask + 1 :]]) + "\n")
    return path


def _rig(tmp_path: Path, shared: bool, transcript: Path | None = None) -> Any:
    state = tmp_path / "state"
    root = held_root(state)
    transcript = transcript or _long_journal_then_approval(tmp_path)
    options: dict[str, Any] = {}
    if shared:
        options = {
            "codex_threads_per_process": 4,
            "shared_kinds": frozenset({"standin"}),
            "codex_holders": HolderSettings(root, 30, OWNER),
        }
    return rig(
        tmp_path / "e.db",
        providers={"standin": standin_settings(transcript, *(["--threads"] if shared else []))},
        launcher_factory=holder_launchers(root, 30, OWNER),
        state_dir=state,
        **options,
    )


@pytest.mark.parametrize("shared", [False, True], ids=["own-process", "shared-process"])
async def test_an_answer_right_after_the_reattach_waits_for_the_replay_and_is_accepted(
    tmp_path: Path, shared: bool
) -> None:
    state = tmp_path / "state"
    async with holders_stopped(state):
        async with _rig(tmp_path, shared) as r:
            tid = await r.thread()
            run_id = (await r.manager.send_message(tid, "touch it")).result["runId"]
            (request,) = await r.wait_for(
                lambda: [q for q in r.rows("runtime_request") if q.status == "pending"], 60
            )
            if shared:
                assert r.manager.status()["sharedProcesses"][0]["holder"] is not None
            assert r.manager.leave_held() == 1
            await r.wait_for(lambda: not r.manager.runners)
        async with _rig(tmp_path, shared) as r2:
            found = find_held(r2.core.reader, state)
            assert [h.thread_id for h in found] == [tid]
            assert await r2.manager.reattach_all(found) == []
            # At once, as a client answering the moment the API serves: the replay of the
            # long reply has not reached the request yet.
            answered = await r2.manager.respond(request.id, "accept")
            assert answered.result["nativeRequestRef"] == request.native_request_ref
            assert (await r2.wait_run(run_id, within=60)).status == "completed"
            (resolved,) = [q for q in r2.rows("runtime_request") if q.id == request.id]
            assert (resolved.status, resolved.decision) == ("resolved", "accept")


@pytest.mark.parametrize("shared", [False, True], ids=["own-process", "shared-process"])
async def test_an_answer_right_after_a_reattach_whose_journal_ends_on_stderr_is_not_held(
    tmp_path: Path, shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay is over once the records journaled before the attach are handed out,
    stderr ones last (brought by a later read of the socket): an answer does not wait the
    request bound (30 s) for a line the provider, waiting for it, never writes."""
    state = tmp_path / "state"
    transcript = _approval_then_stderr(tmp_path)
    async with holders_stopped(state):
        async with _rig(tmp_path, shared, transcript) as r:
            tid = await r.thread()
            run_id = (await r.manager.send_message(tid, "touch it")).result["runId"]
            (request,) = await r.wait_for(
                lambda: [q for q in r.rows("runtime_request") if q.status == "pending"], 60
            )
            (journal,) = held_root(state).glob("*/journal")
            with trio.fail_after(20):
                while b"warming up 2" not in journal.read_bytes():  # noqa: ASYNC110
                    await trio.sleep(0.02)
            assert r.manager.leave_held() == 1
            await r.wait_for(lambda: not r.manager.runners)

        attach = client.attach

        async def attach_split(paths: HeldPaths, after: int) -> HeldProcess:
            held = await attach(paths, after)
            stderr_a_moment_later(held)
            return held

        monkeypatch.setattr(client, "attach", attach_split)
        monkeypatch.setattr(shared_codex, "attach", attach_split)
        async with _rig(tmp_path, shared, transcript) as r2:
            found = find_held(r2.core.reader, state)
            assert await r2.manager.reattach_all(found) == []
            with trio.fail_after(10):
                await r2.manager.respond(request.id, "accept")
            assert (await r2.wait_run(run_id, within=60)).status == "completed"
