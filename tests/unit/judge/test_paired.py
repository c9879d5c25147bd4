"""Paired baseline comparison: exact tests by hand and by brute force, published interval values."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pytest_gym.judge.paired import (
    PairedTest,
    mcnemar_p_drop,
    new_failures_and_fixes,
    paired_test,
    sign_flip_p_exact,
    sign_flip_p_monte_carlo,
    tango_interval,
    task_passes,
)


def _runs(before: list[float], after: list[float]) -> tuple[dict[str, float], dict[str, float]]:
    keys = [f"t{i}" for i in range(len(before))]
    return dict(zip(keys, before, strict=True)), dict(zip(keys, after, strict=True))


def _brute_force_p(deltas: list[float]) -> float:
    """P(sum of randomly signed deltas <= observed sum) over all 2**n sign patterns."""
    observed = math.fsum(deltas)
    hits = sum(
        math.fsum(s * d for s, d in zip(signs, deltas, strict=True)) <= observed + 1e-9
        for signs in itertools.product((-1, 1), repeat=len(deltas))
    )
    return hits / 2 ** len(deltas)


# --- the reported problems ------------------------------------------------------------------------


def test_two_tasks_both_dropping_is_not_significant() -> None:
    """Was called a significant drop; the exact one-sided sign test gives 0.5**2 = 0.25."""
    result = paired_test(*_runs([1.0, 1.0], [0.0, 0.0]))
    assert result.p_drop == 0.25
    assert not result.significant_drop()
    assert result.mean_delta == -1.0
    assert result.ci_low == -1.0
    assert 0.0 < result.ci_high < 1.0
    assert result.flips_to_fail == ["t0", "t1"]
    assert result.flips_to_pass == []
    assert result.method.startswith("McNemar exact")


def test_eight_of_twenty_dropping_is_significant() -> None:
    result = paired_test(*_runs([1.0] * 20, [0.0] * 8 + [1.0] * 12))
    assert result.p_drop == 0.5**8
    assert result.significant_drop()
    assert result.significant_drop(0.01)
    assert result.mean_delta == pytest.approx(-0.4)
    assert -1.0 < result.ci_low < -0.4 < result.ci_high < 0.0
    assert len(result.flips_to_fail) == 8


# --- McNemar / sign-flip ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("up", "down", "expected"), [(0, 0, 1.0), (0, 1, 0.5), (0, 2, 0.25), (1, 3, 5 / 16), (3, 0, 1.0)]
)
def test_mcnemar_hand_values(up: int, down: int, expected: float) -> None:
    assert mcnemar_p_drop(up, down) == expected


def test_mcnemar_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for up, down in itertools.product(range(0, 30, 3), range(0, 40, 4)):
        if up + down:
            reference = stats.binomtest(down, up + down, 0.5, alternative="greater").pvalue
            assert mcnemar_p_drop(up, down) == pytest.approx(reference, rel=1e-12)


def test_sign_flip_exact_against_brute_force() -> None:
    rng = random.Random(3)
    for _ in range(60):
        n = rng.randint(1, 11)
        grid = rng.choice([None, 4, 3])  # ties: per-task means on a quarter or third grid
        deltas = [rng.uniform(-1, 1) if grid is None else rng.randint(-grid, grid) / grid for _ in range(n)]
        assert sign_flip_p_exact(deltas) == pytest.approx(_brute_force_p(deltas), abs=1e-12), deltas


def test_sign_flip_on_pass_fail_is_mcnemar() -> None:
    deltas = [-1.0] * 6 + [1.0] * 2 + [0.0] * 9
    assert sign_flip_p_exact(deltas) == pytest.approx(mcnemar_p_drop(2, 6), abs=1e-15)


def test_sign_flip_zeros_do_not_count() -> None:
    assert sign_flip_p_exact([0.0, 0.0]) == 1.0
    assert sign_flip_p_exact([-0.5, 0.0, 0.0]) == 0.5


def test_monte_carlo_is_seeded_and_close_to_exact() -> None:
    rng = random.Random(8)
    deltas = [rng.uniform(-0.6, 0.3) for _ in range(18)]
    exact = sign_flip_p_exact(deltas)
    mc = sign_flip_p_monte_carlo(deltas, samples=20_000, seed=1)
    assert mc == sign_flip_p_monte_carlo(deltas, samples=20_000, seed=1)
    assert mc == pytest.approx(exact, abs=0.01)
    assert sign_flip_p_monte_carlo([-1.0] * 30, samples=100) == 1 / 101  # never 0


def test_path_follows_values_and_size() -> None:
    before, after = _runs([0.5, 0.75, 1.0, 0.25, 0.5], [0.25, 0.5, 1.0, 0.0, 0.75])
    assert paired_test(before, after).method.startswith("sign-flip exact")
    mc = paired_test(before, after, exact_limit=3, mc_samples=5000, seed=4)
    assert mc.method.startswith("sign-flip Monte Carlo, 5000 draws, seed 4")
    assert mc.p_drop == pytest.approx(paired_test(before, after).p_drop, abs=0.02)


def test_improvement_is_not_a_drop() -> None:
    result = paired_test(*_runs([0.0] * 10, [1.0] * 10))
    assert result.p_drop == 1.0
    assert result.flips_to_pass == [f"t{i}" for i in range(10)]


# --- Tango interval ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("up", "down", "n", "expected"),
    [
        # Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables, ch. 8 examples,
        # as printed by the R package contingencytables (Tango_asymptotic_score_CI_paired_2x2).
        (6, 16, 161, (-0.1240, -0.0054)),  # Cavo et al. 2012
        (1, 7, 21, (-0.5172, -0.0260)),  # Bentur et al. 2009
    ],
)
def test_tango_published_values(up: int, down: int, n: int, expected: tuple[float, float]) -> None:
    low, high = tango_interval(up, down, n)
    assert (round(low, 4), round(high, 4)) == expected


def test_tango_unchanged_tasks_have_width() -> None:
    """20 unchanged tasks bound the change to about +-0.16, they do not prove it is 0."""
    low, high = tango_interval(0, 0, 20)
    assert low == pytest.approx(-high)
    assert 0.15 < high < 0.17
    assert paired_test(*_runs([1.0] * 20, [1.0] * 20)).ci_high == pytest.approx(high)


def test_tango_stays_in_range() -> None:
    rng = random.Random(2)
    for _ in range(300):
        n = rng.randint(1, 50)
        up = rng.random() * n
        down = rng.random() * (n - up)
        low, high = tango_interval(up, down, n)
        assert -1.0 <= low < (up - down) / n + 1e-9
        assert (up - down) / n - 1e-9 < high <= 1.0


# --- paired_test edges --------------------------------------------------------------------------------


def test_only_shared_tasks_in_current_order() -> None:
    baseline = {"a": 1.0, "b": 1.0, "c": 0.0, "gone": 1.0}
    current = {"new": 0.0, "c": 1.0, "b": 0.0, "a": 0.0}
    result = paired_test(baseline, current)
    assert result.n_shared == 3
    assert result.flips_to_fail == ["b", "a"]
    assert result.flips_to_pass == ["c"]


def test_no_shared_tasks() -> None:
    result = paired_test({"a": 1.0}, {"b": 0.0})
    assert result == PairedTest(0, None, -1.0, 1.0, 1.0, "no shared tasks", [], [])
    assert not result.significant_drop()


def test_flips_use_min_reward_for_fractional_values() -> None:
    result = paired_test({"a": 0.9, "b": 0.5}, {"a": 0.7, "b": 0.85}, min_reward=0.8)
    assert result.flips_to_fail == ["a"]
    assert result.flips_to_pass == ["b"]


@pytest.mark.parametrize("bad", [math.nan, 1.5, -0.2, math.inf])
def test_bad_values_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        paired_test({"a": 1.0}, {"a": bad})
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        paired_test({"a": bad}, {"a": 1.0})


def test_significant_drop_alpha_is_checked() -> None:
    result = paired_test(*_runs([1.0] * 20, [0.0] * 8 + [1.0] * 12))
    with pytest.raises(ValueError, match="alpha"):
        result.significant_drop(0.0)


# --- deterministic gate metrics -------------------------------------------------------------------------


def test_new_failures_and_fixes() -> None:
    baseline = {"a": True, "b": False, "c": True, "d": False, "gone": True}
    current = {"d": True, "c": False, "b": False, "a": True, "new": False}
    assert new_failures_and_fixes(baseline, current) == (["c"], ["d"])
    assert new_failures_and_fixes({}, current) == ([], [])


@pytest.mark.parametrize(
    ("rewards", "rule", "expected"),
    [
        ([1.0, 1.0, 1.0], "all", True),
        ([1.0, 0.0, 1.0], "all", False),
        ([1.0, 0.0, 1.0], "majority", True),
        ([1.0, 0.0], "majority", False),  # a tie is not a majority
        ([0.0, 0.0, 1.0], "any", True),
        ([0.0, 0.0], "any", False),
        ([], "any", False),  # no rewards, no verdict
    ],
)
def test_task_passes_rules(rewards: list[float], rule: str, expected: bool) -> None:
    assert task_passes(rewards, 1.0, rule) is expected  # type: ignore[arg-type]


def test_task_passes_threshold_and_errors() -> None:
    assert task_passes([0.8, 0.9], 0.8, "all")
    assert not task_passes([0.8, 0.7], 0.8, "all")
    with pytest.raises(ValueError, match="NaN"):
        task_passes([1.0, math.nan], 1.0, "any")
    with pytest.raises(ValueError, match="rule"):
        task_passes([1.0], 1.0, "most")  # type: ignore[arg-type]


# --- rescaled interval for fractional values ------------------------------------------------------------


def test_interval_on_pass_fail_values_is_plain_tango() -> None:
    result = paired_test(*_runs([1.0] * 12 + [0.0] * 8, [0.0] * 5 + [1.0] * 9 + [0.0] * 6))
    assert (result.ci_low, result.ci_high) == pytest.approx(tango_interval(2, 5, 20))


def test_consistent_small_drops_are_measured_tightly() -> None:
    """30 tasks each down 0.1 +- 0.03: the spread is small, so the interval is near the t-interval, not Tango's."""
    rng = random.Random(4)
    deltas = [-0.1 + rng.uniform(-0.03, 0.03) for _ in range(30)]
    result = paired_test(*_runs([0.5] * 30, [0.5 + d for d in deltas]))
    plain = tango_interval(0.0, -math.fsum(deltas), 30)
    assert result.ci_low < result.mean_delta < result.ci_high < 0.0  # type: ignore[operator]
    assert result.ci_high - result.ci_low < (plain[1] - plain[0]) / 3
    assert result.ci_high - result.ci_low > 2 * 1.96 * 0.03 / math.sqrt(3) / math.sqrt(
        30
    )  # wider than z * sd / sqrt(n)


def test_few_changed_tasks_keep_plain_tango() -> None:
    """Two changed tasks out of twenty carry all the spread (df ~ 1): no rescaling."""
    before, after = _runs([1.0] * 20, [2 / 3, 1 / 3] + [1.0] * 18)
    result = paired_test(before, after)
    assert (result.ci_low, result.ci_high) == pytest.approx(tango_interval(0.0, 1.0, 20))


def test_identical_fractional_flips_are_not_a_point() -> None:
    result = paired_test(*_runs([0.75, 0.75], [0.25, 0.25]))
    assert result.p_drop == 0.25
    assert (result.ci_low, result.ci_high) == pytest.approx(tango_interval(0.0, 1.0, 2))
    assert result.ci_high > 0.0
