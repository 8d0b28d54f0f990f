"""Live restore with the real ``claude`` CLI against the loopback fake Messages API: a
daemon SIGKILL or graceful restart mid-reply, and a permission request (the control
protocol's ``can_use_tool``) pending across a restart, answered after it (issue 20)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.real.live_restore import approval_across_restart, mid_reply_restart

pytestmark = pytest.mark.real_claude

#: 16 one-word deltas, 4 a second: the restart lands mid-reply.
_STREAM = "STREAM: 16 4"
_REPLY = "".join(f"word{i} " for i in range(16))


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_claude_mid_reply_across_a_daemon_restart_every_word_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    mid_reply_restart(tmp_path, "claude", stop, _STREAM, _REPLY)


def test_a_claude_approval_pending_across_a_restart_is_answered_after_it_and_runs(
    tmp_path: Path,
) -> None:
    approval_across_restart(tmp_path, "claude", "RUN_BASH: touch {made}")
