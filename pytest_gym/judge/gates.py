"""Suite gates such as ``pass@4 >= 0.9``: parsed by a small grammar (never eval) and judged on SuiteStats.

A gate is *undecided*, and fails (undecided never passes a run), when the evidence does not settle it:

* on an interval bound that fails while the point estimate is on the good side: its reason says how
  many more tasks, at the same mean, would let the bound clear (``intervals.tasks_needed``), and when
  the threshold is above what the suite's tasks can ever show (``intervals.ci_low_ceiling``);
* when trials errored and the gate holds with them counted as failures but not as successes, or the
  reverse (``Imputed``): the gate is decided on both, PASS only when both pass, FAIL when both fail,
  and otherwise the reason names the errored tasks. Errors are not evidence either way.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, cast

if TYPE_CHECKING:
    from pytest_gym.judge.baseline import Comparison
    from pytest_gym.judge.health import SuiteHealth
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
    "health_clean_rate",
    "unhealthy_trials",
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
            ci_high(mean_reward) | new_failures | fixed | health_clean_rate | unhealthy_trials
            (K: a positive integer; new_failures and fixed count tasks against --gym-baseline)
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
    rf"(?P<plain>mean_reward|error_rate|flaky_rate|new_failures|fixed|health_clean_rate|unhealthy_trials|{_EFFICIENCY})"
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


class BadGate(ValueError):
    """A gate expression that does not parse, with where it came from (a usage error at the top)."""


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


def parse_gates(expressions: tuple[str, ...], where: str) -> list[Gate]:
    gates = []
    for text in expressions:
        try:
            gates.append(parse_gate(text))
        except GateSyntaxError as exc:
            raise BadGate(f"pytest-gym: bad gate from {where}: {exc}") from None
    return gates


@dataclass(frozen=True)
class GateResult:
    """A gate's verdict; ``value`` is None when the metric could not be measured, and then it fails.

    ``undecided``: a failed gate the evidence does not settle (see the module docstring);
    ``tasks_needed`` then says about how many more tasks would decide it (None: over a million, or
    not a question of tasks). ``bounds``: the metric with every errored trial counted as a failure and
    as a success (lowest, highest), when trials errored; ``errored_tasks`` the tasks with such trials.
    """

    gate: Gate
    value: float | None
    passed: bool
    reason: str
    undecided: bool = False
    tasks_needed: int | None = None
    bounds: tuple[float, float] | None = None
    errored_tasks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Imputed:
    """The run with every errored trial counted as a failure (``as_failed``) and as a success (``as_passed``).

    Each errored trial takes its place in trial order, so a comparison with the baseline uses the same
    trials. ``errored``: the tasks with an errored trial, in dataset order; ``describe`` names tasks.
    """

    as_failed: SuiteStats
    as_passed: SuiteStats
    comparison_failed: Comparison | None
    comparison_passed: Comparison | None
    errored: list[str]
    trials: int
    describe: Callable[[list[str]], str]


def _format_value(value: float, threshold: float) -> str:
    """Short, unless rounding would make a failing value print like its threshold."""
    short = f"{value:.6g}"
    return repr(value) if short == f"{threshold:.6g}" and value != threshold else short


NO_BASELINE = "no baseline to compare with (give --gym-baseline FILE)"


HEALTH_METRICS = frozenset({"health_clean_rate", "unhealthy_trials"})
NO_HEALTH = "Gym's health checks did not run (--gym-health-check off)"


def _measure_health(gate: Gate, health: SuiteHealth | None) -> tuple[float | None, str]:
    if health is None:
        return None, NO_HEALTH
    if gate.metric == "unhealthy_trials":
        return (float(health.unhealthy), "") if health.checked else (None, health.why_unmeasured())
    rate = health.clean_rate
    return (rate, "") if rate is not None else (None, health.why_unmeasured())


FLAKY_RATE = "the chance that two trials of a task disagree"


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
        if comparison.paired.n_shared == 0:
            return None, f"no evidence: {comparison.no_evidence or 'the baseline and this run share no task'}"
        return float(len(comparison.new_failures if gate.metric == "new_failures" else comparison.fixed)), ""
    assert gate.k is not None
    table = stats.pass_at if gate.metric == "pass@" else stats.pass_hat
    if gate.k not in table:
        short = [ts for ts in stats.per_task.values() if 0 < ts.n < gate.k]
        if short and all(ts.n + ts.errors >= gate.k for ts in short):
            errored = sum(ts.errors for ts in short)
            return None, (
                f"K={gate.k}: {len(short)} task{'s' * (len(short) != 1)} ha{'ve' if len(short) != 1 else 's'} fewer "
                f"than {gate.k} trials with a reward because {errored} trial{'s' * (errored != 1)} errored "
                f"({', '.join(ts.task_hash[:12] for ts in short[:5])}{' ...' if len(short) > 5 else ''})"
            )
        return None, (
            f"K={gate.k} exceeds the repeats: every task needs at least {gate.k} trials with a reward, "
            f"but the fewest any task has is {stats.max_k} (raise --gym-repeats to at least {gate.k})"
        )
    return table[gate.k], ""


def unreachable(gates: list[Gate], repeats: int, where: str) -> str | None:
    """Why a gate can never be decided at ``repeats`` trials per task (pass@K, pass^K with K > repeats; flaky_rate
    at 1), with the fix; None when every gate can be. Checked before any rollout: the run would be wasted."""
    for gate in gates:
        needs = gate.k if gate.k is not None else 2 if gate.metric == "flaky_rate" else 1
        if needs > repeats:
            instead = f", or gate on {gate.metric}{repeats}" if gate.k is not None and repeats > 1 else ""
            return (
                f"pytest-gym: gate {gate.label} (from {where}) can never be decided: {gate.metric_label} needs "
                f"{needs} trials of each task and this suite has {repeats}; raise the repeats (--gym-repeats, or "
                f"repeats: in a suite file) to {needs}{instead}"
            )
    return None


def _needed(gate: Gate, stats: SuiteStats) -> tuple[bool, int | None]:
    """(undecided, tasks needed) for a failed gate on an interval bound.

    Undecided when the bound points at the threshold and the mean is strictly on the good side:
    ``ci_low >= t`` with mean > t, or ``ci_high <= t`` with mean < t (mirrored: 1 - reward vs 1 - t).
    """
    from pytest_gym.judge.intervals import tasks_needed

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
    gate: Gate,
    stats: SuiteStats,
    comparison: Comparison | None = None,
    no_comparison: str = NO_BASELINE,
    imputed: Imputed | None = None,
    health: SuiteHealth | None = None,
) -> GateResult:
    """Judge one gate; a metric that cannot be measured fails the gate rather than passing it silently.

    ``comparison`` (against the baseline) is what ``new_failures`` and ``fixed`` count; without one
    they fail with ``no_comparison`` as the reason, and so they do when it shares no task (no evidence).
    With ``imputed`` (trials errored) the gate is decided over what the errored trials could have been.
    ``health`` is what the health metrics read (a trial with broken evidence is an error, so they are
    measured even when no trial produced a reward, and not over what errored trials could have been).
    """
    plain = _evaluate(gate, stats, comparison, no_comparison, health)
    if gate.metric in HEALTH_METRICS or gate.metric == "error_rate" or stats.trials == 0:
        return plain
    if imputed is None or not imputed.errored:
        return plain
    return _over_errors(gate, stats, plain, imputed, no_comparison)


def _range(gate: Gate, stats: SuiteStats, imputed: Imputed, no_comparison: str) -> tuple[float, float] | None:
    """The metric's lowest and highest value over the errored trials counted as failures or as successes."""
    if gate.metric == "flaky_rate":
        return stats.flaky_rate_range()  # per task the mix of outcomes that makes it lowest / highest
    low, _ = _measure(gate, imputed.as_failed, imputed.comparison_failed, no_comparison)
    high, _ = _measure(gate, imputed.as_passed, imputed.comparison_passed, no_comparison)
    if low is None or high is None:
        return None
    return min(low, high), max(low, high)


