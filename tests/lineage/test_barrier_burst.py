"""The completion barrier when a turn's frames arrive in one burst.

Issue #7's order at a run's end: the turn's items committed, then the checkpoint,
then the terminal event. The runner queues a turn's mid-turn batches for the writer
without awaiting them, so when the provider's frames come with no delay, its turn
end can reach the runner in a batch of its own while earlier batches are still
uncommitted. The barrier must wait for those, or the checkpointer reads a run that
has not started yet (it once skipped it: a completed run with no checkpoint and no
diagnostic).

The Codex side is the first segment of a recorded lineage transcript (one turn). To
make the burst deterministic, only the provider transport and the database are
touched: another connection holds the SQLite write lock from the moment our side
sends ``turn/start`` (any process could), the transport hands out ``turn/completed``
only once every task is blocked (the runner has everything before it queued), and
the lock is released once every task is blocked again.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import trio
from trio.testing import wait_all_tasks_blocked

from adapters.transcript import load_transcript, parse_transcript
from adapters.transport import LaunchSpec, OversizedLine, ProviderProcess
from fixtures.fakes.codex_home import make_work_dir
from fixtures.record.supervised import TranscriptLaunchers
from supervisor.providers import ProviderSettings
from t3orch.domain.turn_items import CheckpointItem
from t3orch.domain.vocab import ProviderKind
from tests.supervisor.support import Rig, rig

#: One Codex turn (run 1 of the recorded handoff scenario), then a graceful close.
RECORDED = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "lineage"
    / "codex_claude_codex_delta_handoff_reaches_the_model.codex.ndjson"
)
PROVIDERS = {"codex": ProviderSettings(command=["codex"], model="mock-model")}


@attrs.define(eq=False)
class _Burst:
    """The replayed Codex process; the turn's end is handed out as a batch of its own."""

    inner: ProviderProcess
    gate: _Gate

    @property
    def pid(self) -> int | None:
        return self.inner.pid

    async def send_line(self, line: bytes) -> None:
        if json.loads(line).get("method") == "turn/start":
            self.gate.lock()
        await self.inner.send_line(line)

    async def receive_line(self) -> bytes | OversizedLine | None:
        line = await self.inner.receive_line()
        if isinstance(line, bytes) and json.loads(line).get("method") == "turn/completed":
            await self.gate.turn_ends()
        return line

    async def close_stdin(self) -> None:
        await self.inner.close_stdin()

    async def wait(self) -> Any:
        return await self.inner.wait()

    def stderr_tail(self) -> str:
        return self.inner.stderr_tail()

    async def kill(self) -> None:
        await self.inner.kill()


@attrs.define(eq=False)
class _Gate:
    db: Path
    nursery: trio.Nursery | None = None
    held: sqlite3.Connection | None = None
    #: The turn's end was handed out while nothing of the turn had committed.
    burst: bool = False

    def lock(self) -> None:
        self.held = sqlite3.connect(self.db, isolation_level=None)
        self.held.execute("BEGIN IMMEDIATE")

    async def turn_ends(self) -> None:
        if self.held is None or self.nursery is None:
            return
        await wait_all_tasks_blocked()
        self.burst = True
        self.nursery.start_soon(self._release)

    async def _release(self) -> None:
        await wait_all_tasks_blocked()
        assert self.held is not None
        self.held.execute("ROLLBACK")
        self.held.close()
        self.held = None


@attrs.define(eq=False)
class _BurstLauncher:
    inner: Any
    gate: _Gate

    @property
    def current(self) -> None:
        return None

    async def launch(self, spec: LaunchSpec) -> ProviderProcess:
        return _Burst(await self.inner.launch(spec), self.gate)


@attrs.define
class _BurstLaunchers:
    replay: TranscriptLaunchers
    gate: _Gate

    def __call__(self, kind: ProviderKind, nursery: trio.Nursery) -> _BurstLauncher:
        self.gate.nursery = nursery
        return _BurstLauncher(self.replay(kind, nursery), self.gate)


def _one_turn(tmp_path: Path, drop: str | None = None) -> Path:
    """Segment 0 of the recording (its one turn), without inbound ``drop`` frames."""
    out = []
    for line in RECORDED.read_text().splitlines():
        step = json.loads(line)
        if step["step"] == "runtime_start":
            break
        if drop and step["step"] == "emit_inbound" and step["frame"].get("method") == drop:
            continue
        out.append(line)
    path = tmp_path / "one_turn.codex.ndjson"
    path.write_text("\n".join(out) + "\n")
    return path


async def _one_run(r: Rig, work: Path) -> tuple[str, Any]:
    tid = await r.thread("codex", cwd=str(work))
    sent = await r.manager.send_message(tid, "remember the word PAPAYA")
    run = await r.wait_run(sent.result["runId"], ("completed", "failed", "interrupted"))
    return tid, run


def _diagnostics(r: Rig) -> list[str]:
    with r.core.reader.snapshot():
        events = r.core.reader.read_events()
    return [e.payload.code for e in events if e.type == "provider.diagnostic"]


async def test_a_turn_in_one_burst_is_checkpointed_before_it_ends(tmp_path: Path) -> None:
    transcript = load_transcript(_one_turn(tmp_path))
    gate = _Gate(tmp_path / "e.db")
    launchers = _BurstLaunchers(TranscriptLaunchers({"codex": transcript}, speed=0), gate)
    async with rig(tmp_path / "e.db", providers=PROVIDERS, launcher_factory=launchers) as r:
        tid, run = await _one_run(r, make_work_dir(tmp_path / "work"))
        assert gate.burst, "the turn's end never came while the turn was uncommitted"
        assert run.status == "completed"
        # Taken at the barrier, so the completed run has it already: no waiting.
        assert run.checkpoint_id is not None, _diagnostics(r)
        with r.core.reader.snapshot():
            events = r.core.reader.read_thread_events(tid)
        seqs = {
            "items": [
                e.sequence
                for e in events
                if e.type == "turn_item.upserted"
                and e.payload.item.run_id == run.id
                and not isinstance(e.payload.item, CheckpointItem)
            ],
            "checkpoint": [
                e.sequence
                for e in events
                if e.type == "checkpoint.upserted" and e.payload.checkpoint.id == run.checkpoint_id
            ],
            "end": [
                e.sequence
                for e in events
                if e.type == "run.upserted"
                and e.payload.run.id == run.id
                and e.payload.run.status == "completed"
            ],
        }
        assert max(seqs["items"]) < min(seqs["checkpoint"]) < min(seqs["end"]), seqs
        assert "checkpoint_failed" not in _diagnostics(r)


async def test_a_turn_without_turn_started_is_still_checkpointed(tmp_path: Path) -> None:
    """A provider that never says its turn started: the completed run still gets one."""
    transcript = parse_transcript(_one_turn(tmp_path, drop="turn/started").read_text().splitlines())
    launchers = TranscriptLaunchers({"codex": transcript}, speed=0)
    async with rig(tmp_path / "e.db", providers=PROVIDERS, launcher_factory=launchers) as r:
        _, run = await _one_run(r, make_work_dir(tmp_path / "work"))
        assert run.status == "completed" and run.started_at is None
        assert run.checkpoint_id is not None, _diagnostics(r)
