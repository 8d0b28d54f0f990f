"""Commands go to the daemon that owns their thread.

A thread's runs run on its owner's machine (its cwd, its provider logins), so a
command that acts on a live runtime — send, steer, interrupt, an answer, a switch,
a setting, a rollback, a delete — is carried to the owner's API when another
daemon owns the thread (:mod:`t3orch.fleet.forward`), and refused with the
owner's host named while that daemon is offline. Records that need no runtime
(archive, fork, merge-back, handoffs) are written by whichever daemon is asked:
the log is shared. A thread without an owner (from before owners were recorded)
is the local daemon's, as reconciliation counts it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs

from t3orch.api.operations import Operations, SendMode
from t3orch.domain.request import RuntimeRequest
from t3orch.domain.run import Run
from t3orch.domain.thread import AppThread
from t3orch.domain.vocab import ProviderKind, RuntimeMode
from t3orch.fleet.forward import forward
from t3orch.fleet.members import Membership
from t3orch.service import CommandResult
from t3orch.store.errors import CommandRejected
from t3orch.store.interface import DaemonRecord, ReadModel


@attrs.define
class RoutedOperations:
    """:class:`Operations` that runs what this daemon owns and forwards the rest."""

    local: Operations
    membership: Membership
    reader: ReadModel

    def _thread_owner(self, thread_id: str) -> str | None:
        with self.reader.snapshot():
            thread = self.reader.get(AppThread, thread_id)
        return thread.owner_daemon_id if thread is not None else None

    def _thread_of(self, kind: type[Run] | type[RuntimeRequest], id: str) -> str | None:
        with self.reader.snapshot():
            found: Run | RuntimeRequest | None = self.reader.get(kind, id)
        return found.thread_id if found is not None else None

    async def _remote_owner(self, thread_id: str | None) -> DaemonRecord | None:
        """The other daemon that owns the thread, online; None when it is ours (or
        unknown: the local command then says what is wrong with it)."""
        owner = self._thread_owner(thread_id) if thread_id is not None else None
        if owner is None or owner == self.membership.daemon_id:
            return None
        record = await self.membership.lookup(owner)
        if record is None:
            raise CommandRejected(
                "owner_unknown",
                f"thread {thread_id} is owned by daemon {owner}, which is not in the fleet's "
                "registry (it never served on this log)",
            )
        now = self.membership.clock()
        if not record.online(now):
            raise CommandRejected(
                "owner_offline",
                f"thread {thread_id} is owned by the daemon on {record.host} ({owner}), which "
                f"is offline (last heartbeat {now - record.heartbeat_at:.0f}s ago); its runs "
                f"go on when that daemon returns",
            )
        if record.api_url == self.membership.me.api_url:
            # Two daemons advertising one address (``daemon.advertise_host``): forwarding
            # would come back here, again and again.
            raise CommandRejected(
                "owner_unreachable",
                f"thread {thread_id} is owned by the daemon on {record.host} ({owner}), which "
                f"registered this daemon's own address ({record.api_url}): check "
                "daemon.advertise_host on both",
            )
        return record

    async def _route(
        self,
        thread_id: str | None,
        method: str,
        params: dict[str, Any],
        here: Callable[[], Awaitable[CommandResult]],
    ) -> CommandResult:
        """``method`` on the thread's owner when another daemon owns it, else ``here()``."""
        if owner := await self._remote_owner(thread_id):
            return await forward(owner, method, params)
        return await here()

    async def send_message(
        self, thread_id: str, text: str, *, command_id: str, mode: SendMode
    ) -> CommandResult:
        params = {"threadId": thread_id, "text": text, "commandId": command_id, "mode": mode}
        return await self._route(
            thread_id,
            "run.send",
            params,
            partial(self.local.send_message, thread_id, text, command_id=command_id, mode=mode),
        )

    async def interrupt_run(self, run_id: str, *, command_id: str) -> CommandResult:
        return await self._route(
            self._thread_of(Run, run_id),
            "run.interrupt",
            {"runId": run_id, "commandId": command_id},
            partial(self.local.interrupt_run, run_id, command_id=command_id),
        )

    async def respond(
        self,
        request_id: str,
        decision: str,
        *,
        message: str | None,
        answers: dict[str, str] | None,
        command_id: str,
    ) -> CommandResult:
        params = {
            "requestId": request_id,
            "decision": decision,
            "message": message,
            "answers": answers,
            "commandId": command_id,
        }
        here = partial(
            self.local.respond,
            request_id,
            decision,
            message=message,
            answers=answers,
            command_id=command_id,
        )
        thread_id = self._thread_of(RuntimeRequest, request_id)
        return await self._route(thread_id, "request.respond", params, here)

    async def switch_provider(
        self, thread_id: str, provider: ProviderKind, *, command_id: str
    ) -> CommandResult:
        return await self._route(
            thread_id,
            "thread.switchProvider",
            {"threadId": thread_id, "provider": provider, "commandId": command_id},
            partial(self.local.switch_provider, thread_id, provider, command_id=command_id),
        )

    async def configure_thread(
        self,
        thread_id: str,
        *,
        cwd: str | None,
        model: str | None,
        runtime_mode: RuntimeMode | None,
        command_id: str,
    ) -> CommandResult:
        params = {
            "threadId": thread_id,
            "cwd": cwd,
            "model": model,
            "runtimeMode": runtime_mode,
            "commandId": command_id,
        }
        here = partial(
            self.local.configure_thread,
            thread_id,
            cwd=cwd,
            model=model,
            runtime_mode=runtime_mode,
            command_id=command_id,
        )
        return await self._route(thread_id, "thread.configure", params, here)

    async def rollback(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        command_id: str,
        dry_run: bool,
        allow_shared_work_tree: bool,
        expect_work_tree: str | None,
    ) -> CommandResult:
        params = {
            "threadId": thread_id,
            "checkpointId": checkpoint_id,
            "commandId": command_id,
            "dryRun": dry_run,
            "allowSharedWorkTree": allow_shared_work_tree,
            "expectWorkTree": expect_work_tree,
        }
        here = partial(
            self.local.rollback,
            thread_id,
            checkpoint_id,
            command_id=command_id,
            dry_run=dry_run,
            allow_shared_work_tree=allow_shared_work_tree,
            expect_work_tree=expect_work_tree,
        )
        return await self._route(thread_id, "thread.rollback", params, here)

    async def delete_thread(self, thread_id: str, *, command_id: str) -> CommandResult:
        return await self._route(
            thread_id,
            "thread.delete",
            {"threadId": thread_id, "commandId": command_id},
            partial(self.local.delete_thread, thread_id, command_id=command_id),
        )

    def status(self) -> dict[str, Any]:
        now = self.membership.clock()
        fleet = [
            {
                "daemonId": d.daemon_id,
                "host": d.host,
                "version": d.version,
                "pid": d.pid,
                "apiUrl": d.api_url,
                "online": d.online(now),
                "heartbeatAgoS": round(now - d.heartbeat_at, 1),
            }
            for d in self.membership.known.values()
        ]
        me = self.membership.me
        return {
            **self.local.status(),
            "daemonId": me.daemon_id,
            "host": me.host,
            "fleet": fleet,
        }
