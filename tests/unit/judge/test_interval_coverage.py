"""Coverage simulation: do the judge's intervals and tests keep their promises on realistic suites?

Suites are drawn the way evaluations behave: each task has its own success probability, drawn
from a Beta around the true pass rate (so repeats of a task are correlated), and is run 1, 3
or 8 times, or a different 1-8 times per task. Rewards are pass/fail, or fractional (partial
credit out of four checks, or continuous). Every cell must cover the true rate >= 93% of the
time; the paired test must not call a drop more often than 5% (plus Monte Carlo noise) when
nothing changed. Fixed seeds and the standard library only, so results are reproducible.
"""

from __future__ import annotations

import math
import random
from functools import cache

import pytest

from pytest_gym.judge.intervals import suite_interval
from pytest_gym.judge.paired import paired_test

TASKS = (1, 2, 3, 5, 10, 30, 100, 300)
PASS_RATES = (0.5, 0.8, 0.9, 0.95, 0.99, 1.0)
REPEATS = (1, 3, 8, None)  # None: each task gets its own 1-8 repeats
CONCENTRATIONS = (1.0, 5.0, 50.0)  # Beta(rate * c, (1 - rate) * c): intra-task correlation 1 / (1 + c)
SIMS = 300
MIN_COVERAGE = 0.93

POOL = 4096


@cache
def _task_rates(rate: float, concentration: float) -> tuple[tuple[float, ...], float]:
    """A fixed pool of task success probabilities ~ Beta around ``rate``, and its exact mean.

    Tasks are drawn uniformly from the pool, so the pool mean is the true suite rate (within
    ~0.005 of ``rate``); drawing from a pool keeps thousands of suites within seconds.
    """
    if rate >= 1.0:
        return (1.0,), 1.0
    rng = random.Random(f"{rate}/{concentration}")
    pool = tuple(rng.betavariate(rate * concentration, (1.0 - rate) * concentration) for _ in range(POOL))
    return pool, math.fsum(pool) / POOL


def _rewards(rng: random.Random, p: float, m: int, kind: str) -> list[float]:
    r = rng.random
    if kind == "binary":
        return [1.0 if r() < p else 0.0 for _ in range(m)]
    if kind == "partial":  # four checks, a quarter point each
        return [((r() < p) + (r() < p) + (r() < p) + (r() < p)) / 4.0 for _ in range(m)]
    if p <= 0.0:
        return [0.0] * m
    power = (1.0 - p) / p  # continuous on [0, 1]: E[U ** power] = 1 / (1 + power) = p
    return [r() ** power for _ in range(m)]


