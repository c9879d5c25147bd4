"""Paired comparison of a run against its baseline: one family of tests, whose p-values and bounds agree.

Tasks are paired by task hash, so only tasks both runs measured count. The question a CI gate asks
is one-sided: did the current run get worse, by more than a tolerance t (``--gym-max-regression``)?
With delta the mean per-task change (current - baseline), each test is of H0: delta >= d0 against
delta < d0; the drop is tested at d0 = 0 (``p_drop``) and at d0 = -t (``p_beyond``), and the bounds
are where the same tests turn (one-sided, 1 - ALPHA each): ``ci_high`` is the largest d0 the test
does not reject, so ``ci_high < -t`` and ``p_beyond < ALPHA`` say the same thing (to the 1e-6 the
bound is found to), for every t, and ``ci_low`` mirrors it for a gain.

* pass/fail per-task values: an exact unconditional test (as Suissa & Shuster 1991's unconditional
  McNemar test, and Sidik 2003's with a margin): the p-value is the largest chance, over the nuisance
  (how many tasks change at all) on the boundary delta = d0, of an outcome (up, down) at least as
  extreme as the observed one. Extreme is ordered by Tango's asymptotic score bound, the same order
  for every d0 (a Buehler bound: Buehler 1957, Kabaila & Lloyd on its choice of order): so p falls as
  d0 rises, the changes not rejected form an interval, and ``ci_high`` (its top) is the tightest exact
  bound with that order. Exact: a rejection rate never above ALPHA when H0 holds, and no assumption of
  symmetry. (Ordering by the score at each d0 instead, as Sidik does, makes p a sawtooth in d0: 16 up,
  35 down of 67 was rejected at -0.094 and not at -0.084, so no bound could agree with every test.)
  The p shown is this test's where it rejects; where it does not, the exact test's ordered at d0
  itself (the bound's order can give p = 1 for a small observed drop), unless that one would reject:
  below ALPHA exactly when the bound excludes d0. Two tasks both failing now: p = 0.25; four of eight:
  0.035 (McNemar's conditional test, 0.0625, is conservative there, and Tango's asymptotic interval
  disagreed with it); 8 of 20: 0.0059. The supremum over the nuisance is taken on a grid refined
  around its maximum.
* fractional per-task values (mean rewards): Tango's score test on the positive and
  negative parts of the differences, whose pass/fail variance bounds theirs (d**2 <= |d|); as in
  ``intervals`` (Korn-Graubard) the pairs are rescaled by how much less the differences vary than
  pass/fail ones would, shrunk by ``(z / t_df)**2`` with df the effective number of tasks carrying
  the spread (never below Tango itself), and then its p read on t with that df (normal otherwise).
  Assumption: differences vary smoothly between tasks; a rare total breakage on tasks the sample
  missed shows in no observed spread. A sign-flip test was rejected: it assumes differences
  symmetric about d0, which per-task means of different repeat counts (1 trial against 5) are not,
  and its inverse shrinks to a point with ties (20 unchanged tasks: [0, 0]).

The bounds have width with few or no changed tasks: 20 unchanged tasks bound the change to about
+-0.14, they do not prove it is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from statistics import NormalDist
from typing import Literal

from pytest_gym.core.taskrule import parse_task_rule
from pytest_gym.judge.intervals import t_cdf, t_ppf

CONFIDENCE = 0.95
#: One-sided level of every test and bound here: a drop is real below this p (``significant_drop``).
ALPHA = 0.05
# Differences closer to zero than this are ties (per-task means are sums of floats).
_TIE = 1e-12
# The supremum over the nuisance: this many grid points, then golden-section steps around the best.
_GRID = 16
_REFINE = 14
# Bounds are found to this width (in delta).
_BOUND_TOL = 1e-6

#: A ``--gym-task-pass`` rule: all, majority, any, or a share such as 0.8 or 4/5 (``core.taskrule``).
Rule = str
Flip = Literal["new_failure", "fixed", "flaky_failure", "flaky_fix"]


@dataclass(frozen=True)
class PairedTest:
    """Change from baseline to current on the shared tasks (current - baseline per task).

    ``p_drop`` is the one-sided p-value of "no drop" (H0: delta >= 0), ``p_beyond`` of "a drop of at
    most ``tolerance``" (H0: delta >= -tolerance; ``p_drop`` at tolerance 0). ``ci_low``/``ci_high`` are
    the one-sided ``1 - ALPHA`` bounds of ``mean_delta`` from the same tests (computed when first read):
    ``ci_high < -tolerance`` exactly when ``p_beyond < ALPHA``. ``flips_to_fail``/``flips_to_pass`` are
    the task hashes whose value crossed ``min_reward`` downwards/upwards, in the order of ``current``.
    ``mean_delta`` is None only when no task is shared, and then the bounds are [-1, 1] and both
    p-values 1: no evidence either way. ``exact``: the pass/fail test (else the fractional score test),
    on ``up``/``down`` changed mass of ``pairs`` pairs (rescaled for fractional values).
    """

    n_shared: int
    mean_delta: float | None
    p_drop: float
    method: str
    flips_to_fail: list[str] = field(default_factory=list)
    flips_to_pass: list[str] = field(default_factory=list)
    tolerance: float = 0.0
    p_beyond: float = 1.0
    up: float = 0.0
    down: float = 0.0
    pairs: float = 0.0
    exact: bool = False

    def significant_drop(self, alpha: float = ALPHA) -> bool:
        """The drop is unlikely under "no change": ``p_drop < alpha``."""
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        return self.p_drop < alpha

    def beyond_tolerance(self, alpha: float = ALPHA) -> bool:
        """A drop larger than ``tolerance`` is shown: ``p_beyond < alpha``."""
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        return self.p_beyond < alpha

    @cached_property
    def _bounds(self) -> tuple[float, float]:
        if self.pairs <= 0.0:
            return -1.0, 1.0
        if self.exact:
            n, up, down = round(self.pairs), round(self.up), round(self.down)
            return -exact_upper_bound(down, up, n), exact_upper_bound(up, down, n)
        return tango_interval(self.up, self.down, self.pairs, 1.0 - 2.0 * ALPHA)

    @property
    def ci_low(self) -> float:
        """One-sided 1 - ALPHA lower bound of the mean change."""
        return self._bounds[0]

    @property
    def ci_high(self) -> float:
        """One-sided 1 - ALPHA upper bound of the mean change: a drop beyond -ci_high is shown."""
        return self._bounds[1]


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


def flip(before: tuple[int, int], after: tuple[int, int], rule: Rule = "all") -> Flip | None:
    """How one task changed, from its (trials, successes) in the baseline and now; None: it did not flip.

    A flip is a change of the task's verdict under ``rule``. It is *stable* only when every baseline
    trial succeeded and every current one fails (``new_failure``), or the reverse (``fixed``); any
    other flip (``flaky_failure``, ``flaky_fix``) is one a task whose trials disagree makes by chance:
    a task succeeding with chance p flips stably by chance with p**kb * (1 - p)**kn, 0.07% at p = 0.9
    and 3 trials each, where "fails by rule" alone happened in 27%.
    """
    (n_before, c_before), (n_after, c_after) = before, after
    if n_before <= 0 or n_after <= 0:
        return None
    was, now = passes_by_count(n_before, c_before, rule), passes_by_count(n_after, c_after, rule)
    if was and not now:
        return "new_failure" if c_before == n_before and c_after == 0 else "flaky_failure"
    if now and not was:
        return "fixed" if c_before == 0 and c_after == n_after else "flaky_fix"
    return None


def min_pairs(tolerance: float = 0.0, alpha: float = ALPHA) -> int | None:
    """The fewest shared tasks that can show a drop beyond ``tolerance`` at all: every one of them failing now.

    That outcome's exact p is ((1 + t) / 2)**n (a task dropping with chance at most (1 + t) / 2 on the
    boundary): 5 tasks at t = 0 (p = 0.031; 4 give 0.0625), 6 at t = 0.1. Fewer is no evidence.
    None for t >= 1: no change is a drop beyond 1.
    """
    if tolerance >= 1.0:
        return None
    return math.floor(math.log(alpha) / math.log((1.0 + tolerance) / 2.0)) + 1


# --- the exact unconditional test for pass/fail pairs ---------------------------------------------------


@lru_cache(maxsize=256)
def _exact_thresholds(n: int, order: float, z_obs: float) -> tuple[int, ...]:
    """For each count N of changed tasks, the fewest drops v (of N) whose score is at most ``z_obs``; N + 1: none.

    Tango's score at ``order`` falls with every drop for fixed N (tests/unit/judge/test_paired.py checks it), so each
    N's outcomes as extreme as the observed one are v >= threshold; walking N up moves it a step or two.
    """
    limit = z_obs + 1e-9 * (1.0 + abs(z_obs)) if math.isfinite(z_obs) else z_obs
    out = []
    k = 0
    for total in range(n + 1):
        k = min(k, total + 1)
        while k > 0 and _tango_z(total - k + 1, k - 1, n, order) <= limit:
            k -= 1
        while k <= total and _tango_z(total - k, k, n, order) > limit:
            k += 1
        out.append(k)
    return tuple(out)


def _log_pmf(n: int, k: int, p: float) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def _pmf(n: int, k: int, p: float) -> float:
    """Binomial probability, 0 outside 0..n; p strictly between 0 and 1."""
    return math.exp(_log_pmf(n, k, p)) if 0 <= k <= n else 0.0


def _upper_tail(n: int, k: int, p: float) -> float:
    """P(Bin(n, p) >= k), summed from the short side until the terms stop counting; 0 < p < 1."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    ratio = p / (1.0 - p)
    if k > n * p:  # above the mode: terms fall from k upwards
        term = _pmf(n, k, p)
        total = 0.0
        j = k
        while j <= n and term > 1e-18 * total:
            total += term
            term *= (n - j) / (j + 1) * ratio
            j += 1
        return min(1.0, total)
    term = _pmf(n, k - 1, p)  # at or below the mode: 1 - P(V < k), terms fall from k - 1 downwards
    total = 0.0
    j = k - 1
    while j >= 0 and term > 1e-18 * total:
        total += term
        term *= j / ((n - j + 1) * ratio)
        j -= 1
    return max(0.0, 1.0 - total)


