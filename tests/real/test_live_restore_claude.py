"""Live restore with the real ``claude`` CLI against the loopback fake Messages API: a
daemon SIGKILL or graceful restart mid-reply, and a permission request (the control
protocol's ``can_use_tool``) pending across a restart, answered after it (issue 20)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from t3orch.cli.drill import ASK_TO_RUN, STREAMED
from tests.real.live_restore import approval_across_restart, mid_reply_restart

pytestmark = pytest.mark.real_claude


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_claude_mid_reply_across_a_daemon_restart_every_word_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # 16 one-word deltas, 4 a second: the restart lands mid-reply.
    mid_reply_restart(tmp_path, "claude", stop, *STREAMED["claude"])


def test_a_claude_approval_pending_across_a_restart_is_answered_after_it_and_runs(
    tmp_path: Path,
) -> None:
    approval_across_restart(tmp_path, "claude", ASK_TO_RUN["claude"])


def test_a_claude_reply_that_ends_while_the_daemon_is_down_is_taken_not_sent_again(
    tmp_path: Path,
) -> None:
    # Down past the reply's 4 s: the journal holds the turn's end the log does not have.
    mid_reply_restart(tmp_path, "claude", signal.SIGKILL, *STREAMED["claude"], down_s=6)
