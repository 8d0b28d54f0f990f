"""Helpers for lineage tests: the stand-in driving every provider kind, frame capture."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Literal

import attrs
import msgspec

from adapters.protocol import ProviderAdapter
from supervisor.providers import StandinAdapter, standin_settings
from t3orch.domain.vocab import ProviderKind
from tests.supervisor.support import Rig, rig

#: Every kind is the stand-in (a Codex-shaped transcript), so switching always runs.
STANDIN_PROVIDERS = {
    "codex": standin_settings(),
    "claude": standin_settings(),
    "standin": standin_settings(),
}


def standin_for_every_kind(kind: ProviderKind) -> ProviderAdapter:
    return StandinAdapter()


def standin_rig(tmp_path: Path, **manager_options: Any) -> AbstractAsyncContextManager[Rig]:
    """The real supervisor and core on ``tmp_path/e.db``, every kind played by the stand-in."""
    return rig(
        tmp_path / "e.db",
        providers=STANDIN_PROVIDERS,
        adapter_factory=standin_for_every_kind,
        **manager_options,
    )


def handoff_of(r: Rig, run_id: str) -> Any:
    """The handoff a run got (its ``contextHandoffId``)."""
    return r.row("context_handoff", r.row("run", run_id).context_handoff_id)


def notes(r: Rig, code: str) -> list[Any]:
    """The committed ``provider.diagnostic`` payloads with ``code``."""
    return [
        e.payload
        for e in r.core.reader.read_events(0, 100_000)
        if e.type == "provider.diagnostic" and e.payload.code == code
    ]


async def send_completed(r: Rig, tid: str, text: str) -> str:
    """Send ``text`` on ``tid`` through the supervisor; the run id once it completed."""
    sent = await r.manager.send_message(tid, text)
    run_id = str(sent.result["runId"])
    run = await r.wait_run(run_id)
    assert run.status == "completed", run
    return run_id


async def there_and_back(r: Rig) -> tuple[str, str]:
    """A codex thread (run 1 says MANGO), on claude for run 2 (PEAR), back on codex for
    run 3, which gets a delta handoff: the thread's id and run 3's."""
    tid = await r.thread("codex")
    await send_completed(r, tid, "codex run 1 MANGO")
    await r.manager.switch_provider(tid, "claude")
    await send_completed(r, tid, "claude run 2 PEAR")
    await r.manager.switch_provider(tid, "codex")
    return tid, await send_completed(r, tid, "codex run 3")


@attrs.define
class FrameLog:
    """A raw-frame sink factory keeping every frame sent to a provider, per kind."""

    sent: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)

    def __call__(self, kind: ProviderKind, session_id: str) -> FrameLog._Sink:
        return FrameLog._Sink(self, kind)

    @attrs.define
    class _Sink:
        log: FrameLog
        kind: str
        n: int = 0

        def record(self, direction: Literal["incoming", "outgoing"], line: bytes) -> str:
            self.n += 1
            if direction == "outgoing":
                try:
                    frame = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    frame = None
                if isinstance(frame, dict):
                    self.log.sent.append((self.kind, frame))
            return f"raw_{self.n}"

    def turn_texts(self, kind: str | None = None) -> list[str]:
        """The text of every Codex-shaped ``turn/start`` sent (to ``kind``)."""
        out = []
        for k, frame in self.sent:
            if frame.get("method") == "turn/start" and (kind is None or k == kind):
                out.append(frame["params"]["input"][0]["text"])
        return out
