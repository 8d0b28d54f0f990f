"""``t3orch fork``, ``switch-provider`` and ``handoffs`` against a running API."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from t3orch import gitstore
from t3orch.commands.specs import CreateThread
from tests.api.support import running_api
from tests.api.test_cli import Cli, _play


async def test_fork_switch_and_handoffs(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        code, out, err = await cli("thread", "new", "--provider", "standin", "--cwd", ".")
        assert code == 0, err
        tid = out.strip()
        code, out, _ = await cli("send", tid, "hello there")
        run1 = out.strip()
        await _play(api, tid, run1, "completed", "hi back")

        code, out, err = await cli("fork", tid, "--title", "experiment")
        assert code == 0, err
        fork = out.strip()
        assert fork.startswith("thr_") and fork != tid
        code, out, _ = await cli("show", fork)
        assert "you: hello there" in out and "hi back" in out
        assert "Forked from conversation" in out
        detail = await cli.json("show", fork)
        assert detail["thread"]["lineage"]["parentThreadId"] == tid
        assert detail["turnItems"] == []
        code, _, err = await cli("fork", tid, "--run", "run_nope")
        assert code == 3 and "no run" in err

        code, out, err = await cli("switch-provider", tid, "claude")
        assert code == 0, err
        assert "standin → claude" in out and "new provider thread" in out
        code, out, _ = await cli("send", tid, "second")
        run2 = out.strip()
        session = await api.core.service.open_session(tid)
        assert session.provider == "claude" and session.provider_thread_id is not None
        text = await api.core.service.prepare_handoff(run2, session.provider_thread_id)
        assert text is not None and "User: hello there" in text
        code, out, _ = await cli("handoffs", tid)
        assert "full_thread_summary" in out and "1-1" in out
        code, out, _ = await cli("handoffs", tid, "--text")
        assert "User: hello there" in out
        (handoff,) = await cli.json("handoffs", tid)
        assert handoff["targetRunId"] == run2
        code, out, _ = await cli("show", tid)
        assert "handoff" in out


async def test_checkpoints_diff_and_rollback_commands(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    await trio.run_process(["git", "init", "-q", str(repo)])
    async with running_api() as api:
        cli = Cli(api, capsys)
        svc = api.core.service
        tid = (await svc.create_thread(CreateThread(provider="standin", cwd=str(repo)))).result[
            "threadId"
        ]
        root = await gitstore.work_tree_root(repo)
        assert root is not None
        ids = []
        for n, content in enumerate(["one\n", "one\ntwo\nthree\n"], start=1):
            (repo / "f.txt").write_text(content)
            run = (await svc.send_message(tid, f"run {n}")).result["runId"]
            await _play(api, tid, run, "completed", "ok")
            ref = gitstore.checkpoint_ref(tid, n)
            base = await gitstore.resolve(root, gitstore.checkpoint_ref(tid, n - 1))
            commit, _ = await gitstore.capture(root, ref, "cp", base)
            files = await gitstore.numstat(root, base, commit)
            res = await svc.record_checkpoint(run, str(repo), ref, files, ids[-1] if ids else None)
            ids.append(res.result["checkpointId"])
        code, out, _ = await cli("checkpoints", tid)
        assert code == 0 and ids[0] in out and "1 files +2 -0" in out
        code, out, _ = await cli("diff", ids[0], ids[1])
        assert code == 0 and "f.txt" in out and "+three" in out
        doc = await cli.json("diff", ids[0], ids[1])
        assert doc["files"] == [{"path": "f.txt", "additions": 2, "deletions": 0}]
        code, _, err = await cli("rollback", tid, "--to", ids[0])
        assert code == 3 and "supervisor" in err

        plain = await svc.create_thread(CreateThread(provider="standin", cwd=str(tmp_path)))
        code, out, _ = await cli("checkpoints", plain.result["threadId"])
        assert code == 0 and "checkpoints disabled" in out


async def test_merge_back_and_handoff_regenerate(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        svc = api.core.service
        code, out, err = await cli("thread", "new", "--provider", "standin", "--cwd", ".")
        tid = out.strip()
        run1 = (await svc.send_message(tid, "base")).result["runId"]
        await _play(api, tid, run1, "completed", "ok")
        code, out, err = await cli("fork", tid)
        fork = out.strip()
        frun = (await svc.send_message(fork, "try GUAVA")).result["runId"]
        await _play(api, fork, frun, "completed", "GUAVA works")

        code, out, err = await cli("merge-back", tid)
        assert code == 3 and "not a fork" in err
        code, out, err = await cli("merge-back", fork, "--run", "run_nope")
        assert code == 3 and "no run 'run_nope'" in err
        code, out, err = await cli("merge-back", fork)
        assert code == 0, err
        assert f"runs 1-1 of {fork} go to {tid}" in out

        run2 = (await svc.send_message(tid, "next")).result["runId"]
        session = await svc.open_session(tid)
        assert session.provider_thread_id is not None
        text = await svc.prepare_handoff(run2, session.provider_thread_id)
        assert text is not None and "GUAVA works" in text
        (handoff,) = await cli.json("handoffs", tid)
        assert handoff["strategy"] == "delta_since_target_last_seen"

        code, out, err = await cli("handoff", "regenerate", handoff["id"], "--full")
        assert code == 0, err
        assert f"supersedes {handoff['id']}" in out and "full_thread_summary" in out
        code, out, err = await cli("handoff", "regenerate", handoff["id"])
        assert code == 3 and "already superseded" in err
        code, out, err = await cli("handoff", "regenerate", "hof_nope")
        assert code == 3 and "no context handoff 'hof_nope'" in err
        code, out, _ = await cli("handoffs", tid)
        assert "superseded" in out and "pending" in out


async def test_thread_set_changes_the_next_runs_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    async with running_api() as api:
        cli = Cli(api, capsys)
        code, out, err = await cli("thread", "new", "--provider", "standin", "--cwd", "/tmp")
        assert code == 0, err
        tid = out.strip()
        code, out, err = await cli(
            "thread", "set", tid, "--cwd", str(tmp_path), "--runtime-mode", "full-access"
        )
        assert code == 0, err
        assert (
            f"cwd /tmp → {tmp_path}" in out and "runtimeMode approval-required → full-access" in out
        )
        code, out, _ = await cli("thread", "set", tid, "--cwd", str(tmp_path))
        assert "nothing changed" in out
        detail = await cli.json("show", tid)
        assert detail["thread"]["cwd"] == str(tmp_path)
        assert detail["thread"]["runtimeMode"] == "full-access"
        code, _, err = await cli("thread", "set", "thr_nope", "--model", "m")
        assert code == 3 and "no thread 'thr_nope'" in err
