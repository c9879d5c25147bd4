"""Suite gates such as ``pass@4 >= 0.9``: parsed by a small grammar (never eval) and judged on SuiteStats.

A gate on an interval bound that fails while the point estimate is on the good side is *undecided*:
it still fails (the evidence does not show the claim), and its reason says how many more tasks,
at the same mean, would let the bound clear (``intervals.tasks_needed``).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

from pytest_gym.judge.baseline import Comparison
from pytest_gym.judge.intervals import tasks_needed
from pytest_gym.judge.stats import SuiteStats

Metric = Literal[
    "mean_reward",
    "pass@",
    "pass^",
    "error_rate",
    "flaky_rate",
    "ci_low(mean_reward)",
    "ci_high(mean_reward)",
    "new_failures",
    "fixed",
    # What the trials cost (judge.efficiency), plain or as ``delta(...)`` against the baseline's figures.
    "cost",
    "mean_input_tokens",
    "mean_output_tokens",
    "mean_total_tokens",
    "p50_latency_s",
    "p90_latency_s",
    "p99_latency_s",
    "retry_rate",
    "mean_turns",
    "mean_tool_calls",
]
#: The metrics of what the trials cost: judged by ``judge.efficiency``, and the ones ``delta(...)`` takes.
EFFICIENCY_METRICS = (
    "cost",
    "mean_input_tokens",
    "mean_output_tokens",
    "mean_total_tokens",
    "p50_latency_s",
    "p90_latency_s",
    "p99_latency_s",
    "retry_rate",
    "mean_turns",
    "mean_tool_calls",
)
Op = Literal[">=", ">", "<=", "<"]

GRAMMAR = """\
  grammar:  <metric> <op> <number>   (spaces optional)
    metric: mean_reward | pass@K | pass^K | error_rate | flaky_rate | ci_low(mean_reward) |
            ci_high(mean_reward) | new_failures | fixed   (K: a positive integer; the last two
            count tasks against --gym-baseline)
            what the trials cost: cost | mean_input_tokens | mean_output_tokens | mean_total_tokens |
            p50_latency_s | p90_latency_s | p99_latency_s | retry_rate | mean_turns | mean_tool_calls,
            or delta(<one of these>) against --gym-baseline (the number may end in %: relative)
    op:     >= | > | <= | <
    number: a finite decimal such as 0.8, 1, 5e-2
  examples: "mean_reward >= 0.8", "pass@4>=0.9", "pass^2 > 0.5", "error_rate <= 0.05", \
"ci_low(mean_reward) >= 0.7", "new_failures <= 0", "flaky_rate <= 0.1", "cost <= 2.5", \
"p90_latency_s < 20", "delta(mean_output_tokens) <= 10%\""""

_EFFICIENCY = "|".join(EFFICIENCY_METRICS)
_METRIC = re.compile(
    rf"(?P<plain>mean_reward|error_rate|flaky_rate|new_failures|fixed|{_EFFICIENCY})"
    r"|ci_(?P<bound>low|high)\s*\(\s*mean_reward\s*\)"
    rf"|delta\s*\(\s*(?P<delta>{_EFFICIENCY})\s*\)"
    r"|pass(?P<kind>[@^])(?P<k>[0-9]+)"
)
_OP = re.compile(r">=|<=|>|<")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MAX_K_DIGITS = 9  # int() refuses very long digit strings; no run has a billion repeats anyway

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}


class GateSyntaxError(ValueError):
    """A gate expression that does not parse; the message quotes it and shows the grammar."""

    def __init__(self, text: str, problem: str) -> None:
        self.text = text
        self.problem = problem
        super().__init__(f"invalid gate {text!r}: {problem}\n{GRAMMAR}")


def _format_number(x: float) -> str:
    if x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


@dataclass(frozen=True)
class Gate:
    """One parsed gate; ``k`` is set only for pass@K and pass^K.

    ``delta``: the change of an efficiency metric against the baseline's figure (``delta(cost) <= 0.5``),
    ``percent``: that change relative to the baseline's figure, in percent (``delta(cost) <= 10%``).
    """

    text: str
    metric: Metric
    k: int | None
    op: Op
    threshold: float
    delta: bool = False
    percent: bool = False

    @property
    def metric_label(self) -> str:
        if self.delta:
            return f"delta({self.metric})"
        return f"{self.metric}{self.k}" if self.k is not None else self.metric

    @property
    def efficiency(self) -> bool:
        """A gate on what the trials cost (``judge.efficiency`` judges it)."""
        return self.metric in EFFICIENCY_METRICS

    @property
    def label(self) -> str:
        """Canonical spelling, the same however the gate was written; it parses back to this gate."""
        return f"{self.metric_label}{self.op}{_format_number(self.threshold)}{'%' if self.percent else ''}"


