"""The live-restore scenarios (issue 20) with a real provider binary against its loopback
fake model server, shared by the Codex and Claude test files: a daemon stopped mid-reply
(SIGKILL or SIGTERM) and restarted, and an approval pending across a restart."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest

from t3orch.cli.environment import config_toml, provider_environment
from t3orch.config import discover_claude, discover_codex
from t3orch.daemon import journal_coverage
from t3orch.domain.vocab import ProviderKind
from tests.daemon.support import Served, alive, cli_ok, events, rows, rpc, serve, wait_for

_DISCOVER = {"codex": discover_codex, "claude": discover_claude}


@attrs.frozen
class Held:
    """A work tree, a state dir and a config with live restore on, for ``provider``."""

    work: Path
    state: Path
    config: Path

    @contextmanager
    def daemon(self) -> Iterator[Served]:
        with serve(self.state, self.config, keep_holders=True) as d:
            d.wait_notify("READY=1")
            yield d

    def send(self, provider: ProviderKind, text: str) -> None:
        """A new thread on ``provider``, and a run of ``text`` on it."""
        params = {"commandId": "c1", "provider": provider, "cwd": str(self.work)}
        tid = rpc(self.state, "thread.create", params)["result"]["threadId"]
        rpc(self.state, "run.send", {"commandId": "c2", "threadId": tid, "text": text})

    def completed(self) -> None:
        wait_for(lambda: rows(self.state, "run")[0].status == "completed", 60)


@contextmanager
def held(tmp_path: Path, provider: ProviderKind) -> Iterator[Held]:
    """``provider`` against its fake; every agent is stopped at the end (``stop-agents``)."""
    if _DISCOVER[provider]() is None:
        pytest.skip(f"the {provider} binary is not installed (./scripts/test installs it)")
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    state = tmp_path / "state"
    with provider_environment(work, tmp_path, [provider]) as (config, _):
        path = tmp_path / "t3orch.toml"
        path.write_text("[daemon]\nreattach_grace_s = 60\n" + config_toml(config))
        try:
            yield Held(work, state, path)
        finally:
            cli_ok(state, "stop-agents")


def _stopped(d: Served, how: signal.Signals) -> None:
    d.proc.send_signal(how)
    code = d.proc.wait(timeout=30)
    if how is signal.SIGTERM:
        assert code == 0


def mid_reply_restart(
    tmp_path: Path,
    provider: ProviderKind,
    stop: signal.Signals,
    text: str,
    reply: str,
    *,
    down_s: float = 0.0,
) -> None:
    """``text`` makes the fake stream ``reply`` slowly; the daemon is stopped with ``stop``
    after the first delta (and stays down ``down_s``), the next one completes the run with
    every word once, and every frame the provider wrote is in the log (a turn sent twice
    would add frames the run never takes)."""
    with held(tmp_path, provider) as h:
        with h.daemon() as d:
            h.send(provider, text)
            wait_for(lambda: len(events(h.state, "turn_item.delta")) >= 1, 60)
            (session,) = [s for s in rows(h.state, "provider_session") if s.status != "stopped"]
            _stopped(d, stop)
            assert alive(session.pid)
        time.sleep(down_s)
        with h.daemon() as d2:
            h.completed()
            deltas = "".join(e.payload.text for e in events(h.state, "turn_item.delta"))
            assert deltas == reply, deltas
            time.sleep(1)  # the coalescer's window: the last offsets commit
            committed = {j.holder_id: j.offset for j in rows(h.state, "journal")}
            journaled, covered = journal_coverage(h.state, committed)
            assert journaled == covered > 0, (journaled, covered)
            _stopped(d2, signal.SIGTERM)
    assert not alive(session.pid)


def approval_across_restart(tmp_path: Path, provider: ProviderKind, command: str) -> None:
    """``command`` (with ``{made}`` for a file's path) makes the fake ask to run a shell
    command that creates the file; the daemon is SIGKILLed while the approval is pending,
    the next one answers it, and the command runs."""
    with held(tmp_path, provider) as h:
        made = h.work / "approved.txt"

        def request(status: str) -> Callable[[], list[object]]:
            return lambda: [r for r in rows(h.state, "runtime_request") if r.status == status]

        with h.daemon() as d:
            h.send(provider, command.format(made=made))
            (pending,) = wait_for(request("pending"), 60)
            _stopped(d, signal.SIGKILL)
        assert not made.exists()
        with h.daemon() as d2:
            # Still pending: the provider waits on the same request id.
            assert [r.id for r in request("pending")()] == [pending.id]
            answer = {"commandId": "c3", "requestId": pending.id, "decision": "accept"}
            rpc(h.state, "request.respond", answer)
            h.completed()
            assert made.exists()
            assert [r.id for r in request("resolved")()] == [pending.id]
            _stopped(d2, signal.SIGTERM)
