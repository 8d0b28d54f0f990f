"""Where the real `claude` files a thread's session, and resuming it, through the supervisor.

The daemon's own PWD differs from every thread's cwd. Measured with the pinned CLI
(2.1.327): the session file lands in the project folder of the child's real working
directory whatever PWD says; the launch sets PWD to the child's cwd anyway
(adapters/process.py). A session whose file is not where the CLI looks (filed under
another project folder) cannot be resumed: the thread goes on in a new session told
the whole history.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from fixtures.fakes import messages_api
from fixtures.fakes.claude_env import (
    FAKE_MODEL,
    ClaudeDirs,
    claude_dirs,
    claude_env,
    find_claude_binary,
)
from fixtures.fakes.codex_home import make_work_dir
from supervisor.providers import ProviderSettings
from tests.supervisor.support import Rig, rig

CLAUDE = find_claude_binary()
WAIT_S = 60.0

pytestmark = [
    pytest.mark.real_claude,
    pytest.mark.slow,
    pytest.mark.skipif(CLAUDE is None, reason="no claude binary: install claude-agent-sdk"),
]


def project_folder(cwd: Path) -> str:
    """The CLI's name for a directory's project folder: every non-alphanumeric as '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


@attrs.define
class Claude:
    r: Rig
    dirs: ClaudeDirs
    work: Path
    daemon_pwd: Path
    fake: messages_api.FakeMessagesServer

    async def send(self, tid: str, text: str) -> Any:
        sent = await self.r.manager.send_message(tid, text)
        return await self.r.wait_run(
            str(sent.result["runId"]), statuses=("completed", "failed"), within=WAIT_S
        )

    async def session_file(self, session: str) -> Path:
        """The session's file once the CLI has written it (it does so after the turn)."""
        with trio.fail_after(20):
            while True:
                files = list(self.dirs.config.glob(f"projects/*/{session}.jsonl"))
                if files and files[0].stat().st_size > 0:
                    return files[0]
                await trio.sleep(0.05)

    async def retire(self, tid: str) -> None:
        """End the thread's runtime, so the next send starts a process that resumes."""
        await self.r.manager.retire(self.r.manager.runners[tid], "idle")
        assert tid not in self.r.manager.runners

    def last_user_text(self) -> str:
        request = self.fake.requests[-1]
        return "\n".join(t for m in request["messages"] for t in messages_api.user_texts(m))


@asynccontextmanager
async def claude_thread(tmp_path: Path) -> AsyncIterator[tuple[Claude, str]]:
    assert CLAUDE is not None
    with ExitStack() as stack:
        fake = stack.enter_context(messages_api.FakeMessagesServer())
        dirs = stack.enter_context(claude_dirs("sd"))
        work = make_work_dir(tmp_path / "work")
        # The daemon's PWD, inherited by every child it starts.
        daemon_pwd = tmp_path / "daemon"
        daemon_pwd.mkdir()
        providers = {
            "claude": ProviderSettings(
                command=[str(CLAUDE)],
                env={**claude_env(dirs, fake.base_url), "PWD": str(daemon_pwd)},
                model=FAKE_MODEL,
                request_timeout_s=WAIT_S,
            )
        }
        async with rig(tmp_path / "e.db", providers=providers) as r:
            tid = await r.thread("claude", cwd=str(work))
            yield Claude(r, dirs, work, daemon_pwd, fake), tid


async def test_the_session_is_filed_under_the_threads_cwd_and_resumes(tmp_path: Path) -> None:
    async with claude_thread(tmp_path) as (c, tid):
        first = await c.send(tid, "remember the word PAPAYA")
        assert first.status == "completed"
        session = c.r.row("provider_thread", first.provider_thread_id).native_thread_ref
        path = await c.session_file(session)
        assert path.parent.name == project_folder(c.work)
        assert not (c.dirs.config / "projects" / project_folder(c.daemon_pwd)).exists()

        await c.retire(tid)
        second = await c.send(tid, "RECALL")
        assert second.status == "completed"
        # Resumed natively: the same provider thread, no handoff, the history at the model.
        assert second.provider_thread_id == first.provider_thread_id
        assert second.context_handoff_id is None
        assert "remember the word PAPAYA" in c.last_user_text()


async def test_a_session_filed_under_another_folder_still_resumes(tmp_path: Path) -> None:
    async with claude_thread(tmp_path) as (c, tid):
        first = await c.send(tid, "remember the word PAPAYA")
        session = c.r.row("provider_thread", first.provider_thread_id).native_thread_ref
        path = await c.session_file(session)
        await c.retire(tid)
        # As if recorded by a CLI that filed sessions by the daemon's PWD: `--resume`
        # looks a session up by id in every project folder, so it is still found.
        elsewhere = c.dirs.config / "projects" / project_folder(c.daemon_pwd)
        elsewhere.mkdir()
        path.rename(elsewhere / path.name)

        second = await c.send(tid, "RECALL")
        assert second.status == "completed"
        assert second.provider_thread_id == first.provider_thread_id
        assert second.context_handoff_id is None
        assert "remember the word PAPAYA" in c.last_user_text()


async def test_a_session_the_cli_cannot_find_falls_back_to_a_summary(tmp_path: Path) -> None:
    async with claude_thread(tmp_path) as (c, tid):
        first = await c.send(tid, "remember the word PAPAYA")
        session = c.r.row("provider_thread", first.provider_thread_id).native_thread_ref
        (await c.session_file(session)).unlink()
        await c.retire(tid)

        second = await c.send(tid, "RECALL")
        assert second.status == "completed"
        # A new session, told the whole history; the old one is marked failed.
        assert second.provider_thread_id != first.provider_thread_id
        assert c.r.row("provider_thread", first.provider_thread_id).status == "error"
        handoff = c.r.row("context_handoff", second.context_handoff_id)
        assert handoff.strategy == "full_thread_summary"
        assert "User: remember the word PAPAYA" in c.last_user_text()
        fresh = c.r.row("provider_thread", second.provider_thread_id).native_thread_ref
        assert (await c.session_file(fresh)).parent.name == project_folder(c.work)
