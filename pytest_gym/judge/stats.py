"""Suite statistics over trial rewards: pass@k, pass^k, mean reward, its interval, flaky tasks.

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
* The interval is ours (``pytest_gym.judge.intervals.suite_interval``): Gym's
  ``ci_*_95_across_repeats`` treats repeats as the samples, while this one treats tasks as the
  samples, because repeats of one row share its difficulty; it stays inside [0, 1] and is wide,
  never a point, for one task or no spread.
* A task *passes* by ``rule`` (``--gym-task-pass``): all its trials reach ``min_reward``
  (default), more than half of them, or any; a task whose trials disagree is *flaky*, and
  ``flaky_rate`` is the chance that two trials of one task disagree (the same for a policy at
  any number of repeats).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

from pytest_gym.judge.intervals import CONFIDENCE, suite_interval
from pytest_gym.judge.paired import Rule, passes_by_count

__all__ = ["CONFIDENCE", "SuiteStats", "TaskStats", "pass_at_k", "pass_hat_k", "suite_stats", "task_stats"]


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
    rule: Rule = "all"

    @property
    def passed(self) -> bool:
        """Its trials reaching min_reward under ``rule`` (default: every one of them).

        A task with no reward has no verdict and does not pass.
        """
        return passes_by_count(self.n, self.successes, self.rule)

    @property
    def flaky(self) -> bool:
        """Its trials disagree: some reach min_reward and some do not."""
        return 0 < self.successes < self.n

    @property
    def disagreement(self) -> float | None:
        """The chance that two of its trials disagree, estimated without bias: 2c(n-c) / (n(n-1)).

        Its expectation is 2p(1-p) for a task succeeding with chance p, whatever the number of trials
        n >= 2 (the share of tasks with *some* disagreement, 1 - p**n - (1-p)**n, grows with n). None
        below two trials.
        """
        return _disagreement(self.n, self.successes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_hash": self.task_hash,
            "n": self.n,
            "successes": self.successes,
            "errors": self.errors,
            "mean_reward": self.mean_reward,
            "passed": self.passed,
            "flaky": self.flaky,
            "pass_at": {str(k): v for k, v in self.pass_at.items()},
            "pass_hat": {str(k): v for k, v in self.pass_hat.items()},
        }


def mean_of(values: Sequence[float]) -> float | None:
    """The exact-sum mean of finite numbers (None for none), also when their sum is beyond a float (rewards of
    1.7e308 twice: ``fsum`` overflows, the mean does not)."""
    if not values:
        return None
    try:
        return math.fsum(values) / len(values)
    except OverflowError:
        return math.fsum(v / len(values) for v in values)


def _disagreement(n: int, c: int) -> float | None:
    return float(Fraction(2 * c * (n - c), n * (n - 1))) if n >= 2 else None


def _finite_rewards(task_hash: str, rewards: Sequence[float]) -> list[float]:
    values = [float(r) for r in rewards]
    bad = [r for r in values if not math.isfinite(r)]
    if bad:
        raise ValueError(f"task {task_hash[:12]}: rewards must be finite, got {bad[0]!r}; count such trials as errors")
    return values


def task_stats(
    task_hash: str, rewards: Sequence[float], min_reward: float, errors: int = 0, rule: Rule = "all"
) -> TaskStats:
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
        mean_reward=mean_of(values),
        pass_at={k: pass_at_k(n, c, k) for k in range(1, n + 1)},
        pass_hat={k: pass_hat_k(n, c, k) for k in range(1, n + 1)},
        errors=errors,
        min_reward=min_reward,
        rule=rule,
    )


@dataclass
class SuiteStats:
    """Numbers for a whole run, the ones gates and baselines are judged on.

    ``tasks`` counts every task, including those whose trials all errored; those have no
    reward, so they are left out of the means, pass@k and the interval and only show in
    ``error_rate``. ``ci_low``/``ci_high`` are None without any reward, or when a reward is
    outside [0, 1] (the interval's method needs bounded rewards): ``ci_note`` says which.
    ``rewards`` keeps every measured task's rewards, for ``tasks_needed``.
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
    ci_note: str | None = None
    rewards: dict[str, list[float]] = field(default_factory=dict, repr=False)

    @property
    def max_k(self) -> int:
        """Largest k that pass@k is reported for: the fewest trials any measured task has."""
        return max(self.pass_at, default=0)

    @property
    def flaky(self) -> list[str]:
        """Hashes of the tasks whose trials disagree (0 < successes < n), in task order."""
        return [h for h, ts in self.per_task.items() if ts.flaky]

    @property
    def flaky_rate(self) -> float | None:
        """The chance that two trials of a task disagree, averaged over the tasks with at least two trials.

        A threshold means the same at any --gym-repeats: a policy right with chance 0.9 on every task has
        0.18 at k = 2, 5 or 8 (the share of flaky tasks was 0.18/0.41/0.57). None when no task has two
        trials (nothing can disagree).
        """
        values = [d for ts in self.per_task.values() if (d := ts.disagreement) is not None]
        return math.fsum(values) / len(values) if values else None

    def flaky_rate_range(self) -> tuple[float, float] | None:
        """The lowest and highest ``flaky_rate`` over every way the errored trials could have gone.

        Each task's errored trials are counted as any mix of successes and failures, the mix chosen per
        task to make the rate lowest (highest). None when no task would have two trials.
        """
        low: list[float] = []
        high: list[float] = []
        for ts in self.per_task.values():
            trials = ts.n + ts.errors
            if trials >= 2:
                values = [float(Fraction(2 * c * (trials - c), trials * (trials - 1)))
                          for c in range(ts.successes, ts.successes + ts.errors + 1)]  # fmt: skip
                low.append(min(values))
                high.append(max(values))
        if not low:
            return None
        return math.fsum(low) / len(low), math.fsum(high) / len(high)

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
            "flaky_rate": self.flaky_rate,
        }
        if per_task:
            out["per_task"] = {h: ts.to_dict() for h, ts in self.per_task.items()}
        return out


