"""Claude-specific runtime options and the CLI command line built from them.

:class:`~adapters.protocol.RuntimeConfig` holds what every provider has (binary,
env, cwd, model, mode); what only Claude has (hooks, in-process MCP servers,
how sessions are named) lives here, on the adapter.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from adapters.claude.control import HookHandler, McpHandler, continue_hook, no_mcp_server
from adapters.protocol import RuntimeConfig

#: The stream-json command line (claude-cli notes §2); the binary comes first.
BASE_FLAGS: tuple[str, ...] = (
    "--output-format",
    "stream-json",
    "--verbose",
    "--input-format",
    "stream-json",
    "--permission-prompt-tool",
    "stdio",
    "--include-partial-messages",
    "--setting-sources=",
)


def new_session_id() -> str:
    return str(uuid.uuid4())


@attrs.frozen
class ClaudeOptions:
    #: ``initialize`` hooks: event name → ``[{"matcher", "hookCallbackIds", "timeout"?}]``.
    hooks: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
    hook_handler: HookHandler = continue_hook
    #: Names of in-process MCP servers (``type: sdk``) answered by ``mcp_handler``.
    mcp_servers: Sequence[str] = ()
    mcp_handler: McpHandler = no_mcp_server
    #: Names a new session: we choose its id (``--session-id``) so that
    #: ``open_thread`` can return the native thread ref before the first turn.
    session_id_factory: Callable[[], str] = new_session_id
    #: Also pass ``--resume-session-at <head>`` when resuming with a known head.
    resume_at_head: bool = False
    #: Bound on the graceful stop (stdin closed) before the process is killed.
    close_timeout_s: float = 10.0


def build_argv(
    config: RuntimeConfig,
    options: ClaudeOptions,
    *,
    session_id: str | None = None,
    resume: str | None = None,
    resume_at: str | None = None,
    fork: bool = False,
) -> list[str]:
    argv = [*config.command, *BASE_FLAGS]
    if config.model:
        argv += ["--model", config.model]
    if resume is not None:
        argv += ["--resume", resume]
        if resume_at is not None and options.resume_at_head:
            argv += ["--resume-session-at", resume_at]
        if fork:
            argv.append("--fork-session")
    if session_id is not None:
        argv += ["--session-id", session_id]
    if options.mcp_servers:
        servers = {name: {"type": "sdk", "name": name} for name in options.mcp_servers}
        argv += ["--mcp-config", json.dumps({"mcpServers": servers})]
    argv += list(config.extra_args)
    return argv
