"""Replay of every recorded Codex transcript through the real adapter, asserted on
canonical events (never on raw frames)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import trio

from adapters.replay import replay_events
from adapters.transcript import load_transcript
from t3orch.domain.turn_items import (
    AssistantMessage,
    CommandExecution,
    FileChange,
)
from t3orch.provider_events import (
    Diagnostic,
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    ProviderEvent,
    RequestCancelled,
    RequestOpened,
    RequestResolved,
    RuntimeExited,
    SessionReady,
    ThreadRefsLearned,
    TurnCompleted,
    TurnStarted,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "codex"
TRANSCRIPTS = sorted(FIXTURES.glob("*.ndjson"))
#: Scenarios where an error-level diagnostic is the point.
ERRORS_EXPECTED = {"backend_failure", "malformed_frame"}


def of(events: list[ProviderEvent], kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]


def assistant_texts(events: list[ProviderEvent]) -> list[str]:
    return [
        e.content.text
        for e in of(events, ItemCompleted)
        if isinstance(e.content, AssistantMessage) and e.status == "completed"
    ]


def turn_statuses(events: list[ProviderEvent]) -> list[str]:
    return [e.status for e in of(events, TurnCompleted)]


def check_plain_turn(events: list[ProviderEvent]) -> None:
    assert turn_statuses(events) == ["completed"]
    assert assistant_texts(events) == ["ack: hello"]
    assert "".join(e.text for e in of(events, ItemDelta)) == "ack: hello"


def _approval(events: list[ProviderEvent], decision: str) -> CommandExecution:
    (opened,) = of(events, RequestOpened)
    assert opened.kind == "command" and opened.native_item_ref == "call_1"
    assert "touch" in opened.summary
    (resolved,) = of(events, RequestResolved)
    assert (resolved.native_request_ref, resolved.decision) == (opened.native_request_ref, decision)
    (run,) = [e for e in of(events, ItemCompleted) if isinstance(e.content, CommandExecution)]
    return run


def check_approval_accept(events: list[ProviderEvent]) -> None:
    run = _approval(events, "accept")
    assert run.status == "completed" and run.content.exit_code == 0
    assert "ran-approval_accept" in run.content.output
    assert turn_statuses(events) == ["completed"]


def check_approval_decline(events: list[ProviderEvent]) -> None:
    run = _approval(events, "decline")
    assert run.status == "declined"
    assert turn_statuses(events) == ["completed"]
    assert any("rejected" in text for text in assistant_texts(events))


def check_approval_cancel(events: list[ProviderEvent]) -> None:
    run = _approval(events, "cancel")
    assert run.status == "declined"
    assert turn_statuses(events) == ["interrupted"]


def check_file_change_approval(events: list[ProviderEvent]) -> None:
    (opened,) = of(events, RequestOpened)
    assert opened.kind == "file-change"
    assert of(events, RequestResolved)[0].decision == "accept"
    (edit,) = [e for e in of(events, ItemCompleted) if isinstance(e.content, FileChange)]
    assert edit.status == "completed" and edit.content.file_name.endswith("notes.txt")
    assert edit.content.changes[0].kind == "add"
    assert turn_statuses(events) == ["completed"]


def check_interrupt(events: list[ProviderEvent]) -> None:
    assert turn_statuses(events) == ["interrupted"]
    streamed = "".join(e.text for e in of(events, ItemDelta))
    closed = [e for e in of(events, ItemCompleted) if e.status == "interrupted"]
    assert len(closed) == 1 and closed[0].content == AssistantMessage(text=streamed)
    assert len(of(events, ItemDelta)) >= 3
    # The adapter's closing comes before the authoritative end of the turn.
    assert events.index(closed[0]) < events.index(of(events, TurnCompleted)[0])


def check_resume(events: list[ProviderEvent]) -> None:
    exits = of(events, RuntimeExited)
    assert [(e.code, e.signal) for e in exits] == [(None, 9), (0, None)]
    refs = [e.native_thread_ref for e in of(events, ThreadRefsLearned)]
    assert len(refs) == 2 and refs[0] == refs[1]
    assert len(of(events, SessionReady)) == 2
    assert turn_statuses(events) == ["completed", "completed"]
    assert "pineapple" in assistant_texts(events)[-1]


def check_fork(events: list[ProviderEvent]) -> None:
    parent, child = of(events, ThreadRefsLearned)
    assert parent.forked_from_native_thread_ref is None
    assert child.forked_from_native_thread_ref == parent.native_thread_ref
    assert child.native_thread_ref != parent.native_thread_ref
    assert turn_statuses(events) == ["completed", "completed"]
    assert "the parent thread says hi" in assistant_texts(events)[-1]


def check_backend_failure(events: list[ProviderEvent]) -> None:
    errors = [e for e in of(events, Diagnostic) if e.level == "error"]
    assert [e.code for e in errors] == ["provider_error"]
    (turn,) = of(events, TurnCompleted)
    assert turn.status == "failed" and turn.error


def check_malformed_frame(events: list[ProviderEvent]) -> None:
    bad = [e for e in of(events, Diagnostic) if e.code == "malformed_frame"]
    assert len(bad) == 2 and all(e.level == "error" for e in bad)
    assert turn_statuses(events) == ["completed"]
    assert assistant_texts(events) == ["ack: hello"]


CHECKS: dict[str, Callable[[list[ProviderEvent]], None]] = {
    "plain_turn": check_plain_turn,
    "approval_accept": check_approval_accept,
    "approval_decline": check_approval_decline,
    "approval_cancel": check_approval_cancel,
    "file_change_approval": check_file_change_approval,
    "interrupt": check_interrupt,
    "resume": check_resume,
    "fork": check_fork,
    "backend_failure": check_backend_failure,
    "malformed_frame": check_malformed_frame,
}


def check_invariants(scenario: str, segments: int, events: list[ProviderEvent]) -> None:
    """What must hold for any Codex transcript."""
    assert isinstance(events[0], SessionReady)
    assert isinstance(events[-1], RuntimeExited)
    assert len(of(events, RuntimeExited)) == segments
    open_items: set[str] = set()
    open_requests: set[str] = set()
    turns = 0
    for event in events:
        if isinstance(event, TurnStarted):
            turns += 1
        elif isinstance(event, ItemStarted):
            open_items.add(event.native_item_ref)
        elif isinstance(event, ItemCompleted):
            open_items.discard(event.native_item_ref)
        elif isinstance(event, RequestOpened):
            open_requests.add(event.native_request_ref)
        elif isinstance(event, RequestResolved | RequestCancelled):
            open_requests.discard(event.native_request_ref)
        elif isinstance(event, TurnCompleted):
            turns -= 1
            assert not open_items, f"items still open at turn end: {open_items}"
            assert not open_requests, f"requests still open at turn end: {open_requests}"
    assert turns == 0, "a turn started and never completed"
    if scenario not in ERRORS_EXPECTED:
        errors = [e for e in of(events, Diagnostic) if e.level == "error"]
        assert not errors, errors


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
async def test_replay(path: Path) -> None:
    transcript = load_transcript(path)
    with trio.fail_after(30):
        events = await replay_events("codex", path)
    check_invariants(transcript.header.scenario, len(transcript.segments), events)
    check = CHECKS.get(transcript.header.scenario)
    if check is not None:
        check(events)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
async def test_replay_is_deterministic(path: Path) -> None:
    with trio.fail_after(60):
        first = await replay_events("codex", path)
        second = await replay_events("codex", path)
    # Raw event ids number both directions in one sequence, and when our own
    # frames are written relative to the provider's is up to the scheduler; the
    # canonical content is what must not change.
    assert without_raw_ids(first) == without_raw_ids(second)


def without_raw_ids(events: list[ProviderEvent]) -> list[ProviderEvent]:
    return [msgspec.structs.replace(e, raw_event_id=None) for e in events]


def test_every_recorded_scenario_is_checked() -> None:
    scenarios = {load_transcript(p).header.scenario for p in TRANSCRIPTS}
    assert set(CHECKS) <= scenarios, "a checked scenario has no transcript any more"


async def test_interrupt_replays_at_recorded_speed(autojump_clock: trio.abc.Clock) -> None:
    # With the recorded delays (0.5 s between deltas) under a jumping clock, the
    # interrupt still lands after the deltas that preceded it in the recording.
    with trio.fail_after(120):
        events = await replay_events("codex", FIXTURES / "interrupt.ndjson", speed=1.0)
    check_interrupt(events)
