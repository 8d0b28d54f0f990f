"""``ClaudeAdapter``: the :class:`~adapters.protocol.ProviderAdapter` for the ``claude`` CLI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from adapters.claude.options import ClaudeOptions
from adapters.claude.runtime import ClaudeRuntime
from adapters.protocol import RawFrameSink, RuntimeConfig
from adapters.transport import ProcessLauncher
from t3orch.domain.vocab import ProviderKind
from t3orch.ingest.queue import EventQueue


class ClaudeAdapter:
    kind: ProviderKind = "claude"

    def __init__(
        self,
        options: ClaudeOptions | None = None,
        *,
        runtime_class: type[ClaudeRuntime] = ClaudeRuntime,
    ) -> None:
        self.options = options or ClaudeOptions()
        # Replay subclasses the runtime to add transcript-only operations.
        self.runtime_class = runtime_class

    @asynccontextmanager
    async def open_runtime(
        self,
        config: RuntimeConfig,
        launcher: ProcessLauncher,
        events: EventQueue,
        raw: RawFrameSink,
    ) -> AsyncIterator[ClaudeRuntime]:
        """A runtime for the block: a reader per process, putting events on ``events``.

        Leaving the block kills every process the runtime started and waits
        (bounded) until each is reaped and its RuntimeExited is queued.
        """
        async with trio.open_nursery() as nursery:
            runtime = self.runtime_class(config, launcher, events, raw, self.options, nursery)
            try:
                if config.reattaching:
                    await runtime.reattach()
                yield runtime
            finally:
                with trio.CancelScope(shield=True):
                    await runtime.shutdown()
                nursery.cancel_scope.cancel()
