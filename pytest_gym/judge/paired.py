"""Paired comparison of a run against its baseline, exact where the sample is small.

Tasks are paired by task hash, so only tasks both runs measured count. The question a CI gate
asks is one-sided: did the current run get *worse*? Two tests answer it, both exact:

* 0/1 per-task values (pass/fail): McNemar's exact test, i.e. a sign test on the discordant
  pairs. Two tasks that both went 1 -> 0 give p = 0.5**2 = 0.25: not evidence of a drop.
* fractional per-task values (mean rewards): the sign-flip permutation test on the paired
  differences, exact (all 2**k sign patterns, by meet-in-the-middle) up to ``exact_limit``
  nonzero differences and Monte Carlo with a seeded ``random.Random`` above. On 0/1 values it
  equals the exact McNemar test.

The effect size is the mean difference (current - baseline) with Tango's score interval
(Tango 1998), the recommended interval for paired proportions: it stays in [-1, 1], has
width with few or no discordant pairs (20 unchanged tasks do not prove "no change"), and
its coverage stays near nominal at small n. Fractional differences enter through their
positive and negative parts; Tango's pass/fail variance is then an upper bound (d**2 <= |d|),
too wide by 2-8x in simulation, so, as in ``intervals`` (Korn-Graubard), the pairs are
rescaled by how much less the differences vary than pass/fail ones would, shrunk by
``(z / t_df)**2`` with df the effective number of tasks carrying the spread (never below
Tango itself). On 0/1 values this is exactly Tango. Assumption: differences vary smoothly
between tasks; a rare total breakage on tasks the sample missed shows in no observed spread,
and only the unscaled ``tango_interval`` bounds that worst case. Inverting the sign-flip
test was rejected for the interval: with ties at zero it shrinks to a point, e.g. [0, 0] for
20 unchanged tasks.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from statistics import NormalDist

from pytest_gym.core.taskrule import parse_task_rule
from pytest_gym.judge.intervals import t_ppf

CONFIDENCE = 0.95
EXACT_LIMIT = 20
MC_SAMPLES = 20_000
# Differences closer to zero than this are ties (per-task means are sums of floats).
_TIE = 1e-12

#: A ``--gym-task-pass`` rule: all, majority, any, or a share such as 0.8 or 4/5 (``core.taskrule``).
Rule = str


@dataclass(frozen=True)
class PairedTest:
    """Change from baseline to current on the shared tasks (current - baseline per task).

    ``p_drop`` is the one-sided exact (or seeded Monte Carlo, see ``method``) p-value against
    "no change" in favour of "current is worse"; ``ci_low``/``ci_high`` bound ``mean_delta``
    (Tango score interval, rescaled for fractional values, within [-1, 1]).
    ``flips_to_fail``/``flips_to_pass`` are the task hashes that crossed ``min_reward``
    downwards/upwards, in the order of ``current``.
    ``mean_delta`` is None only when no task is shared, and then the interval is [-1, 1] and
    ``p_drop`` is 1: no evidence either way.
    """

    n_shared: int
    mean_delta: float | None
    ci_low: float
    ci_high: float
    p_drop: float
    method: str
    flips_to_fail: list[str] = field(default_factory=list)
    flips_to_pass: list[str] = field(default_factory=list)

    def significant_drop(self, alpha: float = 0.05) -> bool:
        """The drop is unlikely under "no change": ``p_drop < alpha``."""
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        return self.p_drop < alpha


def _unit(value: float, what: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:  # also rejects NaN
        raise ValueError(f"{what} must be in [0, 1], got {value!r}")
    return number


def task_passes(rewards: Sequence[float], min_reward: float = 1.0, rule: Rule = "all") -> bool:
    """Whether one task passes: its trials reaching ``min_reward`` under ``rule``.

    ``all``: every trial; ``majority``: more than half (a tie fails); ``any``: at least one.
    A task without rewards has no verdict and does not pass. NaN rewards raise ValueError.
    """
    values = [float(r) for r in rewards]
    if any(math.isnan(r) for r in values):
        raise ValueError("rewards must not be NaN; count such trials as errors")
    return passes_by_count(len(values), sum(1 for r in values if r >= min_reward), rule)


def passes_by_count(trials: int, successes: int, rule: Rule = "all") -> bool:
    """``task_passes`` from the counts alone: ``successes`` of ``trials`` reached min_reward."""
    return parse_task_rule(rule).passes(trials, successes)


def new_failures_and_fixes(
    baseline_pass: Mapping[str, bool], current_pass: Mapping[str, bool]
) -> tuple[list[str], list[str]]:
    """(tasks that passed in the baseline and fail now, tasks that failed and pass now).

    Only tasks in both; in the order of ``current_pass``. Deterministic counts for gates such
    as ``new_failures == 0``, which need no test: any flip is a fact, not an estimate.
    """
    shared = [h for h in current_pass if h in baseline_pass]
    failures = [h for h in shared if baseline_pass[h] and not current_pass[h]]
    fixes = [h for h in shared if not baseline_pass[h] and current_pass[h]]
    return failures, fixes


def mcnemar_p_drop(up: int, down: int) -> float:
    """One-sided exact McNemar p-value for a drop: P(Bin(up + down, 1/2) >= down)."""
    if up < 0 or down < 0:
        raise ValueError(f"counts must be >= 0, got up={up}, down={down}")
    total = up + down
    tail = sum(math.comb(total, k) for k in range(down, total + 1))
    return float(Fraction(tail, 2**total))


def _signed_sums(values: Sequence[float]) -> list[float]:
    """All 2**len(values) sums of +-v; bit j of the index set means +values[j]."""
    sums = [0.0]
    for v in values:
        sums = [s - v for s in sums] + [s + v for s in sums]
    return sums


def sign_flip_p_exact(deltas: Sequence[float]) -> float:
    """P(sum of +-|d| <= observed sum) over all sign patterns, by meet-in-the-middle.

    2**k patterns cost about 2 * 2**(k/2) sums and as many binary searches.
    """
    values = [abs(d) for d in deltas if abs(d) > _TIE]
    if not values:
        return 1.0
    observed = math.fsum(d for d in deltas if abs(d) > _TIE)
    threshold = observed + _TIE * (1.0 + math.fsum(values))
    half = len(values) // 2
    left = _signed_sums(values[:half])
    right = sorted(_signed_sums(values[half:]))
    count = sum(bisect_right(right, threshold - s) for s in left)
    return math.ldexp(count, -len(values))


def sign_flip_p_monte_carlo(deltas: Sequence[float], samples: int = MC_SAMPLES, seed: int = 0) -> float:
    """Monte Carlo sign-flip p-value, ``(1 + hits) / (1 + samples)`` so it is never below the exact one's support.

    Signs come from ``random.Random(seed).getrandbits``, summed eight at a time from tables
    of the 256 signed sums of each block of eight values.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    values = [abs(d) for d in deltas if abs(d) > _TIE]
    if not values:
        return 1.0
    observed = math.fsum(d for d in deltas if abs(d) > _TIE)
    threshold = observed + _TIE * (1.0 + math.fsum(values))
    tables = [_block_table(values[i : i + 8]) for i in range(0, len(values), 8)]
    rng = random.Random(seed)
    k = len(values)
    hits = 0
    for _ in range(samples):
        bits = rng.getrandbits(k)
        total = 0.0
        for table in tables:
            total += table[bits & 255]
            bits >>= 8
        if total <= threshold:
            hits += 1
    return (1 + hits) / (1 + samples)


