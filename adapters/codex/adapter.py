"""``CodexAdapter``: the :class:`~adapters.protocol.ProviderAdapter` for ``codex app-server``."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from adapters.codex.runtime import CodexOptions, CodexRuntime
from adapters.protocol import RawFrameSink, RuntimeConfig
from adapters.transport import ExitStatus, LaunchSpec, ProcessLauncher
from t3orch.domain.vocab import ProviderKind
from t3orch.ingest.queue import EventQueue

#: How long the forced teardown may spend reaping and reporting the exit.
TEARDOWN_S = 5.0


def codex_argv(config: RuntimeConfig) -> list[str]:
    """``config.command`` is the codex executable (plus any prefix); ``app-server`` is added."""
    argv = list(config.command)
    if "app-server" not in argv:
        argv.append("app-server")
    return [*argv, *config.extra_args]


class CodexAdapter:
    kind: ProviderKind = "codex"

    def __init__(self, options: CodexOptions | None = None) -> None:
        self.options = options or CodexOptions()

    def launch_spec(self, config: RuntimeConfig) -> LaunchSpec:
        return LaunchSpec(
            argv=codex_argv(config),
            env=dict(config.env),
            cwd=config.cwd,
            max_line_bytes=self.options.max_line_bytes,
        )

    @asynccontextmanager
    async def open_runtime(
        self,
        config: RuntimeConfig,
        launcher: ProcessLauncher,
        events: EventQueue,
        raw: RawFrameSink,
    ) -> AsyncIterator[CodexRuntime]:
        """Launch, initialize, run the reader; leaving the block kills and reaps the process.

        ``RuntimeExited`` is emitted when the process ends, whether it exits on
        its own (the reader sees EOF) or is killed by this teardown.
        """
        process = await launcher.launch(self.launch_spec(config))
        runtime = CodexRuntime(process, config, events, raw, self.options)
        body_error: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(runtime.run)
                if not config.reattaching:
                    await runtime.initialize()
                try:
                    yield runtime
                except trio.Cancelled:
                    raise
                except BaseException as exc:
                    # Re-raised below, outside the nursery: the caller sees its own
                    # exception, not an ExceptionGroup wrapping it.
                    body_error = exc
                nursery.cancel_scope.cancel()
            if body_error is not None:
                raise body_error
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(TEARDOWN_S):
                if not runtime.exited.is_set():
                    await process.kill()
                    status = await process.wait()
                    await runtime.report_exit(status)
            if not runtime.exited.is_set():
                # Reaping timed out: still say the runtime is gone.
                with trio.CancelScope(shield=True), trio.move_on_after(TEARDOWN_S):
                    await runtime.report_exit(ExitStatus(code=None, signal=int(signal.SIGKILL)))


__all__: Sequence[str] = ["CodexAdapter", "CodexOptions", "codex_argv"]
