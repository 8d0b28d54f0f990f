"""A turn's token usage and cost from Claude's ``result`` frame.

``usage`` is the turn's (every model call of it), but ``total_cost_usd`` is the
process's running total (claude 2.1.327: 0.000075, then 0.00015 for two equal
turns; ``tests/cli/test_fakes.py``). The turn's cost is therefore the sum of
``model_usage_since_last_result[model].costUSD`` (this turn's share); only a
frame without it falls back to ``total_cost_usd``. ``input_tokens`` excludes cache reads and
writes; the canonical input count includes them.
"""

from __future__ import annotations

from typing import Any

from adapters.claude.frames import ResultFrame
from t3orch.domain.run import TokenUsage


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    return value if isinstance(value, int) else 0


def turn_usage(frame: ResultFrame) -> TokenUsage | None:
    usage = frame.usage
    if not usage:
        return None
    cached = _int(usage, "cache_read_input_tokens")
    inputs = _int(usage, "input_tokens") + cached + _int(usage, "cache_creation_input_tokens")
    output = _int(usage, "output_tokens")
    details = usage.get("output_tokens_details")
    thinking = _int(details, "thinking_tokens") if isinstance(details, dict) else 0
    return TokenUsage(
        input_tokens=inputs,
        cached_input_tokens=cached,
        output_tokens=output,
        reasoning_output_tokens=thinking,
        total_tokens=inputs + output,
        cost_usd=_cost(frame),
    )


def _cost(frame: ResultFrame) -> float | None:
    per_model = frame.model_usage_since_last_result
    if isinstance(per_model, dict) and per_model:
        costs = [
            m["costUSD"]
            for m in per_model.values()
            if isinstance(m, dict) and isinstance(m.get("costUSD"), int | float)
        ]
        if costs:
            return float(sum(costs))
    return frame.total_cost_usd
