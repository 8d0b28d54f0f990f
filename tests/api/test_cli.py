"""The CLI client against a running ``serve_api`` (in-process server, CLI in a thread)."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from t3orch.cli.main import main
from t3orch.domain.turn_items import AssistantMessage
from t3orch.provider_events import (
    ItemCompleted,
    ItemDelta,
    ItemStarted,
    TurnCompleted,
    TurnStarted,
)
from tests.api.support import TIMEOUT, Api, running_api
from tests.api.writes import open_request
from tests.store.support import new_thread

REPO = Path(__file__).resolve().parents[2]


class Cli:
    def __init__(self, api: Api, capsys: pytest.CaptureFixture[str]) -> None:
        self.api = api
        self.capsys = capsys

    async def __call__(self, *argv: str) -> tuple[int, str, str]:
        args = [*argv, "--state-dir", str(self.api.state_dir)]
        with trio.fail_after(TIMEOUT):
            code = await trio.to_thread.run_sync(partial(main, args), abandon_on_cancel=True)
        out, err = self.capsys.readouterr()
        return code, out, err

    async def json(self, *argv: str) -> Any:
        code, out, err = await self(*argv, "--json")
        assert code == 0, err
        return json.loads(out)


async def _queued_run(api: Api, thread_id: str) -> str:
    with trio.fail_after(TIMEOUT):
        while True:
            with api.core.reader.snapshot():
                runs = [r for r in api.core.reader.rows("run", thread_id=thread_id)]
            queued = [r.id for r in runs if r.status == "queued"]
            if queued:
                return queued[0]
            await trio.sleep(0.01)


async def _play(api: Api, thread_id: str, run_id: str, status: str, text: str) -> None:
    """What a provider would do for the run: stream a reply and end the turn."""
    svc = api.core.service
    session = await svc.open_session(thread_id)
    assert session.provider_thread_id is not None
    turn = await svc.begin_attempt(run_id, session.provider_thread_id)
    b = session.with_turn(turn)
    await svc.ingest(
        b,
        [
            TurnStarted(native_turn_ref="t"),
            ItemStarted(native_item_ref="m", content=AssistantMessage()),
        ],
    )
    for i in range(0, len(text), 4):
        await svc.ingest(b, [ItemDelta(native_item_ref="m", text=text[i : i + 4])])
        await trio.sleep(0.01)
    await svc.ingest(
        b,
        [
            ItemCompleted(native_item_ref="m", content=AssistantMessage(text=text)),
            TurnCompleted(native_turn_ref="t", status=status),  # type: ignore[arg-type]
        ],
    )


async def test_threads_send_show_and_status(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        code, out, err = await cli(
            "thread", "new", "--provider", "standin", "--cwd", ".", "--title", "demo"
        )
        assert code == 0, err
        tid = out.strip()
        assert tid.startswith("thr_")
        code, out, _ = await cli("threads")
        assert tid in out and "demo" in out and "standin" in out
        (entry,) = (await cli.json("threads"))["threads"]
        assert entry["thread"]["cwd"] == str(Path.cwd())
        code, out, _ = await cli("send", tid, "hello there")
        assert code == 0 and out.strip().startswith("run_")
        code, out, _ = await cli("show", tid)
        assert "you: hello there" in out and "run 1 · queued" in out
        detail = await cli.json("show", tid)
        assert detail["turnItems"][0]["text"] == "hello there"
        code, out, _ = await cli("status")
        assert code == 0 and f"{api.endpoints.port}" in out
        status = await cli.json("status")
        assert status["api"]["socket"] == str(api.endpoints.socket_path)
        code, out, _ = await cli("sessions")
        assert code == 0 and "SESSION" in out


async def test_send_wait_returns_when_the_run_ends(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        tid = await new_thread(api.core.service)
        result: list[tuple[int, str, str]] = []

        async def send() -> None:
            result.append(await cli("send", tid, "go", "--wait"))

        for status, expected in (("completed", 0), ("failed", 1)):
            result.clear()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                run_id = await _queued_run(api, tid)
                await _play(api, tid, run_id, status, "done!")
            code, out, err = result[0]
            assert code == expected, err
            assert out.strip() == run_id
            assert f"run {run_id} {status}" in err


async def test_send_wait_gives_up_after_its_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        tid = await new_thread(api.core.service)
        code, _, err = await Cli(api, capsys)("send", tid, "go", "--wait", "--timeout", "0.2")
        assert code == 1 and "still working" in err


async def test_requests_approve_deny_and_interrupt(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        tid = await new_thread(api.core.service)
        req = await open_request(api.core, tid)
        code, out, _ = await cli("requests")
        assert req["id"] in out and "command" in out
        assert [q["id"] for q in (await cli.json("requests"))["requests"]] == [req["id"]]
        # The request offers accept/decline: "accept and remember" is refused.
        code, _, err = await cli("approve", req["id"], "--remember")
        assert code == 3 and err.strip() == (
            f"t3orch approve: rejected: decision_not_offered: "
            f"request {req['id']} offers accept/decline, not 'acceptForSession'"
        )
        code, _, err = await cli("deny", req["id"], "--cancel")
        assert code == 3 and "decision_not_offered" in err and "'cancel'" in err
        code, out, _ = await cli("approve", req["id"])
        assert code == 0 and f"{req['id']}: accept" in out
        code, _, err = await cli("deny", req["id"])
        assert code == 3
        assert err.strip() == (
            f"t3orch deny: rejected: request_already_answered: "
            f"request {req['id']} was already answered (accept)"
        )
        code, _, err = await cli("interrupt", req["runId"])
        assert code == 3 and "no_supervisor" in err and len(err.strip().splitlines()) == 1
        code, _, err = await cli("show", "thr_missing")
        assert code == 3 and "unknown_thread" in err


async def test_watch_renders_live_items_until_idle(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        tid = await new_thread(api.core.service)
        await api.core.service.send_message(tid, "write a haiku")
        run_id = await _queued_run(api, tid)
        result: list[tuple[int, str, str]] = []
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                result.append(await cli("watch", tid, "--until-idle"))

            nursery.start_soon(watch)
            await trio.sleep(0.2)  # let it subscribe: the items below arrive live
            await _play(api, tid, run_id, "completed", "an old silent pond")
        code, out, err = result[0]
        assert code == 0, err
        lines = out.splitlines()
        assert "› you: write a haiku" in lines
        assert "● an old silent pond" in lines
        assert "── run 1 completed" in lines


def test_no_daemon_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["status"], ["threads", "--json"], ["send", "thr_x", "hi", "--wait"]):
        code = main([*argv, "--state-dir", str(tmp_path)])
        _, err = capsys.readouterr()
        assert code == 2
        assert err.count("\n") == 1 and "no t3orch daemon is running" in err


async def test_the_real_entry_point_and_env_vars() -> None:
    async with running_api() as api:
        env = {"T3ORCH_STATE_DIR": str(api.state_dir), "PATH": "/usr/bin:/bin"}
        with trio.fail_after(TIMEOUT * 3):
            proc = await trio.run_process(
                [sys.executable, "-m", "t3orch.cli.main", "status", "--json"],
                cwd=REPO,
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["api"]["websocket"]["port"] == api.endpoints.port


def test_a_bad_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[daemon]\nstate_dirr = 'x'\n")
    code = main(["status", "--config", str(cfg)])
    _, err = capsys.readouterr()
    assert code == 2 and "daemon.state_dirr: unknown key" in err
