"""A running core + session manager with the stand-in provider, for supervisor tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from supervisor.manager import ReaperPolicy, RestartPolicy, SessionManager
from supervisor.providers import ProviderSettings, standin_settings
from t3orch.cli.polling import until
from t3orch.commands.specs import CreateThread
from t3orch.core import Core, open_core
from t3orch.store.open import Synchronous


@attrs.define
class Rig:
    core: Core
    manager: SessionManager

    async def thread(self, provider: str = "standin", cwd: str = "/tmp") -> str:
        res = await self.core.service.create_thread(CreateThread(provider=provider, cwd=cwd))  # type: ignore[arg-type]
        return str(res.result["threadId"])

    def row(self, kind: str, id: str) -> Any:
        with self.core.reader.snapshot():
            row = self.core.reader.row(kind, id)
        return None if row is None else row.decode()

    def rows(self, kind: str, thread_id: str | None = None) -> list[Any]:
        with self.core.reader.snapshot():
            return [r.decode() for r in self.core.reader.rows(kind, thread_id=thread_id)]

    async def wait_run(
        self, run_id: str, statuses: tuple[str, ...] = ("completed",), within: float = 20
    ) -> Any:
        with trio.fail_after(within):
            while True:
                run = self.row("run", run_id)
                if run is not None and run.status in statuses:
                    return run
                await trio.sleep(0.02)

    async def wait_for(self, predicate: Any, within: float = 20) -> Any:
        return await until(predicate, within, every=0.02)


@asynccontextmanager
async def rig(
    db: Path,
    *,
    providers: dict[str, ProviderSettings] | None = None,
    restart: RestartPolicy | None = None,
    reaper: ReaperPolicy | None = None,
    synchronous: Synchronous = "NORMAL",
    fsync: Callable[[int], None] = os.fsync,
    **manager_options: Any,
) -> AsyncIterator[Rig]:
    async with open_core(db, synchronous=synchronous, fsync=fsync) as core:
        manager = SessionManager(
            core=core.service,
            reader=core.reader,
            providers=providers or {"standin": standin_settings()},
            restart=restart or RestartPolicy(),
            reaper=reaper or ReaperPolicy(),
            **manager_options,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            try:
                yield Rig(core, manager)
            finally:
                manager.stop_all()
                with trio.move_on_after(15):
                    while manager.runners:  # noqa: ASYNC110 - runners leave by themselves
                        await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