def _block_table(block: Sequence[float]) -> list[float]:
    """Signed sums of up to eight values for every byte: bit j set means +block[j], unused bits add 0."""
    sums = _signed_sums(block)
    return sums * (256 // len(sums))


def _tango_z(up: float, down: float, n: float, delta: float) -> float:
    """Tango's score statistic for H0: mean difference = delta (up/down: discordant mass)."""
    a = 2.0 * n
    b = -up - down + (2.0 * n - up + down) * delta
    c = -down * delta * (1.0 - delta)
    p_down = (-b + math.sqrt(max(0.0, b * b - 4.0 * a * c))) / (2.0 * a)
    # Restricted MLE of P(down) kept feasible: P(up) = P(down) + delta >= 0 and P(up) + P(down) <= 1.
    p_down = min((1.0 - delta) / 2.0, max(max(0.0, -delta), p_down))
    numerator = up - down - n * delta
    variance = n * (2.0 * p_down + delta * (1.0 - delta))
    if variance <= 0.0:
        return 0.0 if abs(numerator) <= _TIE else math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


def _crossing(excess: Callable[[float], float], inside: float, outside: float) -> float:
    """Where a monotone ``excess`` turns positive between ``inside`` (<= 0) and ``outside``.

    Illinois regula falsi (bisecting while an end is infinite): a dozen evaluations instead
    of the ~55 of plain bisection. Returns the outer end of the final bracket (conservative).
    """
    if excess(outside) <= 0.0:
        return outside
    f_in, f_out = excess(inside), excess(outside)
    kept = 0  # which end stayed last time: -1 inside, +1 outside
    for _ in range(200):
        if abs(outside - inside) <= 1e-12:
            break
        if math.isinf(f_out) or math.isinf(f_in) or f_out == f_in:
            mid = (inside + outside) / 2.0
        else:
            mid = outside - f_out * (outside - inside) / (f_out - f_in)
        if not min(inside, outside) < mid < max(inside, outside):
            mid = (inside + outside) / 2.0
        f_mid = excess(mid)
        if f_mid == 0.0:
            return mid
        if f_mid < 0.0:
            inside, f_in = mid, f_mid
            if kept == 1:
                f_out /= 2.0
            kept = 1
        else:
            outside, f_out = mid, f_mid
            if kept == -1:
                f_in /= 2.0
            kept = -1
    return outside


def tango_interval(up: float, down: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Score interval for P(up) - P(down) from n pairs with ``up``/``down`` discordant mass (may be fractional).

    The score decreases in delta, so each end is the one crossing of +-z between the estimate and +-1.
    """
    if not n > 0.0:
        raise ValueError(f"need pairs, got n={n}")
    if not (up >= 0.0 and down >= 0.0 and up + down <= n * (1.0 + 1e-12)):
        raise ValueError(f"need up, down >= 0 and up + down <= n, got up={up}, down={down}, n={n}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    estimate = max(-1.0, min(1.0, (up - down) / n))
    low = _crossing(lambda d: _tango_z(up, down, n, d) - z, estimate, -1.0)
    high = _crossing(lambda d: -z - _tango_z(up, down, n, d), estimate, 1.0)
    return low, high


def _variance_scale(deltas: Sequence[float], confidence: float) -> float:
    """How many pass/fail pairs each pair is worth: pass/fail variance over observed variance, >= 1.

    1 for 0/1 values, without spread, or when a few tasks carry it (small effective df).
    """
    n = len(deltas)
    mean = math.fsum(deltas) / n
    residuals = [d - mean for d in deltas]
    ss = math.fsum(e * e for e in residuals)
    if n < 2 or ss <= _TIE * _TIE * n:
        return 1.0
    ratio = (math.fsum(abs(d) for d in deltas) / n - mean * mean) / (ss / n)
    if ratio <= 1.0:  # pass/fail values: exactly 1
        return 1.0
    df = min(n - 1.0, ss * ss / math.fsum(e**4 for e in residuals))
    p = 0.5 + confidence / 2.0
    shrink = (NormalDist().inv_cdf(p) / t_ppf(p, df)) ** 2
    return max(1.0, ratio * shrink)


def paired_test(
    baseline: Mapping[str, float],
    current: Mapping[str, float],
    *,
    min_reward: float = 1.0,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    exact_limit: int = EXACT_LIMIT,
    mc_samples: int = MC_SAMPLES,
) -> PairedTest:
    """Compare per-task values (pass 0/1 or mean reward in [0, 1]) keyed by task hash.

    All-0/1 values use the exact McNemar test; anything else the sign-flip test, exact up to
    ``exact_limit`` nonzero differences, else Monte Carlo with ``mc_samples`` draws seeded by
    ``seed``. Values outside [0, 1] or NaN raise ValueError.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    shared = [h for h in current if h in baseline]
    before = {h: _unit(baseline[h], f"baseline value of {h[:12]}") for h in shared}
    after = {h: _unit(current[h], f"current value of {h[:12]}") for h in shared}
    flips_to_fail = [h for h in shared if before[h] >= min_reward > after[h]]
    flips_to_pass = [h for h in shared if after[h] >= min_reward > before[h]]
    n = len(shared)
    if n == 0:
        return PairedTest(0, None, -1.0, 1.0, 1.0, "no shared tasks", flips_to_fail, flips_to_pass)

    deltas = [after[h] - before[h] for h in shared]
    up = math.fsum(d for d in deltas if d > 0.0)
    down = -math.fsum(d for d in deltas if d < 0.0)
    scale = _variance_scale(deltas, confidence)
    low, high = tango_interval(scale * up, scale * down, scale * n, confidence)
    nonzero = sum(1 for d in deltas if abs(d) > _TIE)
    if all(v in (0.0, 1.0) for v in (*before.values(), *after.values())):
        p_drop = mcnemar_p_drop(round(up), round(down))
        method = "McNemar exact (one-sided); Tango score interval"
    elif nonzero <= exact_limit:
        p_drop = sign_flip_p_exact(deltas)
        method = "sign-flip exact (one-sided); rescaled Tango score interval"
    else:
        p_drop = sign_flip_p_monte_carlo(deltas, mc_samples, seed)
        method = f"sign-flip Monte Carlo, {mc_samples} draws, seed {seed} (one-sided); rescaled Tango score interval"
    mean_delta = math.fsum(deltas) / n
    return PairedTest(n, mean_delta, low, high, p_drop, method, flips_to_fail, flips_to_pass)
