"""Suite statistics over trial rewards: pass@k, pass^k, mean reward and a task-clustered CI.

Pure functions, no pytest and no I/O, so the numbers can be checked by hand and against Gym.

How these map to NeMo Gym 0.7 (``nemo_gym/reward_profile.py``):

* ``mean_reward`` is Gym's ``mean/reward``: ``RewardProfiler.profile_from_data`` takes the
  plain mean over every scored rollout (masked ones dropped), so tasks are weighted by how
  many trials they have. With equal repeats this equals the mean of per-task means, which is
  also Gym's ``pass@1[avg-of-n]/accuracy`` divided by 100.
* ``pass_at[k]`` is Gym's ``pass@k/accuracy`` divided by 100 (Gym reports 0-100), as computed
  by ``compute_pass_majority_metrics`` (what ``/aggregate_metrics`` merges in when a resources
  server, e.g. ``resources_servers/mcqa/app.py``, overrides ``compute_metrics`` with it).
  Gym's success rule: only when *every* reward of a task is in {0, 1} does it use the
  combinatorial estimator, counting a rollout as a success when its reward is truthy, i.e.
  ``== 1``; a task with any other reward gets ``max(rewards[:k])`` instead, which depends on
  rollout order and is not a probability. Gym then averages with equal weight per task, over
  the tasks that have at least k rollouts.
  Ours counts a success as ``reward >= min_reward`` and always uses the estimator. So for 0/1
  rewards and any ``0 < min_reward <= 1`` (the default 1.0 included) the two agree exactly;
  for continuous rewards ours stays a probability of reaching ``min_reward`` and Gym's does not.
  We report k only up to the fewest trials any measured task has, so every task counts for
  every k, where Gym would drop the short tasks from larger k.
* ``pass^k`` (all k of k succeed) has no Gym counterpart.
* The CI is ours: Gym's ``ci_*_95_across_repeats`` treats repeats as the samples, while this
  one treats tasks as the samples, because repeats of one row share its difficulty.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

CONFIDENCE = 0.95


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")


@lru_cache(maxsize=65536)
def _pass_at_exact(n: int, c: int, k: int) -> Fraction:
    _check_counts(n, c, k)
    if n - c < k:
        return Fraction(1)
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@lru_cache(maxsize=65536)
def _pass_hat_exact(n: int, c: int, k: int) -> Fraction:
    _check_counts(n, c, k)
    return Fraction(math.comb(c, k), math.comb(n, k))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that at least one of k trials drawn from n (c successes) succeeds.

    Chen et al. 2021; computed exactly on integers so a gate such as ``pass@4 >= 0.9`` is not
    decided by rounding.
    """
    return float(_pass_at_exact(n, c, k))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all k trials drawn without replacement from n (c successes) succeed."""
    return float(_pass_hat_exact(n, c, k))


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile, so the CI needs no scipy at runtime.

    Inverts the CDF (regularized incomplete beta) by bisection: slower than a closed-form
    approximation but accurate to ~1e-12 for every df, including 1 and 2 where the usual
    approximations are poor.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not df > 0 or math.isinf(df):
        raise ValueError(f"df must be a positive finite number, got {df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    tail = 2.0 * (1.0 - p)  # two-sided tail probability to reach

    def two_sided_tail(t: float) -> float:
        # Both x and 1 - x are formed directly: subtracting from 1 loses digits at large df.
        return _betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))

    lo, hi = 0.0, 1.0
    while two_sided_tail(hi) > tail:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if two_sided_tail(mid) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * hi:
            break
    return (lo + hi) / 2.0


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta I_x(a, b), y = 1 - x (Numerical Recipes, Lentz continued fraction)."""
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
    for m in range(1, 100_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            delta = d * c
            h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return h


def _t_interval(mean: float, se: float, df: int) -> tuple[float, float]:
    half = t_quantile(0.5 + CONFIDENCE / 2.0, df) * se
    return mean - half, mean + half


@dataclass
class TaskStats:
    """What the trials of one task add up to."""

    task_hash: str
    n: int
    successes: int
    mean_reward: float | None
    pass_at: dict[int, float]
    pass_hat: dict[int, float]
    errors: int = 0
    min_reward: float = 1.0

    @property
    def passed(self) -> bool:
        """A task passes when its mean reward reaches min_reward (all trials, for 0/1 rewards).

        A task with no reward has no verdict and does not pass.
        """
        return self.mean_reward is not None and self.mean_reward >= self.min_reward

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_hash": self.task_hash,
            "n": self.n,
            "successes": self.successes,
            "errors": self.errors,
            "mean_reward": self.mean_reward,
            "passed": self.passed,
            "pass_at": {str(k): v for k, v in self.pass_at.items()},
            "pass_hat": {str(k): v for k, v in self.pass_hat.items()},
        }