def _suite(
    rng: random.Random, tasks: int, rate: float, sim: int, kinds: tuple[str, ...]
) -> tuple[list[list[float]], float]:
    """One simulated suite and its true rate; the design (repeats, heterogeneity, rewards) cycles with ``sim``."""
    repeats = REPEATS[sim % len(REPEATS)]
    pool, truth = _task_rates(rate, CONCENTRATIONS[sim // len(REPEATS) % len(CONCENTRATIONS)])
    kind = kinds[sim % len(kinds)]
    r, size = rng.random, len(pool)
    sizes = [repeats] * tasks if repeats is not None else [1 + int(r() * 8) for _ in range(tasks)]
    rates = [pool[int(r() * size)] for _ in range(tasks)]
    if kind == "binary":  # inlined: the bulk of the simulation's draws
        return [[1.0 if r() < p else 0.0 for _ in range(m)] for p, m in zip(rates, sizes, strict=True)], truth
    return [_rewards(rng, p, m, kind) for p, m in zip(rates, sizes, strict=True)], truth


def _sims(tasks: int, rate: float, kinds: tuple[str, ...]) -> int:
    """Suites per cell: 300 (coverage there is >= 0.97, SD 0.01); 500 where it sits at the nominal
    95% (100+ tasks, pass/fail), so Monte Carlo noise (SD 0.01) cannot take a correct interval
    below 93%; 200 for 100+ tasks with fractional rewards (>= 0.97: the pass/fail variance bound
    is conservative); a few at rate 1.0, where every reward is 1 and nothing is random."""
    if rate >= 1.0:
        return 24
    if tasks >= 100:
        return 500 if kinds == ("binary",) else 200
    return SIMS


def _coverage(tasks: int, rate: float, kinds: tuple[str, ...], seed: int) -> float:
    rng = random.Random(seed)
    sims = _sims(tasks, rate, kinds)
    hits = 0
    for sim in range(sims):
        groups, truth = _suite(rng, tasks, rate, sim, kinds)
        low, high = suite_interval(groups)
        assert 0.0 <= low < high <= 1.0
        hits += low <= truth <= high
    return hits / sims


@pytest.mark.parametrize("tasks", TASKS)
@pytest.mark.parametrize("kinds", [("binary",), ("partial", "continuous")], ids=["binary", "fractional"])
def test_suite_interval_covers(tasks: int, kinds: tuple[str, ...]) -> None:
    coverage = {rate: _coverage(tasks, rate, kinds, seed=tasks * 1000 + i) for i, rate in enumerate(PASS_RATES)}
    low = {rate: c for rate, c in coverage.items() if c < MIN_COVERAGE}
    assert not low, f"coverage below {MIN_COVERAGE} with {tasks} tasks: {low}"


# --- paired comparison ---------------------------------------------------------------------------


def _paired_run(
    rng: random.Random, tasks: int, rate: float, drop: float, repeats: int, binary: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-task values of a baseline and a current run; current rates are baseline rates * (1 - drop)."""
    pool, _ = _task_rates(rate, 5.0)
    baseline: dict[str, float] = {}
    current: dict[str, float] = {}
    for task in range(tasks):
        p = pool[int(rng.random() * len(pool))]
        q = p * (1.0 - drop)
        if binary:  # one trial: the per-task value is pass/fail
            baseline[str(task)], current[str(task)] = _rewards(rng, p, 1, "binary")[0], _rewards(rng, q, 1, "binary")[0]
        else:  # mean partial-credit reward over the repeats
            baseline[str(task)] = math.fsum(_rewards(rng, p, repeats, "partial")) / repeats
            current[str(task)] = math.fsum(_rewards(rng, q, repeats, "partial")) / repeats
    return baseline, current


PAIRED_TASKS = (2, 5, 20, 50)
PAIRED_RATES = (0.5, 0.9, 0.99)
PAIRED_SIMS = 300
DROP = 0.2


@pytest.mark.parametrize("tasks", PAIRED_TASKS)
@pytest.mark.parametrize("binary", [True, False], ids=["pass-fail", "fractional"])
def test_paired_false_positives_and_coverage(tasks: int, binary: bool) -> None:
    """Without a change the drop test fires <= 5%; the interval covers 0, and the true change after a real drop.

    Both allow 2 SE of Monte Carlo noise: the tests are exact (so at most 5% in truth) and Tango's
    interval is nominal to about 1% (0.94 at 60 pass/fail pairs near 50% in 2000-run checks).
    """
    noise = 2.0 * math.sqrt(0.05 * 0.95 / PAIRED_SIMS)
    for rate in PAIRED_RATES:
        rng = random.Random(f"paired/{tasks}/{rate}/{binary}")
        true_delta = -_task_rates(rate, 5.0)[1] * DROP  # E[current - baseline] per task
        false_positives = covered_null = covered_drop = 0
        for _ in range(PAIRED_SIMS):
            null = paired_test(*_paired_run(rng, tasks, rate, 0.0, 2, binary), mc_samples=100)
            false_positives += null.significant_drop(0.05)
            covered_null += null.ci_low <= 0.0 <= null.ci_high
            dropped = paired_test(*_paired_run(rng, tasks, rate, DROP, 2, binary), mc_samples=100)
            covered_drop += dropped.ci_low <= true_delta <= dropped.ci_high
        assert false_positives / PAIRED_SIMS <= 0.05 + noise, rate
        assert covered_null / PAIRED_SIMS >= MIN_COVERAGE - noise, rate
        assert covered_drop / PAIRED_SIMS >= MIN_COVERAGE - noise, rate
