"""The Claude Code CLI adapter: stream-json over stdio, our own control protocol client.

Modules, one concept each: ``frames`` (decoding stdout lines), ``control`` (both
halves of the control protocol), ``tools`` (tool names → items and request
kinds), ``mapper`` (frames → canonical events, deterministic), ``options`` (the
command line), ``runtime`` (one CLI process per thread), ``adapter`` (the
``ProviderAdapter``), ``replay_ops`` (transcript → replay operations).
"""

from adapters.claude.adapter import ClaudeAdapter
from adapters.claude.options import ClaudeOptions

__all__ = ["ClaudeAdapter", "ClaudeOptions"]