def parse_gate(text: str) -> Gate:
    """Parse ``<metric> <op> <number>`` piece by piece, so the error names the piece that is wrong."""
    s = text.strip()
    if not s:
        raise GateSyntaxError(text, "the expression is empty")

    m = _METRIC.match(s)
    if m is None or re.match(r"\w", s[m.end() :]):
        if re.match(r"pass[@^]", s):
            raise GateSyntaxError(text, f"K in {s[:5]}K must be a positive integer")
        word = re.match(r"[^\s<>=!]*", s)
        raise GateSyntaxError(text, f"unknown metric {(word.group(0) if word else '') or s[:1]!r}")
    metric: Metric
    k: int | None = None
    delta = m.group("delta") is not None
    if delta:
        metric = cast(Metric, m.group("delta"))
    elif m.group("kind") is not None:
        kind, digits = m.group("kind"), m.group("k")
        if len(digits.lstrip("0")) > _MAX_K_DIGITS:
            raise GateSyntaxError(text, f"K in pass{kind}K is too large ({len(digits)} digits)")
        k = int(digits)
        if k < 1:
            raise GateSyntaxError(text, f"K in pass{kind}K must be a positive integer, got {digits}")
        metric = "pass@" if kind == "@" else "pass^"
    elif m.group("bound") is not None:
        metric = cast(Metric, f"ci_{m.group('bound')}(mean_reward)")
    else:
        metric = cast(Metric, m.group("plain"))
    rest = s[m.end() :].lstrip()

    o = _OP.match(rest)
    if o is None:
        if not rest:
            raise GateSyntaxError(text, f"missing a comparison after {m.group(0)!r}")
        found = re.match(r"[^\s0-9.+-]+", rest)
        shown = found.group(0) if found else rest[:1]
        raise GateSyntaxError(text, f"expected one of >=, >, <=, < after {m.group(0)!r}, found {shown!r}")
    op = cast(Op, o.group(0))
    rest = rest[o.end() :].lstrip()

    n = _NUMBER.match(rest)
    if n is None:
        shown = rest.split()[0] if rest.split() else ""
        if shown.lower().lstrip("+-") in {"nan", "inf", "infinity"}:
            raise GateSyntaxError(text, f"threshold {shown} is not a finite number")
        problem = f"expected a number after {op!r}" + (f", found {shown!r}" if shown else "")
        raise GateSyntaxError(text, problem)
    threshold = float(n.group(0))
    if not math.isfinite(threshold):
        raise GateSyntaxError(text, f"threshold {n.group(0)} is not a finite number")
    trailing = rest[n.end() :].strip()
    percent = trailing.startswith("%")
    if percent:
        if not delta:
            raise GateSyntaxError(text, "a percentage is a change against the baseline: write delta(<metric>)")
        trailing = trailing[1:].strip()
    if trailing:
        raise GateSyntaxError(text, f"unexpected text after the threshold: {trailing!r}")
    return Gate(text=text, metric=metric, k=k, op=op, threshold=threshold, delta=delta, percent=percent)


@dataclass(frozen=True)
class GateResult:
    """A gate's verdict; ``value`` is None when the metric could not be measured, and then it fails.

    ``undecided``: a failed interval-bound gate whose point estimate is on the good side;
    ``tasks_needed`` then says about how many more tasks would decide it (None: over a million).
    """

    gate: Gate
    value: float | None
    passed: bool
    reason: str
    undecided: bool = False
    tasks_needed: int | None = None


def _format_value(value: float, threshold: float) -> str:
    """Short, unless rounding would make a failing value print like its threshold."""
    short = f"{value:.6g}"
    return repr(value) if short == f"{threshold:.6g}" and value != threshold else short


NO_BASELINE = "no baseline to compare with (give --gym-baseline FILE)"