def _over_errors(gate: Gate, stats: SuiteStats, plain: GateResult, imputed: Imputed, no_comparison: str) -> GateResult:
    """PASS only when the gate holds both ways, FAIL when it fails both ways, else undecided (and failed)."""
    span = _range(gate, stats, imputed, no_comparison)
    if span is None:
        return plain
    low, high = span
    holds_low, holds_high = (_OPS[gate.op](v, gate.threshold) for v in span)
    count = imputed.trials
    errored = f"{count} errored trial{'s' * (count != 1)} ({imputed.describe(imputed.errored)})"
    shown = _format_value(low, gate.threshold)
    if high != low:
        shown += f"..{_format_value(high, gate.threshold)}"
    limit = f"{gate.op} {_format_number(gate.threshold)}"
    measured = "" if plain.value is None else _format_value(plain.value, gate.threshold)
    value = f" = {measured} over the trials with a reward;" if measured else " ="
    tasks = list(imputed.errored)
    if holds_low and holds_high:
        reason = f"{gate.metric_label}{value} {shown} {limit} with the {errored} counted as failures or as successes"
        return GateResult(gate, plain.value, True, reason, bounds=span, errored_tasks=tasks)
    if not holds_low and not holds_high:
        head = f"{plain.reason};" if not plain.passed else f"{gate.metric_label}{value}"
        reason = f"{head} {shown}, required {limit}, however the {errored} had gone"
        return replace(plain, passed=False, reason=reason, bounds=span, errored_tasks=tasks)
    reason = (
        f"{gate.metric_label}{value} undecided: {shown} with the {errored} counted as failures or as successes, "
        f"required {limit} (rerun the errored trials to decide)"
    )
    return GateResult(gate, plain.value, False, reason, undecided=True, bounds=span, errored_tasks=tasks)