def _support(n: int, psi: float) -> tuple[int, list[float]]:
    """(first N, weights) of Bin(n, psi) where its probabilities are above 1e-18 of the largest; 0 < psi < 1."""
    mode = min(n, int((n + 1) * psi))
    peak = _pmf(n, mode, psi)
    ratio = psi / (1.0 - psi)
    upper = [peak]
    w, j = peak, mode
    while j < n:
        w *= (n - j) / (j + 1) * ratio
        j += 1
        if w < 1e-18 * peak:
            break
        upper.append(w)
    lower: list[float] = []
    w, j = peak, mode
    while j > 0:
        w *= j / ((n - j + 1) * ratio)
        j -= 1
        if w < 1e-18 * peak:
            break
        lower.append(w)
    return mode - len(lower), lower[::-1] + upper


def _region_probability(n: int, thresholds: Sequence[int], p_down: float, delta0: float) -> float:
    """P(as extreme as observed) when each task drops with chance ``p_down`` and rises with ``p_down + delta0``.

    Sums over the count N of changed tasks: P(N) * P(Bin(N, theta) >= threshold(N)), theta the share of
    changes that are drops, with both binomials walked by their ratio recurrences.
    """
    p_up = p_down + delta0
    psi = min(1.0, max(0.0, p_up + p_down))
    if psi <= 0.0:
        return 1.0 if thresholds[0] == 0 else 0.0
    theta = min(1.0, max(0.0, p_down / psi))
    if psi >= 1.0:
        first, weights = n, [1.0]
    else:
        first, weights = _support(n, psi)
    if theta <= 0.0 or theta >= 1.0:  # every change is a rise (no drop), or a drop
        reach = [0 if theta <= 0.0 else total for total in range(first, first + len(weights))]
        return math.fsum(w for w, r, k in zip(weights, reach, thresholds[first:], strict=False) if k <= r)
    ratio = theta / (1.0 - theta)
    total = first
    k = thresholds[total]
    mass = _pmf(total, k, theta)
    tail = _upper_tail(total, k, theta)
    acc = weights[0] * tail
    for w in weights[1:]:
        # total -> total + 1 at the same k: P(>= k) gains theta * P(= k - 1).
        if 0 < k <= total:
            tail += theta * mass * k / ((total - k + 1) * ratio)
            mass *= (total + 1) / (total + 1 - k) * (1.0 - theta)
        elif k == 0:
            mass *= 1.0 - theta
        total += 1
        target = thresholds[total]
        if k > total or mass < 1e-280 or abs(target - k) > 4:
            k = target
            mass, tail = _pmf(total, k, theta), _upper_tail(total, k, theta)
        while k < target:
            tail -= mass
            mass *= (total - k) / (k + 1) * ratio
            k += 1
        while k > target:
            mass *= k / ((total - k + 1) * ratio)
            k -= 1
            tail += mass
        acc += w * min(1.0, max(0.0, tail))
    return min(1.0, acc)


