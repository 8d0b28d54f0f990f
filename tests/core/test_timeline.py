"""The turn timeline (``t3orch/timeline.py``): off unless asked, stamps on one clock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from t3orch import timeline


@pytest.fixture
def restore_timeline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline, "_out", None)


@pytest.mark.usefixtures("restore_timeline")
def test_off_without_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("T3ORCH_TIMELINE", raising=False)
    timeline.start()
    timeline.stamp("api.send")
    assert timeline._out is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("restore_timeline")
def test_stamps_from_threads_on_the_monotonic_clock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "timeline.txt"
    monkeypatch.setenv("T3ORCH_TIMELINE", str(path))
    timeline.start()
    try:
        before = time.monotonic()
        timeline.stamp("api.send")
        thread = threading.Thread(target=timeline.stamp, args=("writer.committed",))
        thread.start()
        thread.join()
        after = time.monotonic()
    finally:
        assert timeline._out is not None
        timeline._out.close()
    stamps = timeline.read(str(path))
    assert [name for _, name in stamps] == ["api.send", "writer.committed"]
    assert all(before <= t <= after for t, _ in stamps)
