"""The pinned ``codex app-server`` against the fake Responses API (real binary, loopback).

These reuse the recorder's tiny client (fixtures/record/codex.py): it is independent of
the adapter under test elsewhere, which is the point. Every wait inside it is bounded.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures.fakes.codex_home import MODEL, expected_codex_version, resolve_codex_binary
from fixtures.fakes.responses_api import user_texts
from fixtures.record.codex import CodexProcess, Session, run_turn, session

TIMEOUT_S = 30.0
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "codex"
BINARY = resolve_codex_binary()


@pytest.fixture
def codex_session(request: pytest.FixtureRequest) -> Iterator[tuple[Session, CodexProcess]]:
    assert BINARY is not None
    with session(BINARY, request.node.name, "pytest") as s:
        codex = s.spawn()
        try:
            codex.handshake()
            yield s, codex
        finally:
            if codex.proc.poll() is None:
                codex.kill()


@pytest.mark.real_codex
@pytest.mark.skipif(BINARY is None, reason="codex 0.169.0 not installed: run scripts/install-codex")
def test_the_binary_is_the_expected_version() -> None:
    # The pin, or what `scripts/test --providers newest` installed.
    assert BINARY is not None
    out = subprocess.run(
        [str(BINARY), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.split() == ["codex-cli", expected_codex_version()]


@pytest.mark.real_codex
@pytest.mark.skipif(BINARY is None, reason="codex 0.169.0 not installed: run scripts/install-codex")
def test_a_turn_completes_through_the_fake(codex_session: tuple[Session, CodexProcess]) -> None:
    s, codex = codex_session
    thread_id = s.start_thread(codex)
    done = run_turn(codex, thread_id, "hello from pytest", timeout=TIMEOUT_S)
    codex.close()

    turn = done["turn"]
    assert turn["status"] == "completed"
    texts = [i["text"] for i in turn["items"] if i["type"] == "agentMessage"]
    assert texts == ["ack: hello from pytest"]

    # The fake saw exactly the one model request, authenticated with the env key.
    requests = s.fake.wait_for_requests(1, TIMEOUT_S)
    assert len(requests) == 1
    req = requests[0]
    assert req["model"] == MODEL and req["stream"] is True
    assert user_texts(req) == ["hello from pytest"]
    headers = s.fake.received[0].headers
    assert headers["authorization"] == "Bearer dummy"
    assert headers["originator"] == "t3orch"
    # The catalog in CODEX_HOME is what makes apply_patch available to the fake model.
    tools = {t.get("name"): t for t in req["tools"]}
    assert "exec_command" in tools
    assert tools["apply_patch"]["type"] == "custom"


@pytest.mark.real_codex
@pytest.mark.skipif(BINARY is None, reason="codex 0.169.0 not installed: run scripts/install-codex")
def test_an_escalated_command_raises_the_approval_request(
    codex_session: tuple[Session, CodexProcess],
) -> None:
    s, codex = codex_session
    thread_id = s.start_thread(codex)
    seen: list[dict[str, Any]] = []

    def decline(frame: dict[str, Any]) -> dict[str, Any]:
        seen.append(frame)
        return {"decision": "decline"}

    prompt = "ESCALATE RUN_SHELL: touch escalated.txt"
    done = run_turn(codex, thread_id, prompt, answer=decline, timeout=TIMEOUT_S)
    codex.close()

    assert [f["method"] for f in seen] == ["item/commandExecution/requestApproval"]
    params = seen[0]["params"]
    assert params["threadId"] == thread_id
    assert params["itemId"] == "call_1"  # the backend's call_id
    assert params["command"] == "/bin/bash -lc 'touch escalated.txt'"
    assert params["reason"]  # the model's justification
    assert seen[0]["id"] == 0  # server requests count from 0 in their own id space
    assert done["turn"]["status"] == "completed"
    assert not (s.work / "escalated.txt").exists()


@pytest.mark.real_codex
@pytest.mark.skipif(BINARY is None, reason="codex 0.169.0 not installed: run scripts/install-codex")
def test_read_only_sandbox_patch_raises_the_file_change_approval(
    codex_session: tuple[Session, CodexProcess],
) -> None:
    s, codex = codex_session
    thread_id = s.start_thread(codex, sandbox="read-only")
    seen: list[str] = []

    def accept(frame: dict[str, Any]) -> dict[str, Any]:
        seen.append(frame["method"])
        return {"decision": "accept"}

    done = run_turn(codex, thread_id, "PATCH: a.txt patched", answer=accept, timeout=TIMEOUT_S)
    codex.close()
    assert seen == ["item/fileChange/requestApproval"]
    assert done["turn"]["status"] == "completed"
    assert (s.work / "a.txt").read_text() == "patched\n"


# --- the committed recordings (no binary needed) -----------------------------------

EXPECTED = [
    "plain_turn",
    "approval_accept",
    "approval_decline",
    "approval_cancel",
    "file_change_approval",
    "interrupt",
    "resume",
    "fork",
    "backend_failure",
    "malformed_frame",
]
STEPS = {
    "transcript_start",
    "runtime_start",
    "expect_outbound",
    "emit_inbound",
    "emit_inbound_raw",
    "emit_stderr",
    "runtime_exit",
}


@pytest.mark.parametrize("name", EXPECTED)
def test_recorded_transcripts_are_well_formed(name: str) -> None:
    lines = (FIXTURES / f"{name}.ndjson").read_text(encoding="utf-8").splitlines()
    steps = [json.loads(line) for line in lines]
    header = steps[0]
    assert header["step"] == "transcript_start"
    assert (header["provider"], header["version"], header["scenario"]) == ("codex", "0.169.0", name)
    assert header["synthetic"] is (name == "malformed_frame")
    assert {s["step"] for s in steps} <= STEPS
    assert steps[-1]["step"] == "runtime_exit"
    assert all(s["afterMs"] >= 0 for s in steps if "afterMs" in s)
    first_out = next(s["frame"] for s in steps if s["step"] == "expect_outbound")
    assert first_out["method"] == "initialize"
    assert first_out["params"]["clientInfo"]["name"] == "t3orch"
    # No machine-specific temp paths leak into the fixtures.
    assert "/t3orch-rec-" not in "\n".join(lines)
