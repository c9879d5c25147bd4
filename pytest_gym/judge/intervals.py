"""Interval for a suite's mean reward that keeps its coverage from one task up, standard library only.

Method: Clopper-Pearson on an effective sample size, clusters = tasks (Korn & Graubard 1998,
the survey-statistics method for proportions from clustered samples):

* ``n_eff = mean * (1 - mean) / var``, ``var`` the task-clustered (CR1) variance of the
  trial-weighted mean: the pass/fail trials (``mean * (1 - mean)`` the variance of one) that
  would be as precise as the observed spread between tasks.
* shrunk by ``(z / t_df)**2``, df = effective number of tasks carrying the spread
  (``(sum e^2)^2 / sum e^4``, at most tasks - 1): one failing task among 100 gives df ~ 1.
* at least N**2 / sum(m_g**2), the Kish effective number of tasks (fully correlated repeats,
  valid for any reward in [0, 1]), and for pass/fail rewards at most N, the trials (independent
  trials). Fractional rewards have no upper cap: a reward of partial credit varies less than a
  pass/fail one of the same mean, so a trial can be worth more than one pass/fail trial (the cap
  made their interval 1.8-2.3x a cluster bootstrap's; without it coverage stays >= 0.95 in
  tests/unit/judge/test_interval_coverage.py's simulations). One task or no spread (all pass, all fail, all equal)
  gets the lower end: wide, never a point; and no run with a failure gets a higher lower bound
  than all passing (nor, mirrored, for the upper bound).
* so ``ci_low`` can never exceed 0.025**(1 / Kish effective tasks), 0.025**(1 / tasks) with
  equal repeats, reached when every trial passes: 0.158 at 2 tasks, 0.692 at 10. ``ci_low >= 0.95``
  needs at least 72 tasks, ``>= 0.9`` 36, ``>= 0.99`` 368, however many repeats each has
  (``ceiling``, and ``tasks_needed`` counts from it).

Why: a t-interval leaves [0, 1] and collapses at zero spread; Wilson and Jeffreys undercover
near 0 and 1 at small n, where gates such as ``ci_low >= 0.95`` sit; Clopper-Pearson is
conservative there. tests/unit/judge/test_interval_coverage.py computes the exact coverage for pass/fail rewards
(every outcome enumerated: up to 30 tasks, 1-5 repeats, a grid of means and task heterogeneity)
and simulates it for 1-300 tasks, 1-8 repeats, pass/fail and fractional rewards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from statistics import NormalDist

CONFIDENCE = 0.95
# RMS deviation per trial below which the spread is treated as exactly zero (float noise).
_ZERO_SPREAD = 1e-9


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta I_x(a, b) with y = 1 - x passed in to keep its digits.

    Numerical Recipes' continued fraction (modified Lentz), as in pytest_gym.stats.
    """
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1_000_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _beta_ppf_start(q: float, a: float, b: float) -> float:
    """Numerical Recipes' first guess for the beta quantile (3rd ed., ``Beta::invbetai``)."""
    if a >= 1.0 and b >= 1.0:
        pp = q if q < 0.5 else 1.0 - q
        t = math.sqrt(-2.0 * math.log(pp))
        z = (2.30753 + t * 0.27061) / (1.0 + t * (0.99229 + t * 0.04481)) - t
        z = -z if q < 0.5 else z
        al = (z * z - 3.0) / 6.0
        h = 2.0 / (1.0 / (2.0 * a - 1.0) + 1.0 / (2.0 * b - 1.0))
        skew = (1.0 / (2.0 * b - 1.0) - 1.0 / (2.0 * a - 1.0)) * (al + 5.0 / 6.0 - 2.0 / (3.0 * h))
        w = z * math.sqrt(al + h) / h - skew
        return a / (a + b * math.exp(min(2.0 * w, 700.0)))
    # Tail approximations I_x ~ x**a / (a w) near 0 and 1 - I_x ~ (1 - x)**b / (b w) near 1.
    t = math.exp(a * math.log(a / (a + b))) / a
    u = math.exp(b * math.log(b / (a + b))) / b
    w = t + u
    if q < t / w:
        return float((a * w * q) ** (1.0 / a))
    return 1.0 - float((b * w * (1.0 - q)) ** (1.0 / b))


