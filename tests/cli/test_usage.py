"""Token usage per run and per thread, from the provider's reports to `show`,
`threads` and `status`: the real CLI against a real daemon on the stand-in
(it plays a recorded Codex transcript through the Codex adapter)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.cli.test_thread_lifecycle import cli, ok
from tests.daemon.support import config_file, serve

#: What the recorded turn reports (``thread/tokenUsage/updated``: total 1983).
TURN = {
    "inputTokens": 1981,
    "cachedInputTokens": 0,
    "outputTokens": 2,
    "reasoningOutputTokens": 0,
    "totalTokens": 1983,
    "costUsd": None,
}


def test_usage_reaches_the_run_the_thread_and_status(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serve(state, config_file(tmp_path)) as d:
        d.wait_notify("READY=1")
        tid = ok(cli(state, "thread", "new", "--provider", "standin")).strip()
        for text in ("hello there", "and again"):
            sent = cli(state, "send", tid, text, "--wait", "--timeout", "60")
            assert sent.returncode == 0, sent.stderr
        detail = json.loads(ok(cli(state, "show", tid, "--json")))
        first, second = sorted(detail["runs"], key=lambda r: r["ordinal"])
        assert first["usage"] == TURN
        # The stand-in replays the same turn, so the running total does not grow:
        # the second turn spent nothing new, and the repeated total is not counted twice.
        assert second["usage"]["totalTokens"] == 0
        assert detail["usage"] == TURN
        shown = ok(cli(state, "show", tid))
        assert "usage      1,983 tokens (1,981 in, 2 out)" in shown
        assert "   usage 1,983 tokens (1,981 in, 2 out)" in shown
        (entry,) = json.loads(ok(cli(state, "threads", "--json")))["threads"]
        assert entry["usage"] == TURN
        assert "1,983 tokens" in ok(cli(state, "threads"))
        status = json.loads(ok(cli(state, "status", "--json")))
        assert status["usage"] == {"total": TURN, "threads": {tid: TURN}}
        shown_status = ok(cli(state, "status"))
        assert "usage      1,983 tokens (1,981 in, 2 out) over 1 threads" in shown_status
        assert f"  {tid}  1,983 tokens (1,981 in, 2 out)" in shown_status
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=30) == 0
    # The same figures from the store alone.
    assert json.loads(ok(cli(state, "show", tid, "--json")))["usage"] == TURN


def _turn_usage(provider: str, transcript: str) -> list[dict[str, object]]:
    out = ok(cli(Path("/nonexistent"), "replay", "--provider", provider, transcript))
    events = [json.loads(line) for line in out.splitlines()]
    return [e["tokenUsage"] for e in events if e["type"] == "turn.completed"]


def test_codex_turn_usage_is_its_share_of_the_running_total() -> None:
    # Process 1 runs a turn (total 1995); process 2 resumes, repeats that total
    # under the old turn's id, then its own turn brings the total to 4072.
    first, second = _turn_usage("codex", "fixtures/codex/resume.ndjson")
    assert first["totalTokens"] == 1995 and first["outputTokens"] == 8
    assert second == {
        "inputTokens": 2068,
        "cachedInputTokens": 0,
        "outputTokens": 9,
        "reasoningOutputTokens": 0,
        "totalTokens": 2077,
        "costUsd": None,
    }


def test_claude_turn_usage_carries_the_turns_cost() -> None:
    (turn,) = _turn_usage("claude", "fixtures/claude/bash_allowed.ndjson")
    assert turn["inputTokens"] == 20 and turn["outputTokens"] == 5
    assert turn["totalTokens"] == 25
    assert turn["costUsd"] == 0.000135