def _finite_rewards(task_hash: str, rewards: Sequence[float]) -> list[float]:
    values = [float(r) for r in rewards]
    bad = [r for r in values if not math.isfinite(r)]
    if bad:
        raise ValueError(f"task {task_hash[:12]}: rewards must be finite, got {bad[0]!r}; count such trials as errors")
    return values


def task_stats(task_hash: str, rewards: Sequence[float], min_reward: float, errors: int = 0) -> TaskStats:
    """Per-task numbers; ``errors`` are trials that produced no reward and are not in ``rewards``.

    Non-finite rewards raise ValueError: a NaN would silently poison every mean downstream.
    """
    values = _finite_rewards(task_hash, rewards)
    n = len(values)
    c = sum(1 for r in values if r >= min_reward)
    return TaskStats(
        task_hash=task_hash,
        n=n,
        successes=c,
        mean_reward=math.fsum(values) / n if n else None,
        pass_at={k: pass_at_k(n, c, k) for k in range(1, n + 1)},
        pass_hat={k: pass_hat_k(n, c, k) for k in range(1, n + 1)},
        errors=errors,
        min_reward=min_reward,
    )


@dataclass
class SuiteStats:
    """Numbers for a whole run, the ones gates and baselines are judged on.

    ``tasks`` counts every task, including those whose trials all errored; those have no
    reward, so they are left out of the means, pass@k and the CI and only show in
    ``error_rate``. ``ci_low``/``ci_high`` are None with fewer than two measured tasks (see
    ``suite_stats``).
    """

    tasks: int
    trials: int
    errors: int
    error_rate: float
    mean_reward: float | None
    ci_low: float | None
    ci_high: float | None
    pass_at: dict[int, float]
    pass_hat: dict[int, float]
    per_task: dict[str, TaskStats] = field(default_factory=dict)
    min_reward: float = 1.0

    @property
    def max_k(self) -> int:
        """Largest k that pass@k is reported for: the fewest trials any measured task has."""
        return max(self.pass_at, default=0)

    def to_dict(self, per_task: bool = True) -> dict[str, Any]:
        """JSON-ready form; k keys become strings as JSON requires."""
        out: dict[str, Any] = {
            "tasks": self.tasks,
            "trials": self.trials,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "mean_reward": self.mean_reward,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "min_reward": self.min_reward,
            "pass_at": {str(k): v for k, v in self.pass_at.items()},
            "pass_hat": {str(k): v for k, v in self.pass_hat.items()},
        }
        if per_task:
            out["per_task"] = {h: ts.to_dict() for h, ts in self.per_task.items()}
        return out


