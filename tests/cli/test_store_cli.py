"""The read-only CLI over a real store: events, check, replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from t3orch.core import open_core
from tests.store.support import new_thread, reply_events, started_turn

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "t3orch.cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _populate(db: Path) -> None:
    async with open_core(db) as core:
        tid = await new_thread(core.service)
        b = await started_turn(core.service, tid, "hello")
        await core.service.ingest(b, reply_events("t", "an answer"))


def test_events_prints_every_committed_event_as_json_lines(state_dir: Path) -> None:
    trio.run(_populate, state_dir / "events.sqlite3")
    out = _cli("events", "--state-dir", str(state_dir))
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [e["sequence"] for e in lines] == list(range(1, len(lines) + 1))
    for e in lines:
        assert {"sequence", "type", "occurredAt", "threadId", "runId", "payload"} <= e.keys()
        assert e["payload"]["type"] == e["type"]
    since = _cli("events", "--state-dir", str(state_dir), "--since", str(len(lines) - 2))
    assert [json.loads(x)["sequence"] for x in since.stdout.splitlines()] == [
        len(lines) - 1,
        len(lines),
    ]


def test_check_passes_then_names_a_tampered_row(state_dir: Path) -> None:
    import sqlite3

    trio.run(_populate, state_dir / "events.sqlite3")
    ok = _cli("check", "--state-dir", str(state_dir))
    assert ok.returncode == 0 and ok.stdout.startswith("ok:"), ok.stderr
    conn = sqlite3.connect(state_dir / "events.sqlite3")
    (kind, id) = conn.execute("SELECT kind, id FROM rows WHERE kind = 'run'").fetchone()
    conn.execute("UPDATE rows SET status = 'queued' WHERE kind = ? AND id = ?", (kind, id))
    conn.commit()
    conn.close()
    bad = _cli("check", "--state-dir", str(state_dir))
    assert bad.returncode == 1
    assert f"run {id}: differs from the rebuild in status" in bad.stderr


def test_replay_prints_canonical_events() -> None:
    out = _cli("replay", "--provider", "codex", str(REPO / "fixtures/codex/approval_accept.ndjson"))
    assert out.returncode == 0, out.stderr
    types = [json.loads(line)["type"] for line in out.stdout.splitlines()]
    assert "request.opened" in types and types.count("turn.completed") == 1
    wrong = _cli("replay", "--provider", "claude", str(REPO / "fixtures/codex/plain_turn.ndjson"))
    assert wrong.returncode == 2 and "a codex transcript" in wrong.stderr


def test_check_json_reports_the_verdict_and_each_difference(state_dir: Path) -> None:
    import sqlite3

    trio.run(_populate, state_dir / "events.sqlite3")
    ok = _cli("check", "--state-dir", str(state_dir), "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["ok"] is True and doc["differences"] == [] and doc["integrityProblems"] == []
    assert doc["events"] == doc["projectionSequence"] > 0 and doc["projectionRows"] > 0
    conn = sqlite3.connect(state_dir / "events.sqlite3")
    (id,) = conn.execute("SELECT id FROM rows WHERE kind = 'run'").fetchone()
    conn.execute("UPDATE rows SET status = 'queued' WHERE kind = 'run' AND id = ?", (id,))
    conn.commit()
    conn.close()
    bad = _cli("check", "--state-dir", str(state_dir), "--json")
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["ok"] is False
    assert f"run {id}: differs from the rebuild in status" in doc["differences"]


def test_demo_keeps_its_log_in_the_state_dir_it_is_given(tmp_path: Path) -> None:
    state = tmp_path / "demo-state"
    for _ in range(2):  # a kept state dir can hold a second demo (new threads)
        demo = subprocess.run(
            [sys.executable, "-m", "t3orch.cli.main", "demo", "--state-dir", str(state)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
    assert f"the demo's log stays in {state}" in demo.stdout
    events = _cli("events", "--state-dir", str(state))
    assert events.returncode == 0 and events.stdout.count("thread.upserted") > 0
    check = _cli("check", "--state-dir", str(state), "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["ok"], check.stdout
    threads = {
        json.loads(line)["threadId"]
        for line in events.stdout.splitlines()
        if json.loads(line)["type"] == "thread.upserted"
    }
    assert len(threads) == 2 * (demo.stdout.count("== ")), demo.stdout


def test_replay_of_a_failed_resume_prints_every_event() -> None:
    # The adapter raises ResumeError on the recorded refusal, as it must; the
    # replay goes on as the recorded client did (a fresh thread, then its turn).
    fixture = "fixtures/lineage/resume_failure_on_return_falls_back_to_a_full_summary.codex.ndjson"
    out = _cli("replay", "--provider", "codex", str(REPO / fixture))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    types = [json.loads(line)["type"] for line in out.stdout.splitlines()]
    assert types.count("resume.failed") == 1, types
    # Both processes' turns: the first thread's, then the fresh thread's.
    assert types.count("turn.completed") == 2 and types.count("runtime.exited") == 2
    assert types.index("resume.failed") < len(types) - types[::-1].index("turn.completed")
    # Claude's CLI refuses an unknown --resume at start-up.
    out = _cli(
        "replay", "--provider", "claude", str(REPO / "fixtures/claude/resume_unknown.ndjson")
    )
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    types = [e["type"] for e in events]
    # The refusing process's exit is not the runtime's (a fallback thread could be
    # opened on it): an info diagnostic, then the runtime's exit when it closes.
    assert types == ["resume.failed", "diagnostic", "diagnostic", "runtime.exited"]
    assert events[2]["code"] == "claude.session_process_exited"


def test_replay_of_a_resume_owned_elsewhere_prints_every_event(tmp_path: Path) -> None:
    recorded = REPO / "fixtures/lineage/resume_failure_on_return_falls_back_to_a_full_summary"
    text = Path(f"{recorded}.codex.ndjson").read_text()
    thread = "01a22dbb-0c96-7ef2-a363-f06cd8e71821"
    refusal = f"no rollout found for thread id {thread}"
    assert text.count(refusal) == 1
    owned = tmp_path / "owned.ndjson"
    owned.write_text(text.replace(refusal, f"thread {thread} already has an active writer"))
    out = _cli("replay", "--provider", "codex", str(owned))
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    (failed,) = [e for e in events if e["type"] == "resume.failed"]
    assert failed["reason"] == "owned_elsewhere"
    assert [e["type"] for e in events].count("turn.completed") == 2


def test_replay_of_a_non_json_line_names_the_line(tmp_path: Path) -> None:
    lines = (REPO / "fixtures/codex/plain_turn.ndjson").read_text().splitlines()
    bad = tmp_path / "bad.ndjson"
    bad.write_text("\n".join([*lines[:3], "this is not json", *lines[3:]]) + "\n")
    out = _cli("replay", "--provider", "codex", str(bad))
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"t3orch replay: {bad}:4: not a JSON step")
