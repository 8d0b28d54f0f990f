"""A shared process's journal has every thread's frames (issue 21): whether a thread's
turn reached Codex is read from that thread's frames only."""

from __future__ import annotations

import json
from pathlib import Path

from adapters.codex.journal import turn_sent
from supervisor.holder.layout import HeldPaths
from supervisor.holder.wire import Kind, encode
from supervisor.reattach import SHARED_MARK, _journal_lines


def _journal(tmp_path: Path, shared: bool) -> HeldPaths:
    paths = HeldPaths(tmp_path / "h")
    paths.dir.mkdir()
    if shared:
        (paths.dir / SHARED_MARK).write_text("key")
    frames = [
        (Kind.IN, {"id": "a|3", "method": "turn/start", "params": {"threadId": "X"}}),
        (Kind.IN, {"id": "b|3", "method": "turn/start", "params": {"threadId": "Y"}}),
        (Kind.OUT, {"method": "turn/completed", "params": {"threadId": "Y"}}),
    ]
    data = b"".join(
        encode(kind, offset, json.dumps(body).encode())
        for offset, (kind, body) in enumerate(frames, 1)
    )
    paths.journal.write_bytes(data)
    return paths


def _sent(paths: HeldPaths, thread_ref: str) -> bool:
    """With every frame of the journal committed."""
    return turn_sent(_journal_lines(paths, thread_ref), 3, None)


def test_another_threads_turn_end_does_not_unsend_a_threads_turn(tmp_path: Path) -> None:
    paths = _journal(tmp_path, shared=True)
    # X's turn/start is in the journal, its turn still running: it was sent (a reattach
    # must not send it again), though Y's turn ended after it.
    assert _sent(paths, "X")
    assert not _sent(paths, "Z")
    assert _sent(paths, "Y") is False


def test_a_threads_turn_begun_after_a_point_is_sent_by_its_own_turn_start_only(
    tmp_path: Path,
) -> None:
    paths = _journal(tmp_path, shared=True)
    # Y's turn/start (2) is after 1 but not X's: begun after 1, X's turn was not sent.
    assert not turn_sent(_journal_lines(paths, "X"), 0, 1)
    assert turn_sent(_journal_lines(paths, "Y"), 0, 1)
    assert turn_sent(_journal_lines(paths, "X"), 0, 0)
