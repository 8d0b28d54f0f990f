"""Live restore with the real ``codex app-server`` against the loopback fake model server:
a daemon SIGKILL or graceful restart mid-reply, and an approval pending across a restart,
answered after it (issue 20)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from t3orch.cli.drill import ASK_TO_RUN, STREAMED
from tests.real.live_restore import approval_across_restart, mid_reply_restart

pytestmark = pytest.mark.real_codex


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_codex_mid_reply_across_a_daemon_restart_every_word_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    # DAWDLE: "dawdled: done" in 6 deltas 0.5 s apart.
    mid_reply_restart(tmp_path, "codex", stop, *STREAMED["codex"])


def test_a_codex_approval_pending_across_a_restart_is_answered_after_it_and_runs(
    tmp_path: Path,
) -> None:
    approval_across_restart(tmp_path, "codex", ASK_TO_RUN["codex"])
