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
from t3orch.provider_events import ProviderEvent


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
        events: trio.MemorySendChannel[ProviderEvent],
        raw: RawFrameSink,
    ) -> AsyncIterator[ClaudeRuntime]:
        """A runtime for the block: a reader per process, a forwarder of events.

        Leaving the block kills every process the runtime started, waits (bounded)
        until each is reaped and its RuntimeExited is queued, and flushes the
        queued events to ``events`` (bounded too: a consumer that stopped reading
        cannot hold teardown up).
        """
        async with trio.open_nursery() as nursery:
            runtime = self.runtime_class(config, launcher, raw, self.options, nursery)
            nursery.start_soon(runtime.forward, events)
            try:
                yield runtime
            finally:
                with trio.CancelScope(shield=True):
                    await runtime.shutdown()
                nursery.cancel_scope.cancel()
