"""The suite interval: hand-checked values, edge cases, and scipy as a reference for the quantiles."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pytest_gym.judge.intervals import (
    beta_ppf,
    ci_low_ceiling,
    clopper_pearson,
    evidence,
    suite_interval,
    t_cdf,
    t_ppf,
    tasks_for_ceiling,
    tasks_needed,
)

Z_975 = 1.959963984540054
# Two-sided 95% Student-t critical values t_{0.975, df} (as in tests/unit/judge/test_stats.py).
T_975 = {1: 12.706204736174707, 2: 4.302652729749462, 4: 2.776445105197793, 10: 2.228138851986274}


# --- quantiles ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("df", "expected"), sorted(T_975.items()))
def test_t_ppf_matches_tables(df: int, expected: float) -> None:
    assert t_ppf(0.975, df) == pytest.approx(expected, rel=1e-10)
    assert t_ppf(0.025, df) == pytest.approx(-expected, rel=1e-10)
    assert t_cdf(expected, df) == pytest.approx(0.975, rel=1e-10)
    assert t_cdf(-expected, df) == pytest.approx(0.025, rel=1e-9)


def test_t_cdf_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df, t in itertools.product((0.7, 1.0, 2.5, 7.0, 40.0, 900.0), (-30.0, -2.0, -0.1, 0.0, 1.3, 12.0)):
        assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), rel=1e-9, abs=1e-15), (t, df)
    assert (t_cdf(-math.inf, 3.0), t_cdf(math.inf, 3.0)) == (0.0, 1.0)


def test_t_ppf_against_scipy_for_fractional_df() -> None:
    stats = pytest.importorskip("scipy.stats")
    # Both sides of df 8 (beta inversion below, expansion + Newton above) and of df 1000 (expansion only).
    dfs = [0.5, 1.0, 1.37, 2.5, 7.99, 8.0, 42.0, 999.0, 1e3, 1e4, 1e9]
    for df, p in itertools.product(dfs, [0.5000001, 0.6, 0.9, 0.975, 0.995, 1 - 1e-9]):
        assert t_ppf(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9), (df, p)


def test_beta_ppf_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    shapes = [0.05, 0.5, 1.0, 2.5, 30.0, 2400.5]
    for a, b, q in itertools.product(shapes, shapes, [1e-6, 0.025, 0.5, 0.975]):
        expected = stats.beta.ppf(q, a, b)
        if expected < 1e-280:  # below what a float near 0 distinguishes
            continue
        assert beta_ppf(q, a, b) == pytest.approx(expected, rel=1e-9, abs=1e-13), (a, b, q)


def test_beta_ppf_edges() -> None:
    assert beta_ppf(0.0, 2.0, 3.0) == 0.0
    assert beta_ppf(1.0, 2.0, 3.0) == 1.0
    assert beta_ppf(0.3, 1.0, 1.0) == pytest.approx(0.3)  # uniform
    assert beta_ppf(0.025, 5.0, 1.0) == pytest.approx(0.025 ** (1 / 5))  # Beta(n, 1): x**n
    with pytest.raises(ValueError, match="positive"):
        beta_ppf(0.5, 0.0, 1.0)


# --- Clopper-Pearson ----------------------------------------------------------------------------


def test_clopper_pearson_hand_values() -> None:
    # All fail / all pass: closed forms 1 - (alpha/2)**(1/n) and (alpha/2)**(1/n).
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(1 - 0.025**0.1))
    assert clopper_pearson(10, 10) == (pytest.approx(0.025**0.1), 1.0)
    # 2 of 5: the classic table value [0.0527, 0.8534].
    low, high = clopper_pearson(2, 5)
    assert (round(low, 4), round(high, 4)) == (0.0527, 0.8534)


def test_clopper_pearson_non_integer_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for x, n in [(0.4, 1.0), (2.7, 3.5), (29.3, 29.9), (150.5, 300.0), (1e-3, 2.0)]:
        low, high = clopper_pearson(x, n)
        assert low == pytest.approx(stats.beta.ppf(0.025, x, n - x + 1), rel=1e-9, abs=1e-15)
        assert high == pytest.approx(stats.beta.ppf(0.975, x + 1, n - x), rel=1e-9)


@pytest.mark.parametrize(
    ("x", "n", "confidence", "problem"),
    [(-1, 5, 0.95, "successes"), (6, 5, 0.95, "successes"), (1, 0, 0.95, "n must"), (1, 5, 1.0, "confidence")],
)
def test_clopper_pearson_rejects_bad_input(x: float, n: float, confidence: float, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        clopper_pearson(x, n, confidence)


# --- suite_interval: the reported problems --------------------------------------------------------


def test_two_passing_tasks_are_not_a_point() -> None:
    """Was [1.0, 1.0]: two tasks cannot show a pass rate of exactly 1."""
    assert suite_interval([[1.0], [1.0]]) == (pytest.approx(0.025**0.5), 1.0)  # (0.158, 1]
    assert suite_interval([[1.0, 1.0], [1.0, 1.0]]) == suite_interval([[1.0], [1.0]])  # repeats may be clones


def test_nine_of_ten_stays_inside_unit_interval() -> None:
    """Was [0.674, 1.126]; with single trials it is exactly Clopper-Pearson 9/10."""
    low, high = suite_interval([[1.0]] * 9 + [[0.0]])
    assert (round(low, 4), round(high, 4)) == (0.5550, 0.9975)


def test_demo_two_of_five() -> None:
    """Was 0.400 (95% CI -0.280..1.080)."""
    low, high = suite_interval([[1.0], [0.0], [1.0], [0.0], [0.0]])
    assert (round(low, 4), round(high, 4)) == (0.0527, 0.8534)


# --- suite_interval: edge cases -------------------------------------------------------------------


def test_one_task_is_wide() -> None:
    assert suite_interval([[1.0] * 8]) == (pytest.approx(0.025), 1.0)
    assert suite_interval([[0.0] * 8]) == (0.0, pytest.approx(0.975))
    low, high = suite_interval([[0.4]])
    assert low < 0.01
    assert high > 0.99


def test_all_fail() -> None:
    assert suite_interval([[0.0, 0.0, 0.0]] * 10) == (0.0, pytest.approx(1 - 0.025**0.1))


def test_zero_spread_falls_back_to_tasks() -> None:
    """Every trial at 0.5: no spread to estimate, so each task counts once (Clopper-Pearson 5 of 10)."""
    assert suite_interval([[0.5, 0.5]] * 10) == pytest.approx(clopper_pearson(5, 10))


@pytest.mark.parametrize("groups", [[], [[]], [[], []]])
def test_no_rewards_is_an_error(groups: list[list[float]]) -> None:
    with pytest.raises(ValueError, match="no rewards"):
        suite_interval(groups)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1.5, -0.1])
def test_bad_rewards_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match=r"task 1: rewards must be in \[0, 1\]"):
        suite_interval([[1.0], [0.5, bad]])


def test_empty_tasks_are_skipped() -> None:
    assert suite_interval([[1.0], [], [0.0]]) == suite_interval([[1.0], [0.0]])


def test_unequal_repeats_floor_is_kish_effective_tasks() -> None:
    """4 trials + 1 trial: floor N**2 / sum(m**2) = 25/17; two tasks give df 1, so the floor binds."""
    ev = evidence([[1.0] * 4, [0.0]])
    assert (ev.mean, ev.tasks, ev.trials) == (0.8, 2, 5)
    assert ev.n_eff == ev.n_floor == pytest.approx(25 / 17)
    assert suite_interval([[1.0] * 4, [0.0]]) == pytest.approx(clopper_pearson(0.8 * 25 / 17, 25 / 17))


def test_effective_size_between_floor_and_trials() -> None:
    """20 tasks x 2 trials: 10 split, 5 both pass, 5 both fail.

    mean 0.5; CR1 variance 20/19 * 10 / 40**2; raw n_eff = 0.25 / variance = 38; residuals +-1 on
    10 tasks give df = 10**2 / 10 = 10, so n_eff = 38 * (z / t_10)**2 = 29.40, inside [20, 40].
    """
    groups = [[1.0, 0.0]] * 10 + [[1.0, 1.0]] * 5 + [[0.0, 0.0]] * 5
    ev = evidence(groups)
    assert ev.n_floor == 20
    assert ev.trials == 40
    assert ev.n_eff == pytest.approx(38 * (Z_975 / T_975[10]) ** 2, rel=1e-9)
    assert suite_interval(groups) == pytest.approx(clopper_pearson(0.5 * ev.n_eff, ev.n_eff))


def test_failures_never_beat_all_passing() -> None:
    """A single failed trial among 800 must not give a higher lower bound than none."""
    all_pass = suite_interval([[1.0] * 8] * 100)[0]
    for failing in (1, 2, 5, 20):
        groups = [[1.0] * 8] * (100 - failing) + [[1.0] * 7 + [0.0]] * failing
        assert suite_interval(groups)[0] <= all_pass


def test_fractional_rewards_may_be_worth_more_than_one_trial_each() -> None:
    """Partial credit near its mean varies less than pass/fail: n_eff is no longer capped at the trials
    (it was, which made the interval 1.8-2.3x a cluster bootstrap's); pass/fail rewards still are."""
    rng = random.Random(9)
    groups = [[round(0.6 + rng.uniform(-0.2, 0.2), 2) for _ in range(4)] for _ in range(30)]
    ev = evidence(groups)
    assert ev.n_eff > 3 * ev.trials
    capped = clopper_pearson(ev.mean * ev.trials, ev.trials)
    low, high = suite_interval(groups)
    assert high - low < (capped[1] - capped[0]) / 1.5
    assert low < ev.mean < high
    binary = [[1.0 if rng.random() < 0.6 else 0.0 for _ in range(8)] for _ in range(100)]
    assert evidence(binary).n_eff <= evidence(binary).trials


def test_ci_low_ceiling_per_number_of_tasks() -> None:
    """Every trial passing, ci_low is 0.025**(1/tasks) whatever the repeats: 0.158 at 2 tasks, 0.692 at 10."""
    for tasks in (1, 2, 10, 72):
        for repeats in (1, 4):
            assert suite_interval([[1.0] * repeats] * tasks)[0] == pytest.approx(ci_low_ceiling(tasks), rel=1e-9)
    assert ci_low_ceiling(2) == pytest.approx(0.158, abs=5e-4)
    assert [tasks_for_ceiling(t) for t in (0.5, 0.9, 0.95, 0.99)] == [6, 36, 72, 368]
    assert ci_low_ceiling(71) < 0.95 <= ci_low_ceiling(72)
    assert (tasks_for_ceiling(1.0), tasks_for_ceiling(0.0)) == (None, 1)


def test_repeats_add_information_when_tasks_vary_little() -> None:
    """Independent-looking trials narrow the interval below the one-trial-per-task width."""
    rng = random.Random(5)
    groups = [[1.0 if rng.random() < 0.8 else 0.0 for _ in range(8)] for _ in range(100)]
    ev = evidence(groups)
    assert ev.n_eff > 2 * ev.n_floor
    low, high = suite_interval(groups)
    task_low, task_high = clopper_pearson(ev.mean * ev.n_floor, ev.n_floor)
    assert high - low < task_high - task_low


def test_random_suites_are_sane() -> None:
    rng = random.Random(11)
    for _ in range(300):
        tasks = rng.randint(1, 40)
        groups = [[rng.choice([0.0, 0.25, 1.0, rng.random()]) for _ in range(rng.randint(1, 6))] for _ in range(tasks)]
        mean = math.fsum(r for g in groups for r in g) / sum(len(g) for g in groups)
        low, high = suite_interval(groups)
        assert 0.0 <= low <= mean <= high <= 1.0
        assert low < high
        wide_low, wide_high = suite_interval(groups, confidence=0.99)
        assert wide_low <= low
        assert high <= wide_high


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, math.nan])
def test_bad_confidence(confidence: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        suite_interval([[1.0]], confidence)


# --- tasks_needed ---------------------------------------------------------------------------------


def test_tasks_needed_all_passing() -> None:
    """Two perfect tasks: 0.025**(1/n) >= 0.95 first at n = 72 (the ceiling), so 70 more; never fewer than it."""
    assert tasks_needed([[1.0, 1.0]] * 2, 0.95) == 70 == tasks_for_ceiling(0.95) - 2  # type: ignore[operator]
    for tasks in (1, 5, 30):
        needed = tasks_needed([[1.0] * 3] * tasks, 0.95)
        assert needed is not None
        assert tasks + needed >= tasks_for_ceiling(0.95)  # type: ignore[operator]
    assert suite_interval([[1.0, 1.0]] * 72)[0] >= 0.95 > suite_interval([[1.0, 1.0]] * 71)[0]


def test_tasks_needed_at_observed_mean() -> None:
    """9 of 10 single trials, gate 0.8: 65 tasks at 90% clear it, 64 do not."""
    assert tasks_needed([[1.0]] * 9 + [[0.0]], 0.8) == 55
    assert clopper_pearson(0.9 * 65, 65)[0] >= 0.8 > clopper_pearson(0.9 * 64, 64)[0]


def test_tasks_needed_edges() -> None:
    assert tasks_needed([[1.0]] * 200, 0.95) == 0  # already clears
    assert tasks_needed([[1.0]] * 9 + [[0.0]], 0.95) is None  # mean 0.9 can never reach 0.95
    assert tasks_needed([[1.0]] * 9 + [[0.0]], 0.9) is None  # nor its own mean
    assert tasks_needed([[1.0]] * 10, 1.0) is None  # nothing proves a rate of exactly 1
    assert tasks_needed([[1.0]] * 9 + [[0.0]], 0.8999, max_tasks=10_000) is None  # too many
