"""What a suite's trials cost: tokens, latency percentiles, retries and (given prices) money. Pure, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Prices are per this many tokens, as model providers quote them.
PRICE_UNIT = 1_000_000


@dataclass(frozen=True)
class TrialCost:
    """One trial's share: its latency (None: not run in this session, e.g. reused), attempts and token usage."""

    latency_s: float | None
    attempts: int = 1
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    #: An agent's model calls and tool calls (None: the answer had no output items to count).
    turns: int | None = None
    tool_calls: int | None = None


@dataclass(frozen=True)
class SuiteTotals:
    """Sums over a suite's trials.

    Tokens are summed over the trials that reported usage (``trials_with_usage``); None when
    none did. Latency percentiles are nearest-rank over the trials run in this session.
    ``retries`` counts attempts beyond the first. ``cost`` is None unless a price was given.
    ``turns`` and ``tool_calls`` are summed over the ``trials_with_steps`` whose answers had output items.
    """

    trials: int
    trials_with_usage: int
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    latency_max_s: float | None
    latency_sum_s: float
    retries: int
    cost: float | None
    trials_with_steps: int = 0
    turns: int | None = None
    tool_calls: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (the smallest value with at least ``q`` of the values at or below it)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def _sum(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def suite_totals(
    trials: Sequence[TrialCost], price_in: float | None = None, price_out: float | None = None
) -> SuiteTotals:
    """Totals of ``trials``; ``price_in``/``price_out`` per million input/output tokens (a price not given counts 0)."""
    latencies = sorted(t.latency_s for t in trials if t.latency_s is not None)
    with_usage = [t for t in trials if t.input_tokens is not None or t.output_tokens is not None or t.total_tokens]
    input_tokens = _sum([t.input_tokens for t in with_usage])
    output_tokens = _sum([t.output_tokens for t in with_usage])
    total_tokens = _sum([t.total_tokens for t in with_usage])
    if total_tokens is None and (input_tokens is not None or output_tokens is not None):
        total_tokens = (input_tokens or 0) + (output_tokens or 0)
    with_steps = [t for t in trials if t.turns is not None]
    cost = None
    if (price_in is not None or price_out is not None) and with_usage:
        cost = ((input_tokens or 0) * (price_in or 0.0) + (output_tokens or 0) * (price_out or 0.0)) / PRICE_UNIT
    return SuiteTotals(
        trials=len(trials),
        trials_with_usage=len(with_usage),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=total_tokens,
        latency_p50_s=percentile(latencies, 0.50) if latencies else None,
        latency_p90_s=percentile(latencies, 0.90) if latencies else None,
        latency_p99_s=percentile(latencies, 0.99) if latencies else None,
        latency_max_s=latencies[-1] if latencies else None,
        latency_sum_s=math.fsum(latencies),
        retries=sum(max(0, t.attempts - 1) for t in trials),
        cost=cost,
        trials_with_steps=len(with_steps),
        turns=_sum([t.turns for t in with_steps]),
        tool_calls=_sum([t.tool_calls for t in with_steps]),
    )