def buehler_order(up: int, down: int, n: int, alpha: float = ALPHA) -> float:
    """Where Tango's score orders the outcomes for the exact test of (up, down): the table's own score bound.

    Ordering every outcome by its Tango upper bound (a fixed order, independent of the data) puts o
    at least as extreme as the observed table exactly when o's score at the observed table's bound
    is at most the observed score there: so the order is the score's at this one change.
    """
    return tango_interval(up, down, n, 1.0 - 2.0 * alpha)[1] if n else 0.0


def exact_p(up: int, down: int, n: int, delta0: float = 0.0, order: float | None = None) -> float:
    """Exact unconditional one-sided p-value of H0: delta >= ``delta0`` (against a larger drop) from n pairs.

    ``up``/``down``: tasks that went fail -> pass / pass -> fail. The largest probability, over how often
    tasks change, of an outcome whose Tango score at ``order`` (default ``buehler_order``) is at most the
    observed one, on the boundary delta = ``delta0``: the supremum over all of H0, since fewer rises and
    more drops only add outcomes as extreme. One order for every ``delta0``: p never rises with it.
    """
    if min(up, down) < 0 or up + down > n:
        raise ValueError(f"need 0 <= up, down and up + down <= n, got up={up}, down={down}, n={n}")
    if n == 0 or delta0 <= -1.0:
        return 1.0
    delta0 = min(1.0, delta0)
    if order is None:
        order = buehler_order(up, down, n)
    thresholds = _exact_thresholds(n, order, _tango_z(up, down, n, order))
    low, high = max(0.0, -delta0), (1.0 - delta0) / 2.0

    def at(p_down: float) -> float:
        return _region_probability(n, thresholds, p_down, delta0)

    if high - low <= 1e-15:
        return min(1.0, at(low))
    grid = [low + (high - low) * i / _GRID for i in range(_GRID + 1)]
    values = [at(x) for x in grid]
    best = max(range(len(grid)), key=values.__getitem__)
    result = values[best]
    a, b = grid[max(0, best - 1)], grid[min(_GRID, best + 1)]
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - golden * (b - a), a + golden * (b - a)
    fc, fd = at(c), at(d)
    for _ in range(_REFINE):
        result = max(result, fc, fd)
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - golden * (b - a)
            fc = at(c)
        else:
            a, c, fc = c, d, fd
            d = a + golden * (b - a)
            fd = at(d)
    return min(1.0, max(result, fc, fd))


