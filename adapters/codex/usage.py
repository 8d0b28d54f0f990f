"""A turn's token usage from Codex's ``thread/tokenUsage/updated``.

Codex reports the thread's running ``total`` (and the ``last`` model call) after
each model call, and on a resumed thread it first repeats the last total it had
(under the previous turn's id). A turn's usage is therefore its last total minus
the total seen before its first report: summing ``last`` would count that
repeated report twice. Codex reports no cost.
"""

from __future__ import annotations

from typing import Any

from t3orch.domain.run import TokenUsage


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    return value if isinstance(value, int) else 0


def _usage(total: dict[str, Any], before: dict[str, Any]) -> TokenUsage:
    def diff(key: str) -> int:
        return max(0, _int(total, key) - _int(before, key))

    return TokenUsage(
        input_tokens=diff("inputTokens"),
        cached_input_tokens=diff("cachedInputTokens"),
        output_tokens=diff("outputTokens"),
        reasoning_output_tokens=diff("reasoningOutputTokens"),
        total_tokens=diff("totalTokens"),
    )


class TurnUsage:
    """Tracks the running totals per native thread and each app turn's share."""

    def __init__(self) -> None:
        self._latest: dict[str | None, dict[str, Any]] = {}
        self._before: dict[str, dict[str, Any]] = {}
        self._last: dict[str, dict[str, Any]] = {}

    def seen(
        self, thread: str | None, turn_id: str | None, token_usage: dict[str, Any], app_turn: bool
    ) -> None:
        total = token_usage.get("total")
        if not isinstance(total, dict):
            return
        if app_turn and turn_id is not None:
            self._before.setdefault(turn_id, self._latest.get(thread, {}))
            self._last[turn_id] = total
        self._latest[thread] = total

    def finish(self, turn_id: str | None) -> TokenUsage | None:
        """The turn's usage (None when Codex reported none); forgets the turn."""
        if turn_id is None:
            return None
        before = self._before.pop(turn_id, {})
        last = self._last.pop(turn_id, None)
        return None if last is None else _usage(last, before)
