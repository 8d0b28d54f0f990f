"""The transcript loader: typed steps, segments, and errors that point at the problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.transcript import (
    EmitInbound,
    EmitInboundRaw,
    EmitStderr,
    ExpectOutbound,
    RuntimeExit,
    TranscriptError,
    load_transcript,
    parse_transcript,
)
from adapters.transport import ExitStatus

REPO = Path(__file__).resolve().parents[2]

HEADER = {
    "step": "transcript_start",
    "provider": "codex",
    "version": "0.169.0",
    "scenario": "unit",
    "synthetic": True,
    "notes": "written by the test",
    "argv": ["codex", "app-server"],
}


def write(tmp_path: Path, steps: list[Any]) -> Path:
    path = tmp_path / "t.ndjson"
    path.write_text("".join((s if isinstance(s, str) else json.dumps(s)) + "\n" for s in steps))
    return path


def test_good_file_is_typed_and_split_into_segments(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            HEADER,
            {"step": "expect_outbound", "frame": {"id": 1, "method": "initialize"}},
            {"step": "emit_inbound", "afterMs": 12.5, "frame": {"id": 1, "result": {}}},
            {"step": "emit_inbound_raw", "afterMs": 1, "line": "not json"},
            "",
            {"step": "emit_stderr", "text": "warn\n"},
            {"step": "runtime_exit", "afterMs": 3, "signal": 9},
            {"step": "runtime_start", "argv": ["codex", "app-server", "--resume"]},
            {"step": "expect_outbound", "frame": {"method": "initialized"}},
            {"step": "runtime_exit", "code": 0, "onStdinClose": True},
        ],
    )
    transcript = load_transcript(path)

    assert transcript.provider == "codex"
    assert transcript.header.synthetic
    assert [len(s.steps) for s in transcript.segments] == [5, 2]
    first, second = transcript.segments
    assert first.argv == ("codex", "app-server")
    assert second.argv == ("codex", "app-server", "--resume")
    assert [type(s) for s in first.steps] == [
        ExpectOutbound,
        EmitInbound,
        EmitInboundRaw,
        EmitStderr,
        RuntimeExit,
    ]
    emit = first.steps[1]
    assert isinstance(emit, EmitInbound)
    assert emit.after_ms == 12.5
    assert emit.frame == {"id": 1, "result": {}}
    # Line numbers count the blank line too.
    assert first.lines == (2, 3, 4, 6, 7)
    assert second.lines == (9, 10)
    assert first.where(1) == "segment 0 step 1 (line 3)"
    exit_step = first.steps[-1]
    assert isinstance(exit_step, RuntimeExit)
    assert exit_step.status() == ExitStatus(code=None, signal=9)
    last = second.steps[-1]
    assert isinstance(last, RuntimeExit)
    assert last.on_stdin_close


def test_runtime_start_right_after_header_sets_the_first_argv(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [HEADER, {"step": "runtime_start", "argv": ["x"]}, {"step": "emit_stderr", "text": "a"}],
    )
    transcript = load_transcript(path)
    assert len(transcript.segments) == 1
    assert transcript.segments[0].argv == ("x",)


def test_signal_may_be_a_name() -> None:
    transcript = parse_transcript(
        [json.dumps(HEADER), json.dumps({"step": "runtime_exit", "signal": "SIGKILL"})]
    )
    step = transcript.segments[0].steps[0]
    assert isinstance(step, RuntimeExit)
    assert step.status() == ExitStatus(code=None, signal=9)


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (
            {"step": "emit_inbound", "frame": [1, 2]},
            "Expected `object`, got `array` - at `$.frame`",
        ),
        ({"step": "emit_inbound", "frame": {}, "afterMs": "soon"}, "at `$.afterMs`"),
        ({"step": "emit_inbound", "frame": {}, "after_ms": 5}, "unknown field `after_ms`"),
        ({"step": "emit_sideways"}, "Invalid value 'emit_sideways' - at `$.step`"),
        ({"step": "expect_outbound"}, "missing required field `frame`"),
        ({"step": "runtime_exit"}, "exactly one of `code` or `signal` - at `$`"),
        ({"step": "runtime_exit", "code": 0, "signal": 9}, "exactly one of"),
        ({"step": "runtime_exit", "signal": "SIGNOPE"}, "unknown signal name 'SIGNOPE'"),
        ('{"step": "emit_stderr", "text": ', "not a JSON step"),
    ],
)
def test_a_bad_line_names_file_line_and_path(tmp_path: Path, bad: Any, expected: str) -> None:
    path = write(tmp_path, [HEADER, {"step": "emit_stderr", "text": "fine"}, bad])
    with pytest.raises(TranscriptError) as info:
        load_transcript(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: "), message
    assert expected in message


def test_the_header_must_come_first(tmp_path: Path) -> None:
    path = write(tmp_path, [{"step": "emit_stderr", "text": "x"}, HEADER])
    with pytest.raises(TranscriptError, match=r":1: the first step must be transcript_start"):
        load_transcript(path)


def test_a_second_header_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, [HEADER, HEADER])
    with pytest.raises(TranscriptError, match=r":2: a second transcript_start"):
        load_transcript(path)


def test_steps_after_an_exit_need_a_runtime_start(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [HEADER, {"step": "runtime_exit", "code": 0}, {"step": "emit_stderr", "text": "late"}],
    )
    with pytest.raises(TranscriptError, match=r":3: emit_stderr after runtime_exit \(line 2\)"):
        load_transcript(path)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="empty transcript"):
        load_transcript(write(tmp_path, []))
    with pytest.raises(TranscriptError, match="cannot read transcript"):
        load_transcript(tmp_path / "absent.ndjson")


def test_asking_for_a_missing_segment_is_a_clear_error(tmp_path: Path) -> None:
    transcript = load_transcript(write(tmp_path, [HEADER]))
    with pytest.raises(TranscriptError, match="no segment 3 \\(the transcript has 1\\)"):
        transcript.segment(3)


@pytest.mark.parametrize(
    "path",
    sorted((REPO / "fixtures").rglob("*.ndjson")),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_fixture_in_the_repo_loads(path: Path) -> None:
    transcript = load_transcript(path)
    assert transcript.segments
    if transcript.header.synthetic:
        assert transcript.header.notes, "a synthetic transcript says why in notes"
