"""Gates on what a suite's trials cost: money, tokens, latency, retries, an agent's turns and tool calls.

The figures come from the suite's totals (``judge.totals``), which count them already: ``cost`` (needs
``--gym-price-in``/``--gym-price-out``), the mean input/output/total tokens per trial that reported usage,
the latency percentiles of the trials run in this session, ``retry_rate`` (attempts beyond the first, per
trial) and, for an agent, the mean turns (model calls) and tool calls per trial. ``delta(<metric>)``
compares a figure with the one stored in the suite's baseline: ``delta(mean_output_tokens) <= 10%`` is the
relative change in percent, ``delta(p90_latency_s) <= 0.5`` the change in the metric's own unit. A point
comparison: these are what the run spent, not estimates of a rate. A figure that cannot be measured (no
prices, no usage, no baseline figure) fails its gate, saying why. Pure, no I/O.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping

from pytest_gym.judge.gates import EFFICIENCY_METRICS, Gate, GateResult
from pytest_gym.judge.totals import SuiteTotals

Figures = dict[str, float | None]

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}

#: Why a figure is missing, by metric.
_MISSING = {
    "cost": "no cost: give the prices (--gym-price-in and --gym-price-out, per million tokens)",
    "tokens": "no trial reported token usage (Gym's response.usage)",
    "latency": "no trial was rolled out in this session (reused or re-scored trials have no latency)",
    "steps": "no trial's answer had output items to count turns and tool calls in",
    "trials": "no trial",
}


def _mean(total: int | None, count: int) -> float | None:
    return None if total is None or count <= 0 else total / count


def figures(totals: SuiteTotals | None) -> Figures:
    """The suite's efficiency figures from its totals (None where a figure cannot be measured)."""
    if totals is None:
        return dict.fromkeys(EFFICIENCY_METRICS)
    usage = totals.trials_with_usage
    steps = totals.trials_with_steps
    return {
        "cost": totals.cost,
        "mean_input_tokens": _mean(totals.input_tokens, usage),
        "mean_output_tokens": _mean(totals.output_tokens, usage),
        "mean_total_tokens": _mean(totals.total_tokens, usage),
        "p50_latency_s": totals.latency_p50_s,
        "p90_latency_s": totals.latency_p90_s,
        "p99_latency_s": totals.latency_p99_s,
        "retry_rate": totals.retries / totals.trials if totals.trials else None,
        "mean_turns": _mean(totals.turns, steps),
        "mean_tool_calls": _mean(totals.tool_calls, steps),
    }


def _why_missing(metric: str) -> str:
    if metric == "cost":
        return _MISSING["cost"]
    if metric.endswith("_tokens"):
        return _MISSING["tokens"]
    if metric.endswith("latency_s"):
        return _MISSING["latency"]
    if metric in ("mean_turns", "mean_tool_calls"):
        return _MISSING["steps"]
    return _MISSING["trials"]


def _number(value: float) -> str:
    return f"{value:.6g}"


def _threshold(gate: Gate) -> str:
    shown = f"{gate.threshold:g}"
    return f"{gate.op} {shown}{'%' if gate.percent else ''}"


def evaluate_efficiency(
    gate: Gate, current: Mapping[str, float | None], baseline: Mapping[str, float | None] | None, no_baseline: str
) -> GateResult:
    """Judge one efficiency gate on this run's figures (and, for ``delta``, the baseline's).

    ``no_baseline`` says why there is no baseline figure to compare with (no --gym-baseline, this run writes it).
    """
    metric = gate.metric
    value = current.get(metric)
    if value is None or not math.isfinite(value):
        return GateResult(gate, None, False, f"{gate.label}: {_why_missing(metric)}")
    if not gate.delta:
        passed = _OPS[gate.op](value, gate.threshold)
        verdict = "" if passed else ", required"
        return GateResult(gate, value, passed, f"{metric} = {_number(value)}{verdict} {_threshold(gate)}")
    if baseline is None:
        return GateResult(gate, None, False, f"{gate.label}: {no_baseline}")
    before = baseline.get(metric)
    if before is None or not math.isfinite(before):
        why = "the baseline stores no such figure (written before pytest-gym kept it, or it was not measured)"
        return GateResult(gate, None, False, f"{gate.label}: {why}; update the baseline (--gym-update-baseline)")
    change = value - before
    if gate.percent:
        if before == 0:
            change = 0.0 if value == 0 else math.copysign(math.inf, value)
        else:
            change = 100.0 * change / abs(before)
    passed = _OPS[gate.op](change, gate.threshold)
    shown = f"{change:+.4g}{'%' if gate.percent else ''}" if math.isfinite(change) else "+inf% (from 0)"
    verdict = "" if passed else ", required"
    reason = (
        f"{gate.metric_label} = {shown} ({_number(value)} now, {_number(before)} in the baseline){verdict} "
        f"{_threshold(gate)}"
    )
    return GateResult(gate, change if math.isfinite(change) else None, passed, reason)