def beta_ppf(q: float, a: float, b: float) -> float:
    """Quantile of Beta(a, b): the x with I_x(a, b) = q.

    Halley steps on the CDF from Numerical Recipes' first guess, kept inside a shrinking
    bisection bracket, so it converges for every shape (a or b below 1 included).
    """
    if not (a > 0.0 and b > 0.0 and math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"beta parameters must be positive and finite, got a={a!r}, b={b!r}")
    if q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    log_norm = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    lo, hi = 0.0, 1.0
    x = _beta_ppf_start(q, a, b)
    if math.isnan(x):
        x = a / (a + b)
    for _ in range(300):
        if not 0.0 < x < 1.0:  # the quantile is closer to 0 or 1 than a float can say
            return min(1.0, max(0.0, x))
        f = _betainc(a, b, x, 1.0 - x) - q
        if f == 0.0:
            return x
        if f < 0.0:
            lo = x
        else:
            hi = x
        log_density = (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x) - log_norm
        nxt = -1.0  # outside the bracket: bisect
        if abs(log_density) < 700.0:
            u = f / math.exp(log_density)
            halley = 1.0 - 0.5 * u * ((a - 1.0) / x - (b - 1.0) / (1.0 - x))
            nxt = x - u / min(2.0, max(0.5, halley))
            if abs(nxt - x) <= 1e-14 * x:
                return min(hi, max(lo, nxt))
        if not lo < nxt < hi:  # bisect, geometrically in the far lower tail
            if lo == 0.0:
                nxt = hi * hi if hi < 1e-3 else hi / 2.0
            else:
                nxt = math.sqrt(lo * hi) if hi > 1e3 * lo else (lo + hi) / 2.0
        if hi - lo <= 1e-15 * hi:
            return nxt
        x = nxt
    return x


def t_ppf(p: float, df: float) -> float:
    """Student-t quantile for real df > 0.

    From df 8 up: Fisher's expansion around the normal quantile (Abramowitz & Stegun 26.7.5),
    below df 1000 polished by Newton steps on the exact CDF: a few times faster than inverting
    the beta CDF, which is what smaller df use.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if not df > 0.0:
        raise ValueError(f"df must be positive, got {df!r}")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df < 8.0:
        # P(|T| > t) = I_x(df/2, 1/2) with x = df/(df+t^2); solve for the smaller of x and 1 - x.
        tail = 2.0 * (1.0 - p)
        if tail <= 0.5:
            x = beta_ppf(tail, df / 2.0, 0.5)
            return math.sqrt(df * (1.0 - x) / x)
        y = beta_ppf(1.0 - tail, 0.5, df / 2.0)
        return math.sqrt(df * y / (1.0 - y))
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    g1 = z * (z2 + 1.0) / 4.0
    g2 = z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0
    g3 = z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0
    g4 = z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0
    t = z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df
    if df >= 1000.0:  # the expansion is exact to rounding here, the CDF is not
        return t
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    for _ in range(8):
        upper_tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))  # P(T > t)
        density = math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))
        step = (upper_tail - (1.0 - p)) / density
        t += step
        if abs(step) <= 1e-13 * t:
            break
    return t


def t_cdf(t: float, df: float) -> float:
    """Student-t distribution function for real df > 0: P(T <= t)."""
    if not df > 0.0:
        raise ValueError(f"df must be positive, got {df!r}")
    if math.isnan(t):
        raise ValueError("t must not be NaN")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))  # P(T > |t|)
    return tail if t < 0 else 1.0 - tail


def clopper_pearson(successes: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact binomial interval, extended to non-integer successes and n through the beta quantiles."""
    _check_confidence(confidence)
    if not (n > 0.0 and math.isfinite(n)):
        raise ValueError(f"n must be positive and finite, got {n!r}")
    if not 0.0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes!r}, n={n!r}")
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if successes <= 0.0 else beta_ppf(tail, successes, n - successes + 1.0)
    # 1 - I_x(s + 1, n - s) = I_{1-x}(n - s, s + 1): solve in the small tail for accuracy near 1.
    high = 1.0 if successes >= n else 1.0 - beta_ppf(tail, n - successes, successes + 1.0)
    return low, high


def _task_totals(groups: Sequence[Sequence[float]]) -> tuple[list[int], list[float]]:
    """(trials, reward sum) of each non-empty task; NaN, infinities and rewards outside [0, 1] raise ValueError.

    Checks whole tasks at C speed and looks for the culprit only when something is wrong.
    """
    measured = [g for g in groups if len(g) > 0]
    if not measured:
        raise ValueError("no rewards: an interval needs at least one task with at least one trial")
    flat = list(chain.from_iterable(measured))
    try:
        sums = list(map(math.fsum, measured))  # a NaN makes its sum NaN
        valid = min(flat) >= 0.0 and max(flat) <= 1.0 and not any(map(math.isnan, sums))
    except ValueError:  # fsum of inf and -inf
        valid = False
    if not valid:
        for index, group in enumerate(groups):
            bad = [r for r in group if not 0.0 <= r <= 1.0]  # NaN fails every comparison
            if bad:
                raise ValueError(f"task {index}: rewards must be in [0, 1], got {bad[0]!r}")
    return [len(g) for g in measured], sums


@dataclass(frozen=True)
class Evidence:
    """What a suite's rewards are worth: trial-weighted mean and effective pass/fail trials.

    ``n_floor`` is the Kish effective number of tasks, what n_eff falls back to without a
    usable spread (see the module docstring).
    """

    mean: float
    n_eff: float
    n_floor: float
    tasks: int
    trials: int


