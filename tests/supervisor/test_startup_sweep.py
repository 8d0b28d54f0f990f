"""The startup sweep on real processes: it kills a dead daemon's leftovers, and only those."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import psutil

from adapters.ownership import OWNER_ENV, OwnerMark, started_at
from supervisor.startup import sweep_orphans
from t3orch.core import Core, open_core
from t3orch.domain.provider import ProcessOwner
from tests.store.support import new_thread

#: A daemon that is gone: this pid, but a start time no process of it has.
DEAD = ProcessOwner(
    daemon_pid=os.getpid(), daemon_started_at=1.0, state_dir="/gone", state_dir_id="1:1"
)
HERE = ProcessOwner(
    daemon_pid=os.getpid(), daemon_started_at=2.0, state_dir="/here", state_dir_id="2:2"
)


def _start(pid: int) -> float:
    start = started_at(pid)
    assert start is not None, pid
    return start


@attrs.frozen
class Group:
    leader: subprocess.Popen[bytes]
    leader_started_at: float
    member: psutil.Process


@contextmanager
def provider_group(mark: ProcessOwner | None, *, leader_exits: bool) -> Iterator[Group]:
    """A provider stand-in: a session leader with a `sleep` in its group, as spawned by a daemon."""
    env = dict(os.environ)
    env.pop(OWNER_ENV, None)
    if mark is not None:
        env[OWNER_ENV] = OwnerMark(mark.daemon_pid, mark.daemon_started_at).token()
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & echo $!; read x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    assert leader.stdout is not None and leader.stdin is not None
    member = psutil.Process(int(leader.stdout.readline()))
    started = _start(leader.pid)
    if leader_exits:
        leader.stdin.close()
        leader.wait(timeout=10)  # reaped: the group lives on in its member only
    try:
        yield Group(leader, started, member)
    finally:
        # The leader first: once it is gone, init reaps the member.
        if leader.poll() is None:
            leader.kill()
        leader.wait(timeout=5)
        try:
            member.kill()
            member.wait(timeout=5)
        except psutil.Error:
            pass
        for stream in (leader.stdin, leader.stdout):
            if stream is not None and not stream.closed:
                stream.close()


def _sleeper(env: dict[str, str], *, new_session: bool) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=new_session)


async def _record(core: Core, group: Group, owner: ProcessOwner | None) -> None:
    svc = core.service
    svc.process_owner = owner
    binding = await svc.open_session(await new_thread(svc), provider="standin")
    await svc.record_process(binding.provider_session_id, group.leader.pid, group.leader_started_at)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def test_a_dead_leaders_group_member_is_swept(tmp_path: Path) -> None:
    with provider_group(DEAD, leader_exits=True) as g:
        async with open_core(tmp_path / "t.db", synchronous="NORMAL") as core:
            await _record(core, g, DEAD)
            result = await sweep_orphans(core.reader, me=HERE, grace_s=2.0)
        assert g.member.pid in result.killed
        assert not _alive(g.member)


async def test_a_group_without_the_owners_mark_is_left_alone(tmp_path: Path) -> None:
    # Same recorded pgid, members started after the leader, owner gone: but nothing
    # proves the group is the provider's and not a stranger's that reused the id.
    with provider_group(None, leader_exits=True) as g:
        async with open_core(tmp_path / "t.db", synchronous="NORMAL") as core:
            await _record(core, g, DEAD)
            result = await sweep_orphans(core.reader, me=HERE, grace_s=2.0)
        assert result.killed == []
        assert _alive(g.member)


async def test_processes_of_a_live_daemon_are_left_alone_and_the_copy_is_said(
    tmp_path: Path,
) -> None:
    original = _sleeper(dict(os.environ), new_session=False)  # the daemon that owns the group
    try:
        owner = ProcessOwner(
            daemon_pid=original.pid,
            daemon_started_at=_start(original.pid),
            state_dir="/original",
            state_dir_id="3:3",
        )
        with provider_group(owner, leader_exits=False) as g:
            async with open_core(tmp_path / "t.db", synchronous="NORMAL") as core:
                await _record(core, g, owner)
                result = await sweep_orphans(core.reader, me=HERE, grace_s=2.0)
            assert result.killed == []
            assert result.left_to_live_owner == [g.leader.pid]
            assert result.copy_of == [owner]
            assert _alive(g.member) and g.leader.poll() is None
    finally:
        original.kill()
        original.wait(timeout=5)


async def test_an_escaped_descendant_is_found_by_the_mark(tmp_path: Path) -> None:
    with provider_group(DEAD, leader_exits=True) as g:
        env = {**os.environ, OWNER_ENV: OwnerMark(DEAD.daemon_pid, DEAD.daemon_started_at).token()}
        escaped = _sleeper(env, new_session=True)
        try:
            async with open_core(tmp_path / "t.db", synchronous="NORMAL") as core:
                await _record(core, g, DEAD)
                result = await sweep_orphans(core.reader, me=HERE, grace_s=2.0)
            assert escaped.pid in result.killed
            assert escaped.wait(timeout=5) is not None
        finally:
            if escaped.poll() is None:
                escaped.kill()
            escaped.wait(timeout=5)


async def test_a_live_leader_with_a_dead_owner_is_swept_with_its_group(tmp_path: Path) -> None:
    with provider_group(DEAD, leader_exits=False) as g:
        async with open_core(tmp_path / "t.db", synchronous="NORMAL") as core:
            await _record(core, g, DEAD)
            result = await sweep_orphans(core.reader, me=HERE, grace_s=2.0)
        assert {g.leader.pid, g.member.pid} <= set(result.killed)
        assert g.leader.wait(timeout=5) is not None
        assert not _alive(g.member)


async def test_a_reused_leader_pid_is_left_alone(tmp_path: Path) -> None:
    # The recorded pid now names another process (its start time differs): that
    # process, and the group it leads, are a stranger's.
    with provider_group(None, leader_exits=False) as g:
        stranger = Group(g.leader, g.leader_started_at - 30.0, g.member)
        async with open_core(tmp_path / "t.db", synchronous="NORMAL") as core:
            await _record(core, stranger, DEAD)
            result = await sweep_orphans(core.reader, me=HERE, grace_s=2.0)
        assert result.skipped_reused == [g.leader.pid]
        assert result.killed == []
        assert g.leader.poll() is None and _alive(g.member)
