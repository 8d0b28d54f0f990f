"""Live text from the real binaries: a 50-delta reply reaches a ``threadDetail``
subscriber in many ``liveText`` frames, where the committed path gives a handful.

The real daemon (``run_daemon``) with real ``codex app-server`` / ``claude`` against
the loopback fake model servers (``STREAM: 50 50``: 50 one-word deltas at 50 Hz),
read over the Unix socket API as ``t3orch watch`` reads it (``ThreadView``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from t3orch.cli.client import ThreadView, connect
from t3orch.cli.environment import provider_environment
from t3orch.config import discover_claude, discover_codex
from t3orch.daemon import Daemon, run_daemon

TIMEOUT_S = 60.0
REPLY = "".join(f"word{i} " for i in range(50))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A Unix socket path has at most 107 bytes; pytest's tmp_path can be longer.
    d = Path(tempfile.mkdtemp(prefix="t3lt", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize(
    "provider",
    [
        pytest.param("codex", marks=pytest.mark.real_codex),
        pytest.param("claude", marks=pytest.mark.real_claude),
    ],
)
async def test_a_streamed_reply_arrives_live_in_many_frames(provider: str, short_dir: Path) -> None:
    if (discover_codex() if provider == "codex" else discover_claude()) is None:
        pytest.skip(f"the {provider} binary is not installed (./scripts/test installs it)")
    work = short_dir / "work"
    work.mkdir()
    await trio.run_process(["git", "init", "-q", str(work)])
    with provider_environment(work, short_dir, [provider]) as (config, kinds):
        assert kinds == [provider]
        async with trio.open_nursery() as nursery:
            daemon: Daemon = await nursery.start(run_daemon, config, short_dir / "state")
            with trio.fail_after(TIMEOUT_S):
                async with connect(short_dir / "state" / "api.sock") as client:
                    made = await client.call(
                        "thread.create",
                        {"commandId": "c1", "provider": provider, "cwd": str(work)},
                    )
                    tid = made["result"]["threadId"]
                    _, snap = await client.subscribe("threadDetail", tid)
                    view = ThreadView(snap)
                    sent = await client.call(
                        "run.send", {"commandId": "c2", "threadId": tid, "text": "STREAM: 50 50"}
                    )
                    run = sent["result"]["runId"]
                    live: list[dict[str, object]] = []
                    deltas = 0
                    shown: list[str] = []
                    while (r := view.runs.get(run)) is None or r["status"] != "completed":
                        note = await client.notification()
                        params = note["params"]
                        assert note["method"] != "resync", note
                        if note["method"] == "liveText":
                            live.append(params)
                            view.apply_live(params)
                            shown.append(view.shown_text(str(params["itemId"])))
                        elif note["method"] == "event":
                            event = params["event"]
                            view.apply(event, params.get("unchanged", ()))
                            if event["type"] == "turn_item.delta":
                                deltas += 1
            await daemon.shutdown()
            nursery.cancel_scope.cancel()
    assert live, "no liveText frame"
    item = str(live[0]["itemId"])
    assert {p["itemId"] for p in live} == {item}
    assert view.items[item]["text"].strip() == REPLY.strip()
    # Many live updates, each a longer prefix of the reply; the log stores a handful.
    assert len(live) >= 10, len(live)
    assert deltas <= 6, deltas
    assert all(REPLY.startswith(s) for s in shown)
    assert len(set(shown)) >= 10
