"""A turn begun in the log but never sent, whose previous turn's end committed without its
journal offset (issue 20, "Left open"): the next daemon must send it, once.

The offset of a read's lines is reported at the next read, so a turn's end can commit
while the committed offset still lies before it. Counting turn ends against that offset,
the reattach took the previous turn's request for the active one's and waited forever.
The stand-in playing Codex (``turn/start``) and Claude (its ``user`` frame) under a real
holder; the seams are the transport's offset reports (held back) and the runtime's send of
the turn's input (never made: the daemon "dies" before it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from adapters.claude.runtime import ClaudeRuntime
from adapters.codex.runtime import CodexRuntime
from adapters.offset_lines import OffsetLines
from adapters.ownership import this_process
from supervisor.holder.client import holder_launchers
from supervisor.holder.layout import held_root
from supervisor.holder.wire import Kind, iter_file
from supervisor.providers import ProviderSettings, standin_settings
from supervisor.reattach import find_held
from tests.holder.support import holders_stopped
from tests.supervisor.support import rig

OWNER = this_process().token()
REPO = Path(__file__).resolve().parents[2]
CLAUDE_TRANSCRIPT = REPO / "fixtures" / "claude" / "plain_reply.ndjson"
#: What each provider's runtime writes to start a turn.
TURN_REQUEST = {"standin": b'"turn/start"', "claude": b'"type":"user"'}


def _claude_standin(tmp_path: Path) -> ProviderSettings:
    """The stand-in playing a recorded ``claude`` turn for every user frame (it takes
    none of the CLI's arguments: a script drops them)."""
    script = tmp_path / "claude"
    script.write_text(
        f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m adapters.standin"
        f" {CLAUDE_TRANSCRIPT} --loop-turns --speed 0\n"
    )
    script.chmod(0o755)
    return ProviderSettings(command=[str(script)])


def _rig(tmp_path: Path, provider: str) -> Any:
    state = tmp_path / "state"
    settings = standin_settings() if provider == "standin" else _claude_standin(tmp_path)
    return rig(
        tmp_path / "e.db",
        providers={provider: settings},
        launcher_factory=holder_launchers(held_root(state), 30, OWNER),
        state_dir=state,
    )


def _turn_requests(state: Path, provider: str) -> int:
    """How many turn requests (turn/start, user frames) the daemons wrote to the provider."""
    (held,) = (state / "held").iterdir()
    return sum(
        1
        for _, record in iter_file(str(held / "journal"))
        if record.kind is Kind.IN and TURN_REQUEST[provider] in record.payload
    )


def _dies_before_sending(seam: pytest.MonkeyPatch, provider: str) -> None:
    """The daemon stops just before it writes the next turn's input."""
    if provider == "standin":

        async def start_turn(self: CodexRuntime, text: str) -> None:
            await trio.sleep_forever()

        seam.setattr(CodexRuntime, "start_turn", start_turn)
        return
    send = ClaudeRuntime._send

    async def send_unless_user(self: ClaudeRuntime, session: Any, frame: Mapping[str, Any]) -> None:
        if frame.get("type") == "user":
            await trio.sleep_forever()
        await send(self, session, frame)

    seam.setattr(ClaudeRuntime, "_send", send_unless_user)


@pytest.mark.parametrize("provider", ["standin", "claude"])
async def test_a_turn_begun_but_never_sent_after_an_end_committed_without_its_offset_is_sent_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    state = tmp_path / "state"
    async with holders_stopped(state):
        async with _rig(tmp_path, provider) as r:
            tid = await r.thread(provider)
            first = (await r.manager.send_message(tid, "one")).result["runId"]
            await r.wait_run(first)
            with monkeypatch.context() as seam:
                # From here the offsets of the lines handed out are never reported: run
                # two's end commits, its offset does not (as when the daemon dies before the
                # next read reports it).
                seam.setattr(OffsetLines, "report_delivered", lambda self: None)
                second = (await r.manager.send_message(tid, "two")).result["runId"]
                await r.wait_run(second)
                _dies_before_sending(seam, provider)
                third = (await r.manager.send_message(tid, "three")).result["runId"]
                await r.wait_for(lambda: r.row("run", third).status in ("starting", "running"))
                assert _turn_requests(state, provider) == 2
                assert r.manager.leave_held() == 1
                await r.wait_for(lambda: not r.manager.runners)
        async with _rig(tmp_path, provider) as r2:
            found = find_held(r2.core.reader, state)
            assert [(h.thread_id, h.unsent) for h in found] == [(tid, True)]
            assert await r2.manager.reattach_all(found) == []
            assert (await r2.wait_run(third, within=30)).status == "completed"
            assert _turn_requests(state, provider) == 3


async def test_a_turn_begun_with_a_handoff_and_sent_after_the_restart_carries_the_handoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider switch: the thread's next run carries what the new provider missed (a
    handoff, materialized with the turn's begin). Sent by the next daemon, it still does."""
    state = tmp_path / "state"
    providers = {"standin": standin_settings(), "claude": _claude_standin(tmp_path)}
    options: dict[str, Any] = {
        "providers": providers,
        "launcher_factory": holder_launchers(held_root(state), 30, OWNER),
        "state_dir": state,
    }
    async with holders_stopped(state):
        async with rig(tmp_path / "e.db", **options) as r:
            tid = await r.thread("standin")
            first = (await r.manager.send_message(tid, "one")).result["runId"]
            await r.wait_run(first)
            await r.core.service.switch_provider(tid, "claude")
            with monkeypatch.context() as seam:
                _dies_before_sending(seam, "claude")
                second = (await r.manager.send_message(tid, "two")).result["runId"]
                await r.wait_for(lambda: r.row("run", second).status in ("starting", "running"))
                assert r.manager.leave_held() == 1
                await r.wait_for(lambda: not r.manager.runners)
        async with rig(tmp_path / "e.db", **options) as r2:
            found = find_held(r2.core.reader, state)
            assert [h.unsent for h in found if h.session.provider == "claude"] == [True]
            assert await r2.manager.reattach_all(found) == []
            assert (await r2.wait_run(second, within=30)).status == "completed"
            (sent,) = [
                record.payload
                for journal in held_root(state).glob("*/journal")
                for _, record in iter_file(str(journal))
                if record.kind is Kind.IN and TURN_REQUEST["claude"] in record.payload
            ]
            assert b"Context handoff" in sent and b"two" in sent