def clustered_mean_ci(groups: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """95% CI of the overall (trial-weighted) mean with a cluster-robust SE, clusters = tasks.

    Repeats of one row are correlated (same difficulty), so the effective sample size is
    nearer the number of tasks than the number of trials. The SE is the CR1 sandwich
    ``sqrt(G/(G-1) * sum_g (sum_j (y_gj - mean))**2) / N``, which for equal repeats is the
    SE of the task means; the quantile is Student-t with G-1 degrees of freedom. Returns
    None below two non-empty groups, where the spread between tasks cannot be estimated
    (Gym's own ``_confidence_interval`` also gives none for n <= 1): reporting
    ``[mean, mean]`` would claim certainty a single row cannot give.
    """
    measured = [list(g) for g in groups if len(g) > 0]
    g_count = len(measured)
    if g_count < 2:
        return None
    total = sum(len(g) for g in measured)
    mean = math.fsum(r for g in measured for r in g) / total
    residual_sq = math.fsum(math.fsum(r - mean for r in g) ** 2 for g in measured)
    se = math.sqrt(g_count / (g_count - 1) * residual_sq) / total
    return _t_interval(mean, se, g_count - 1)


def _exact_mean(weighted: Sequence[tuple[Fraction, int]]) -> float:
    """Average before rounding, so that tasks at exactly 0.7 make a suite at 0.7, not 0.6999..."""
    total = sum((value * weight for value, weight in weighted), Fraction(0))
    return float(total / sum(weight for _, weight in weighted))


def suite_stats(
    per_task: Mapping[str, Sequence[float]],
    min_reward: float,
    errors_by_task: Mapping[str, int] | None = None,
) -> SuiteStats:
    """Aggregate rewards by task hash; tasks only in ``errors_by_task`` count as fully errored."""
    errors_by_task = errors_by_task or {}
    hashes = list(per_task) + [h for h in errors_by_task if h not in per_task]
    tasks = {h: task_stats(h, per_task.get(h, ()), min_reward, errors_by_task.get(h, 0)) for h in hashes}
    measured = [ts for ts in tasks.values() if ts.n > 0]
    trials = sum(ts.n for ts in measured)
    errors = sum(ts.errors for ts in tasks.values())
    error_rate = errors / (trials + errors) if trials + errors else 0.0

    mean_reward: float | None = None
    ci: tuple[float, float] | None = None
    pass_at: dict[int, float] = {}
    pass_hat: dict[int, float] = {}
    if measured:
        groups = [_finite_rewards(ts.task_hash, per_task[ts.task_hash]) for ts in measured]
        mean_reward = math.fsum(r for g in groups for r in g) / trials
        ci = clustered_mean_ci(groups)
        max_k = min(ts.n for ts in measured)
        shapes = Counter((ts.n, ts.successes) for ts in measured)  # few distinct (n, c): sum each once
        for k in range(1, max_k + 1):
            pass_at[k] = _exact_mean([(_pass_at_exact(n, c, k), w) for (n, c), w in shapes.items()])
            pass_hat[k] = _exact_mean([(_pass_hat_exact(n, c, k), w) for (n, c), w in shapes.items()])

    return SuiteStats(
        tasks=len(tasks),
        trials=trials,
        errors=errors,
        error_rate=error_rate,
        mean_reward=mean_reward,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        pass_at=pass_at,
        pass_hat=pass_hat,
        per_task=tasks,
        min_reward=min_reward,
    )


@dataclass(frozen=True)
class PairedDiff:
    """Change in per-task mean reward on the tasks both runs measured (current - baseline).

    Pairing by task removes the between-task variance that dominates an unpaired comparison,
    so a small but consistent drop is detectable with few tasks.
    """

    n_shared: int
    mean_delta: float | None
    ci_low: float | None
    ci_high: float | None
    deltas: dict[str, float] = field(default_factory=dict)

    @property
    def significant_drop(self) -> bool:
        """The whole 95% CI of the change is below zero."""
        return self.ci_high is not None and self.ci_high < 0.0


def paired_difference(baseline: Mapping[str, float], current: Mapping[str, float]) -> PairedDiff:
    """Paired t-interval on per-task mean rewards; the CI is None with fewer than two shared tasks."""
    shared = [h for h in current if h in baseline]
    deltas = {h: float(current[h]) - float(baseline[h]) for h in shared}
    if any(not math.isfinite(d) for d in deltas.values()):
        raise ValueError("per-task mean rewards must be finite")
    n = len(deltas)
    if n == 0:
        return PairedDiff(0, None, None, None, deltas)
    mean = math.fsum(deltas.values()) / n
    if n < 2:
        return PairedDiff(n, mean, None, None, deltas)
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in deltas.values()) / (n - 1))
    low, high = _t_interval(mean, sd / math.sqrt(n), n - 1)
    return PairedDiff(n, mean, low, high, deltas)
