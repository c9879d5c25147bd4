"""Suite gates such as ``pass@4 >= 0.9``: parsed by a small grammar (never eval) and judged on SuiteStats."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

from pytest_gym.judge.stats import SuiteStats

Metric = Literal["mean_reward", "pass@", "pass^", "error_rate", "ci_low(mean_reward)"]
Op = Literal[">=", ">", "<=", "<"]

GRAMMAR = """\
  grammar:  <metric> <op> <number>   (spaces optional)
    metric: mean_reward | pass@K | pass^K | error_rate | ci_low(mean_reward)   (K: a positive integer)
    op:     >= | > | <= | <
    number: a finite decimal such as 0.8, 1, 5e-2
  examples: "mean_reward >= 0.8", "pass@4>=0.9", "pass^2 > 0.5", "error_rate <= 0.05", \
"ci_low(mean_reward) >= 0.7\""""

_METRIC = re.compile(r"mean_reward|error_rate|ci_low\s*\(\s*mean_reward\s*\)|pass([@^])([0-9]+)")
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
    """One parsed gate; ``k`` is set only for pass@K and pass^K."""

    text: str
    metric: Metric
    k: int | None
    op: Op
    threshold: float

    @property
    def metric_label(self) -> str:
        return f"{self.metric}{self.k}" if self.k is not None else self.metric

    @property
    def label(self) -> str:
        """Canonical spelling, the same however the gate was written; it parses back to this gate."""
        return f"{self.metric_label}{self.op}{_format_number(self.threshold)}"


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
    if m.group(1) is not None:
        digits = m.group(2)
        if len(digits.lstrip("0")) > _MAX_K_DIGITS:
            raise GateSyntaxError(text, f"K in pass{m.group(1)}K is too large ({len(digits)} digits)")
        k = int(digits)
        if k < 1:
            raise GateSyntaxError(text, f"K in pass{m.group(1)}K must be a positive integer, got {digits}")
        metric = "pass@" if m.group(1) == "@" else "pass^"
    elif m.group(0).startswith("ci_low"):
        metric = "ci_low(mean_reward)"
    else:
        metric = cast(Metric, m.group(0))
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
    if trailing:
        raise GateSyntaxError(text, f"unexpected text after the threshold: {trailing!r}")
    return Gate(text=text, metric=metric, k=k, op=op, threshold=threshold)


@dataclass(frozen=True)
class GateResult:
    """A gate's verdict; ``value`` is None when the metric could not be measured, and then it fails."""

    gate: Gate
    value: float | None
    passed: bool
    reason: str


def _format_value(value: float, threshold: float) -> str:
    """Short, unless rounding would make a failing value print like its threshold."""
    short = f"{value:.6g}"
    return repr(value) if short == f"{threshold:.6g}" and value != threshold else short


def _measure(gate: Gate, stats: SuiteStats) -> tuple[float | None, str]:
    if gate.metric == "mean_reward":
        return stats.mean_reward, ""
    if gate.metric == "error_rate":
        return stats.error_rate, ""
    if gate.metric == "ci_low(mean_reward)":
        if stats.ci_low is None:
            return None, "the confidence interval needs rewards from at least 2 tasks"
        return stats.ci_low, ""
    assert gate.k is not None
    table = stats.pass_at if gate.metric == "pass@" else stats.pass_hat
    if gate.k not in table:
        return None, (
            f"K={gate.k} exceeds the repeats: every task needs at least {gate.k} trials with a reward, "
            f"but the fewest any task has is {stats.max_k} (raise --gym-repeats to at least {gate.k})"
        )
    return table[gate.k], ""


def evaluate(gate: Gate, stats: SuiteStats) -> GateResult:
    """Judge one gate; a metric that cannot be measured fails the gate rather than passing it silently."""
    if stats.trials == 0:
        why = f" ({stats.errors} errored)" if stats.errors else ""
        return GateResult(gate, None, False, f"{gate.label}: no trial produced a reward{why}")
    value, why_not = _measure(gate, stats)
    if value is None:
        return GateResult(gate, None, False, f"{gate.label}: {why_not}")
    passed = _OPS[gate.op](value, gate.threshold)
    shown = _format_value(value, gate.threshold)
    limit = f"{gate.op} {_format_number(gate.threshold)}"
    verdict = f"{shown} {limit}" if passed else f"{shown}, required {limit}"
    return GateResult(gate, value, passed, f"{gate.metric_label} = {verdict}")
