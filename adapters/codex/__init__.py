"""The Codex adapter: ``codex app-server`` (JSON-RPC over stdio) behind ``ProviderAdapter``."""

from adapters.codex.adapter import CodexAdapter, codex_argv
from adapters.codex.runtime import CodexOptions, CodexRuntime

__all__ = ["CodexAdapter", "CodexOptions", "CodexRuntime", "codex_argv"]