def _measure(
    gate: Gate, stats: SuiteStats, comparison: Comparison | None, no_comparison: str
) -> tuple[float | None, str]:
    if gate.efficiency:  # judged on the suite's totals (judge.efficiency), never on the rewards
        return None, "a gate on what the trials cost is judged on the suite's totals"
    if gate.metric == "mean_reward":
        return stats.mean_reward, ""
    if gate.metric == "error_rate":
        return stats.error_rate, ""
    if gate.metric == "flaky_rate":
        if stats.flaky_rate is None:
            return None, "flakiness needs tasks with at least 2 trials (raise --gym-repeats)"
        return stats.flaky_rate, ""
    if gate.metric in ("ci_low(mean_reward)", "ci_high(mean_reward)"):
        bound = stats.ci_low if gate.metric == "ci_low(mean_reward)" else stats.ci_high
        return bound, "" if bound is not None else (stats.ci_note or "no interval")
    if gate.metric in ("new_failures", "fixed"):
        if comparison is None:
            return None, no_comparison
        return float(len(comparison.new_failures if gate.metric == "new_failures" else comparison.fixed)), ""
    assert gate.k is not None
    table = stats.pass_at if gate.metric == "pass@" else stats.pass_hat
    if gate.k not in table:
        return None, (
            f"K={gate.k} exceeds the repeats: every task needs at least {gate.k} trials with a reward, "
            f"but the fewest any task has is {stats.max_k} (raise --gym-repeats to at least {gate.k})"
        )
    return table[gate.k], ""


def _needed(gate: Gate, stats: SuiteStats) -> tuple[bool, int | None]:
    """(undecided, tasks needed) for a failed gate on an interval bound.

    Undecided when the bound points at the threshold and the mean is strictly on the good side:
    ``ci_low >= t`` with mean > t, or ``ci_high <= t`` with mean < t (mirrored: 1 - reward vs 1 - t).
    """
    mean = stats.mean_reward
    if mean is None or not stats.rewards:
        return False, None
    groups = list(stats.rewards.values())
    if gate.metric == "ci_low(mean_reward)" and gate.op in (">=", ">") and mean > gate.threshold:
        return True, tasks_needed(groups, gate.threshold)
    if gate.metric == "ci_high(mean_reward)" and gate.op in ("<=", "<") and mean < gate.threshold:
        return True, tasks_needed([[1.0 - r for r in g] for g in groups], 1.0 - gate.threshold)
    return False, None


def evaluate(
    gate: Gate, stats: SuiteStats, comparison: Comparison | None = None, no_comparison: str = NO_BASELINE
) -> GateResult:
    """Judge one gate; a metric that cannot be measured fails the gate rather than passing it silently.

    ``comparison`` (against the baseline) is what ``new_failures`` and ``fixed`` count; without one
    they fail with ``no_comparison`` as the reason.
    """
    if stats.trials == 0:
        why = f" ({stats.errors} errored)" if stats.errors else ""
        return GateResult(gate, None, False, f"{gate.label}: no trial produced a reward{why}")
    value, why_not = _measure(gate, stats, comparison, no_comparison)
    if value is None:
        return GateResult(gate, None, False, f"{gate.label}: {why_not}")
    passed = _OPS[gate.op](value, gate.threshold)
    shown = _format_value(value, gate.threshold)
    limit = f"{gate.op} {_format_number(gate.threshold)}"
    verdict = f"{shown} {limit}" if passed else f"{shown}, required {limit}"
    reason = f"{gate.metric_label} = {verdict}"
    if passed:
        return GateResult(gate, value, True, reason)
    if comparison is not None and gate.metric in ("new_failures", "fixed"):
        named = comparison.new_failures if gate.metric == "new_failures" else comparison.fixed
        return GateResult(gate, value, False, f"{reason}: {comparison.describe(named)}" if named else reason)
    undecided, needed = _needed(gate, stats)
    if not undecided:
        return GateResult(gate, value, False, reason)
    assert stats.mean_reward is not None
    more = f"needs about {max(1, needed)} more tasks" if needed is not None else "needs over a million more tasks"
    side = "above" if gate.metric == "ci_low(mean_reward)" else "below"
    tasks = len(stats.rewards)
    reason += (
        f"; undecided: {more} (mean reward {stats.mean_reward:.3g} is {side} {_format_number(gate.threshold)}, "
        f"but {tasks} {'task is' if tasks == 1 else 'tasks are'} too few to show it)"
    )
    return GateResult(gate, value, False, reason, undecided=True, tasks_needed=needed)