@lru_cache(maxsize=1024)
def exact_upper_bound(up: int, down: int, n: int, alpha: float = ALPHA) -> float:
    """The largest change delta0 the exact test (``exact_p``) does not reject at ``alpha``: the Buehler bound.

    A one-sided upper bound: every change above it is rejected, none below (the p-value falls with
    delta0). Found by regula falsi between the estimate and 1, started at Tango's bound, to
    ``_BOUND_TOL``; the returned end is the rejected one, so the bound errs wide.
    """
    order = buehler_order(up, down, n, alpha)
    if n == 0 or exact_p(up, down, n, 1.0, order) >= alpha:
        return 1.0

    def excess(delta0: float) -> float:  # <= 0 where not rejected, > 0 where rejected
        return alpha - exact_p(up, down, n, delta0, order)

    inside, outside = -1.0, 1.0
    estimate = (up - down) / n
    if excess(estimate) <= 0.0:
        inside = estimate
    if inside < order < outside:  # Tango's own bound: the exact one is near it
        if excess(order) > 0.0:
            outside = order
        else:
            inside = order
    return _crossing(excess, inside, outside, _BOUND_TOL)


def _exact_shown(up: int, down: int, n: int, delta0: float) -> float:
    """The p-value reported for H0: delta >= ``delta0``: the bound's test (``exact_p``), which decides.

    Where it does not reject, its p can be 1 for a small observed drop (the outcome "no task changed"
    is ranked beyond it, and is sure when no task can change): then the p of the exact test ordered at
    ``delta0`` itself is shown, unless that one would reject. Either way p < ALPHA exactly when the
    bound excludes ``delta0``.
    """
    p = exact_p(up, down, n, delta0)
    if p < ALPHA:
        return p
    own = exact_p(up, down, n, delta0, order=delta0)
    return own if own >= ALPHA else p


# --- Tango's score statistic: the exact test's ordering, and the fractional test ------------------------


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


def _crossing(excess: Callable[[float], float], inside: float, outside: float, tol: float = 1e-12) -> float:
    """Where a monotone ``excess`` turns positive between ``inside`` (<= 0) and ``outside``.

    Illinois regula falsi (bisecting while an end is infinite): a dozen evaluations instead
    of the ~55 of plain bisection. Returns the outer end of the final bracket (conservative).
    """
    if excess(outside) <= 0.0:
        return outside
    f_in, f_out = excess(inside), excess(outside)
    kept = 0  # which end stayed last time: -1 inside, +1 outside
    for _ in range(200):
        if abs(outside - inside) <= tol:
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