def _exact_mean(weighted: Sequence[tuple[Fraction, int]]) -> float:
    """Average before rounding, so that tasks at exactly 0.7 make a suite at 0.7, not 0.6999..."""
    total = sum((value * weight for value, weight in weighted), Fraction(0))
    return float(total / sum(weight for _, weight in weighted))


def suite_stats(
    per_task: Mapping[str, Sequence[float]],
    min_reward: float,
    errors_by_task: Mapping[str, int] | None = None,
    rule: Rule = "all",
) -> SuiteStats:
    """Aggregate rewards by task hash; tasks only in ``errors_by_task`` count as fully errored.

    ``rule`` decides when a task passes (see ``TaskStats.passed``).
    """
    errors_by_task = errors_by_task or {}
    hashes = list(per_task) + [h for h in errors_by_task if h not in per_task]
    tasks = {h: task_stats(h, per_task.get(h, ()), min_reward, errors_by_task.get(h, 0), rule) for h in hashes}
    measured = [ts for ts in tasks.values() if ts.n > 0]
    trials = sum(ts.n for ts in measured)
    errors = sum(ts.errors for ts in tasks.values())
    error_rate = errors / (trials + errors) if trials + errors else 0.0

    mean_reward: float | None = None
    ci: tuple[float, float] | None = None
    ci_note: str | None = "no trial produced a reward"
    pass_at: dict[int, float] = {}
    pass_hat: dict[int, float] = {}
    rewards: dict[str, list[float]] = {}
    if measured:
        rewards = {ts.task_hash: _finite_rewards(ts.task_hash, per_task[ts.task_hash]) for ts in measured}
        groups = list(rewards.values())
        mean_reward = mean_of([r for g in groups for r in g])
        ci, ci_note = _interval(groups)
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
        ci_note=ci_note,
        rewards=rewards,
    )


def _interval(groups: Sequence[Sequence[float]]) -> tuple[tuple[float, float] | None, str | None]:
    """The suite interval, or None and why: its method bounds the variance by a reward range of [0, 1]."""
    outside = next((r for g in groups for r in g if not 0.0 <= r <= 1.0), None)
    if outside is not None:
        return None, f"the interval needs rewards in [0, 1], got {outside!r}"
    return suite_interval(groups), None
