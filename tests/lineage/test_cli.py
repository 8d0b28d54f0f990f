"""``t3orch fork``, ``switch-provider`` and ``handoffs`` against a running API."""

from __future__ import annotations

import pytest

from tests.api.support import running_api
from tests.api.test_cli import Cli, _play


async def test_fork_switch_and_handoffs(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        code, out, err = await cli("thread", "new", "--provider", "standin", "--cwd", ".")
        assert code == 0, err
        tid = out.strip()
        code, out, _ = await cli("send", tid, "hello there")
        run1 = out.strip()
        await _play(api, tid, run1, "completed", "hi back")

        code, out, err = await cli("fork", tid, "--title", "experiment")
        assert code == 0, err
        fork = out.strip()
        assert fork.startswith("thr_") and fork != tid
        code, out, _ = await cli("show", fork)
        assert "you: hello there" in out and "hi back" in out
        assert "Forked from conversation" in out
        detail = await cli.json("show", fork)
        assert detail["thread"]["lineage"]["parentThreadId"] == tid
        assert detail["turnItems"] == []
        code, _, err = await cli("fork", tid, "--run", "run_nope")
        assert code == 3 and "no run" in err

        code, out, err = await cli("switch-provider", tid, "claude")
        assert code == 0, err
        assert "standin → claude" in out and "new provider thread" in out
        code, out, _ = await cli("send", tid, "second")
        run2 = out.strip()
        session = await api.core.service.open_session(tid)
        assert session.provider == "claude" and session.provider_thread_id is not None
        text = await api.core.service.prepare_handoff(run2, session.provider_thread_id)
        assert text is not None and "User: hello there" in text
        code, out, _ = await cli("handoffs", tid)
        assert "full_thread_summary" in out and "1-1" in out
        code, out, _ = await cli("handoffs", tid, "--text")
        assert "User: hello there" in out
        (handoff,) = await cli.json("handoffs", tid)
        assert handoff["targetRunId"] == run2
        code, out, _ = await cli("show", tid)
        assert "handoff" in out