def _variance_scale(deltas: Sequence[float]) -> tuple[float, float | None]:
    """(how many pass/fail pairs each pair is worth, df when rescaled): pass/fail variance over observed, >= 1.

    Shrunk by ``(z / t_df)**2`` at the one-sided ALPHA, so the rescaled score test rejects where a t-test
    on df would. 1 (and df None) for 0/1 values, without spread, or when a few tasks carry it.
    """
    n = len(deltas)
    mean = math.fsum(deltas) / n
    residuals = [d - mean for d in deltas]
    ss = math.fsum(e * e for e in residuals)
    if n < 2 or ss <= _TIE * _TIE * n:
        return 1.0, None
    ratio = (math.fsum(abs(d) for d in deltas) / n - mean * mean) / (ss / n)
    if ratio <= 1.0:  # pass/fail values: exactly 1
        return 1.0, None
    df = min(n - 1.0, ss * ss / math.fsum(e**4 for e in residuals))
    scale = ratio * _shrink(df)
    return (scale, df) if scale > 1.0 else (1.0, None)


def _shrink(df: float) -> float:
    return float((NormalDist().inv_cdf(1.0 - ALPHA) / t_ppf(1.0 - ALPHA, df)) ** 2)


def _score_p(up: float, down: float, n: float, delta0: float, df: float | None) -> float:
    """One-sided p of the (rescaled) score test of H0: delta >= delta0; rescaled: a t p-value on df.

    Undoing the shrink turns the score into a t-like statistic; P(T_df <= it) is below ALPHA exactly
    where the score is below -z (the bound), and does not claim normal tails for a handful of tasks.
    """
    z = _tango_z(up, down, n, delta0)
    if df is None:
        return NormalDist().cdf(z) if math.isfinite(z) else (0.0 if z < 0 else 1.0)
    return t_cdf(z / math.sqrt(_shrink(df)), df)


def paired_test(
    baseline: Mapping[str, float],
    current: Mapping[str, float],
    *,
    min_reward: float = 1.0,
    tolerance: float = 0.0,
) -> PairedTest:
    """Compare per-task values (pass 0/1 or mean reward in [0, 1]) keyed by task hash.

    All-0/1 values use the exact unconditional test, anything else the rescaled score test; both at
    delta0 = 0 (``p_drop``) and delta0 = -``tolerance`` (``p_beyond``). Values outside [0, 1] or NaN
    raise ValueError.
    """
    if not (math.isfinite(tolerance) and 0.0 <= tolerance <= 1.0):
        raise ValueError(f"tolerance must be in [0, 1], got {tolerance!r}")
    shared = [h for h in current if h in baseline]
    before = {h: _unit(baseline[h], f"baseline value of {h[:12]}") for h in shared}
    after = {h: _unit(current[h], f"current value of {h[:12]}") for h in shared}
    flips_to_fail = [h for h in shared if before[h] >= min_reward > after[h]]
    flips_to_pass = [h for h in shared if after[h] >= min_reward > before[h]]
    n = len(shared)
    if n == 0:
        return PairedTest(0, None, 1.0, "no shared tasks", flips_to_fail, flips_to_pass, tolerance, 1.0)

    deltas = [after[h] - before[h] for h in shared]
    up = math.fsum(d for d in deltas if d > 0.0)
    down = -math.fsum(d for d in deltas if d < 0.0)
    mean_delta = math.fsum(deltas) / n
    if all(v in (0.0, 1.0) for v in (*before.values(), *after.values())):
        ups, downs = round(up), round(down)
        p_drop = _exact_shown(ups, downs, n, 0.0)
        p_beyond = _exact_shown(ups, downs, n, -tolerance) if tolerance > 0.0 else p_drop
        method = "exact unconditional test (one-sided, pass/fail)"
        return PairedTest(
            n, mean_delta, p_drop, method, flips_to_fail, flips_to_pass, tolerance, p_beyond, up, down, n, True
        )
    scale, df = _variance_scale(deltas)
    p_drop = _score_p(scale * up, scale * down, scale * n, 0.0, df)
    p_beyond = _score_p(scale * up, scale * down, scale * n, -tolerance, df) if tolerance > 0.0 else p_drop
    method = "score test (one-sided, fractional: rescaled Tango" + (f", t on {df:.3g} df)" if df else ")")
    return PairedTest(
        n, mean_delta, p_drop, method, flips_to_fail, flips_to_pass, tolerance, p_beyond,
        scale * up, scale * down, scale * n, False,
    )  # fmt: skip