def _baseline_remarks(gate: Gate, comparison: Comparison) -> str:
    """What qualifies a count of flips: flips of flaky tasks not counted, and when flips are noise."""
    flaky = comparison.flaky_failures if gate.metric == "new_failures" else comparison.flaky_fixes
    parts = [f"flaky, not counted: {comparison.describe(flaky)}"] if flaky else []
    parts += [note for note in comparison.notes if "one trial" in note]
    return f" ({'; '.join(parts)})" if parts else ""


def _evaluate(
    gate: Gate, stats: SuiteStats, comparison: Comparison | None, no_comparison: str, health: SuiteHealth | None
) -> GateResult:
    if gate.metric in HEALTH_METRICS:
        value, why_not = _measure_health(gate, health)
    elif stats.trials == 0:
        why = f" ({stats.errors} errored)" if stats.errors else ""
        return GateResult(gate, None, False, f"{gate.label}: no trial produced a reward{why}")
    else:
        value, why_not = _measure(gate, stats, comparison, no_comparison)
    if value is None:
        return GateResult(gate, None, False, f"{gate.label}: {why_not}")
    passed = _OPS[gate.op](value, gate.threshold)
    shown = _format_value(value, gate.threshold)
    limit = f"{gate.op} {_format_number(gate.threshold)}"
    verdict = f"{shown} {limit}" if passed else f"{shown}, required {limit}"
    reason = f"{gate.metric_label} = {verdict}"
    if gate.metric == "flaky_rate":
        reason += f" ({FLAKY_RATE})"
    if comparison is not None and gate.metric in ("new_failures", "fixed"):
        named = comparison.new_failures if gate.metric == "new_failures" else comparison.fixed
        reason += (f": {comparison.describe(named)}" if named and not passed else "") + _baseline_remarks(
            gate, comparison
        )
        return GateResult(gate, value, passed, reason)
    if passed:
        return GateResult(gate, value, True, reason)
    undecided, needed = _needed(gate, stats)
    if not undecided:
        return GateResult(gate, value, False, reason)
    assert stats.mean_reward is not None
    more = f"needs about {max(1, needed)} more tasks" if needed is not None else "needs over a million more tasks"
    side = "above" if gate.metric == "ci_low(mean_reward)" else "below"
    tasks = len(stats.rewards)
    reason += (
        f"; undecided: {more} (mean reward {stats.mean_reward:.3g} is {side} {_format_number(gate.threshold)}, "
        f"but {tasks} {'task is' if tasks == 1 else 'tasks are'} too few to show it{_ceiling(gate, stats)})"
    )
    return GateResult(gate, value, False, reason, undecided=True, tasks_needed=needed)


def _ceiling(gate: Gate, stats: SuiteStats) -> str:
    """When the threshold is beyond what this many tasks can show even if every trial passed (failed)."""
    from pytest_gym.judge.intervals import ci_low_ceiling, evidence, tasks_for_ceiling

    threshold = gate.threshold if gate.metric == "ci_low(mean_reward)" else 1.0 - gate.threshold
    n_floor = evidence(list(stats.rewards.values())).n_floor
    ceiling = ci_low_ceiling(n_floor)
    if ceiling >= threshold:
        return ""
    bound, all_of = ("ci_low", "passed") if gate.metric == "ci_low(mean_reward)" else ("ci_high", "failed")
    edge = ceiling if bound == "ci_low" else 1.0 - ceiling
    least = tasks_for_ceiling(threshold)
    need = f"; {_format_number(gate.threshold)} needs at least {least} tasks" if least is not None else ""
    tasks = f"{round(n_floor)}" if abs(n_floor - round(n_floor)) < 1e-9 else f"{n_floor:.1f} (effective)"
    return f": {bound} cannot pass {edge:.3g} with {tasks} tasks even if every trial {all_of}{need}"