def evidence(groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE) -> Evidence:
    """Mean and effective sample size of per-task rewards, as described in the module docstring.

    Empty groups (tasks whose trials all errored) are skipped, as in ``suite_stats``.
    """
    _check_confidence(confidence)
    sizes, sums = _task_totals(groups)
    trials = sum(sizes)
    square_sizes = sum(m * m for m in sizes)
    mean = min(1.0, max(0.0, math.fsum(sums) / trials))
    n_floor = trials * trials / square_sizes
    tasks = len(sizes)
    residuals = [s - m * mean for s, m in zip(sums, sizes, strict=True)]
    ss = math.fsum(e * e for e in residuals)
    spread = mean * (1.0 - mean)
    if tasks < 2 or spread <= 0.0 or ss <= _ZERO_SPREAD**2 * square_sizes:
        return Evidence(mean, n_floor, n_floor, tasks, trials)
    variance = tasks / (tasks - 1) * ss / (trials * trials)
    df = min(tasks - 1.0, ss * ss / math.fsum(e**4 for e in residuals))
    p = 0.5 + confidence / 2.0
    shrink = (NormalDist().inv_cdf(p) / t_ppf(p, df)) ** 2
    n_eff = max(n_floor, spread / variance * shrink)
    if _pass_fail(groups):  # a pass/fail trial is worth at most one; partial credit varies less, and may be worth more
        n_eff = min(float(trials), n_eff)
    return Evidence(mean, n_eff, n_floor, tasks, trials)


def _pass_fail(groups: Sequence[Sequence[float]]) -> bool:
    return all(r == 0.0 or r == 1.0 for g in groups for r in g)


def _interval(mean: float, n_eff: float, n_floor: float, confidence: float) -> tuple[float, float]:
    low, high = clopper_pearson(min(mean * n_eff, n_eff), n_eff, confidence)
    # Monotone at the edges: a run with a failure never gets a higher lower bound than one where
    # every trial passed (which uses the floor), nor one with a success a lower upper bound than all failing.
    best_low = ((1.0 - confidence) / 2.0) ** (1.0 / n_floor)  # Clopper-Pearson lower bound of n_floor of n_floor
    return min(low, best_low), max(high, 1.0 - best_low)


def suite_interval(groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Interval for the suite's mean reward; ``groups`` holds each task's rewards (in [0, 1]).

    Always inside [0, 1] and never a single point; see the module docstring for the method.
    Raises ValueError without any reward, or for a reward that is NaN or outside [0, 1].
    """
    ev = evidence(groups, confidence)
    return _interval(ev.mean, ev.n_eff, ev.n_floor, confidence)


def ci_low_ceiling(tasks: float, confidence: float = CONFIDENCE) -> float:
    """The highest lower bound ``tasks`` (Kish effective) tasks can give: every trial of every task passing.

    (1 - confidence) / 2 to the power 1 / tasks, whatever the repeats: 0.158 at 2 tasks, 0.692 at 10.
    """
    _check_confidence(confidence)
    return float(((1.0 - confidence) / 2.0) ** (1.0 / tasks))


def tasks_for_ceiling(threshold: float, confidence: float = CONFIDENCE) -> int | None:
    """The fewest tasks (equal repeats) whose lower bound can reach ``threshold`` at all; None when none can.

    ``ci_low >= 0.9`` needs 36, ``>= 0.95`` 72, ``>= 0.99`` 368.
    """
    _check_confidence(confidence)
    if threshold >= 1.0:
        return None
    if threshold <= 0.0:
        return 1
    tail = (1.0 - confidence) / 2.0
    tasks = max(1, math.floor(math.log(tail) / math.log(threshold)))
    while ci_low_ceiling(tasks, confidence) < threshold:
        tasks += 1
    return tasks


def tasks_needed(
    groups: Sequence[Sequence[float]],
    threshold: float,
    confidence: float = CONFIDENCE,
    max_tasks: int = 1_000_000,
) -> int | None:
    """How many more tasks the gate ``ci_low >= threshold`` needs, if the suite kept its mean.

    0 when the lower bound already clears. Otherwise assumes new tasks keep the observed mean
    and the effective trials per task of this run (which errs towards more tasks, as the
    small-sample shrinkage fades with more tasks). Never fewer than ``ci_low_ceiling`` allows: a suite
    whose every trial passes needs ``tasks_for_ceiling(threshold)`` tasks in all. None when it can never
    clear (mean at or below the threshold) or would need more than ``max_tasks`` tasks in all.
    """
    ev = evidence(groups, confidence)
    tasks = ev.tasks

    def clears(total_tasks: int) -> bool:
        scale = total_tasks / tasks
        return _interval(ev.mean, ev.n_eff * scale, ev.n_floor * scale, confidence)[0] >= threshold

    if clears(tasks):
        return 0
    if ev.mean <= threshold:
        return None
    low, high = tasks, tasks * 2
    while not clears(high):
        if high >= max_tasks:
            return None
        low, high = high, min(high * 2, max_tasks)
    while high - low > 1:  # clears(high) and not clears(low)
        mid = (low + high) // 2
        if clears(mid):
            high = mid
        else:
            low = mid
    return high - tasks
