"""Paired baseline comparison: the exact test by brute force, its bounds, published values, stable flips."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pytest_gym.judge.paired import (
    ALPHA,
    PairedTest,
    exact_p,
    exact_upper_bound,
    flip,
    min_pairs,
    paired_test,
    tango_interval,
    task_passes,
)


def _runs(before: list[float], after: list[float]) -> tuple[dict[str, float], dict[str, float]]:
    keys = [f"t{i}" for i in range(len(before))]
    return dict(zip(keys, before, strict=True)), dict(zip(keys, after, strict=True))


def _tango_z(up: int, down: int, n: int, d: float) -> float:
    """Tango's score statistic, written out again from the paper for the brute force."""
    a, b, c = 2.0 * n, -up - down + (2.0 * n - up + down) * d, -down * d * (1.0 - d)
    q = min((1.0 - d) / 2.0, max(max(0.0, -d), (-b + math.sqrt(max(0.0, b * b - 4 * a * c))) / (2 * a)))
    variance = n * (2.0 * q + d * (1.0 - d))
    numerator = up - down - n * d
    if variance <= 0.0:
        return 0.0 if abs(numerator) < 1e-12 else math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


def _brute_force_p(up: int, down: int, n: int, d: float, order: float, grid: int = 400) -> float:
    """The unconditional p by definition: every trinomial outcome, the supremum on a fine grid of the nuisance."""
    z_obs = _tango_z(up, down, n, order)
    region = [(u, v) for u in range(n + 1) for v in range(n + 1 - u) if _tango_z(u, v, n, order) <= z_obs + 1e-9]
    low, high = max(0.0, -d), (1.0 - d) / 2.0
    best = 0.0
    for i in range(grid + 1):
        q_down = low + (high - low) * i / grid
        q_up = q_down + d
        total = sum(
            math.factorial(n) / (math.factorial(u) * math.factorial(v) * math.factorial(n - u - v))
            * q_up**u * q_down**v * (1.0 - q_up - q_down) ** (n - u - v)
            for u, v in region
        )  # fmt: skip
        best = max(best, total)
    return best


# --- the reported problems ------------------------------------------------------------------------


def test_two_tasks_both_dropping_is_not_significant() -> None:
    """Was called a significant drop; the exact one-sided test gives 0.5**2 = 0.25."""
    result = paired_test(*_runs([1.0, 1.0], [0.0, 0.0]))
    assert result.p_drop == pytest.approx(0.25)
    assert not result.significant_drop()
    assert result.mean_delta == -1.0
    assert result.ci_low == -1.0
    assert 0.0 < result.ci_high < 1.0  # a one-sided bound that includes no change
    assert result.flips_to_fail == ["t0", "t1"]
    assert result.flips_to_pass == []
    assert result.method.startswith("exact unconditional")


def test_four_of_eight_flipping_the_bound_and_the_test_agree() -> None:
    """Was "95% CI -0.785..-0.013" (excludes 0) next to McNemar's conditional p = 0.0625 (not significant).

    The unconditional test gives p = 0.035 (conditioning on the changed tasks is what made McNemar's
    conservative), and the bound from the same test excludes 0.
    """
    result = paired_test(*_runs([1.0] * 8, [0.0] * 4 + [1.0] * 4))
    assert result.p_drop == pytest.approx(0.03515625, abs=1e-9)  # sup over q of P(4 of 8 down, none up) etc.
    assert result.significant_drop()
    assert result.ci_high < 0.0


def test_eight_of_twenty_dropping_is_significant() -> None:
    """p = 0.0059 (the test whose bound is shown; McNemar's conditional p was 0.0039)."""
    result = paired_test(*_runs([1.0] * 20, [0.0] * 8 + [1.0] * 12))
    assert result.p_drop == pytest.approx(0.00591, abs=1e-5)
    assert result.significant_drop()
    assert result.significant_drop(0.01)
    assert result.mean_delta == pytest.approx(-0.4)
    assert -1.0 < result.ci_low < -0.4 < result.ci_high < 0.0
    assert len(result.flips_to_fail) == 8


# --- the exact unconditional test --------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12])
def test_exact_p_against_brute_force(n: int) -> None:
    """Every outcome of n pairs at several changes and orderings, against the definition (a 400-point grid)."""
    for up, down in [(u, v) for u in range(n + 1) for v in range(n + 1 - u)][::3]:
        for d, order in ((-0.3, -0.3), (-0.05, -0.05), (0.0, 0.0), (0.1, 0.0), (-0.2, 0.0), (0.0, -0.1)):
            expected = _brute_force_p(up, down, n, d, order)
            assert exact_p(up, down, n, d, order) == pytest.approx(expected, abs=2e-4), (up, down, d, order)


def test_exact_p_published_value() -> None:
    """Cavo et al. 2012 (6 against 16 changed of 161): the R package contingencytables (Fagerland, Lydersen & Laake)
    prints "The McNemar exact unconditional test: P = 0.034053" (two-sided; at no change twice the one-sided), with
    the supremum taken over a 99.99% confidence set of the nuisance plus 0.0001 (Berger & Boos); the supremum over
    all of it is at least that less 0.0001, and close above."""
    two_sided = 2 * exact_p(6, 16, 161, order=0.0)  # ordered by McNemar's statistic, as theirs
    assert 0.034053 - 0.0001 <= two_sided <= 0.0345


def test_exact_p_is_at_most_alpha_under_the_null() -> None:
    """Exact: for n = 12 pairs at the boundary delta = -0.1, P(p < 0.05) summed over every outcome stays <= 0.05."""
    n, d = 12, -0.1
    rejected = [(u, v) for u in range(n + 1) for v in range(n + 1 - u) if exact_p(u, v, n, d, order=d) < ALPHA]
    for q_down in (0.1, 0.2, 0.3, 0.45, 0.55):
        q_up = q_down + d
        size = sum(
            math.factorial(n) / (math.factorial(u) * math.factorial(v) * math.factorial(n - u - v))
            * q_up**u * q_down**v * (1.0 - q_up - q_down) ** (n - u - v)
            for u, v in rejected
        )  # fmt: skip
        assert size <= ALPHA + 1e-9, (q_down, size)


def test_score_orders_outcomes_monotonely() -> None:
    """The exact test needs Tango's score to fall with every drop and rise with every rise (at any ordering
    change): each count of changed tasks is then a threshold, and fewer rises or more drops only add outcomes
    as extreme, so the supremum on the boundary is the supremum over all of H0 and p falls as the change rises."""
    for n in (5, 20, 60):
        for d in (-0.5, -0.1, 0.0, 0.2):
            for fixed in range(n + 1):
                drops = [_tango_z(fixed, v, n, d) for v in range(n + 1 - fixed)]
                rises = [_tango_z(u, fixed, n, d) for u in range(n + 1 - fixed)]
                assert all(b <= a + 1e-12 for a, b in itertools.pairwise(drops)), (n, d, fixed)
                assert all(b >= a - 1e-12 for a, b in itertools.pairwise(rises)), (n, d, fixed)


def test_p_falls_as_the_change_rises() -> None:
    """One ordering for every change: p is monotone, so the changes not rejected are an interval (ordering at each
    change instead made it a sawtooth: 16 up, 35 down of 67 was rejected at -0.094 and accepted at -0.084)."""
    rng = random.Random(7)
    for _ in range(12):
        n = rng.randint(1, 70)
        up = rng.randint(0, n // 3)
        down = rng.randint(0, n - up)
        order = rng.choice([None, 0.0, -0.05, -0.2])  # None: the order the comparison uses (Buehler's)
        values = [exact_p(up, down, n, -1.0 + i / 50, order) for i in range(1, 100)]
        assert all(b <= a + 1e-9 for a, b in itertools.pairwise(values)), (up, down, n, order)
    at_each = [exact_p(16, 35, 67, d, order=d) for d in (-0.0935, -0.0845)]
    assert at_each[0] < ALPHA <= at_each[1]  # the sawtooth, for the record


def test_upper_bound_inverts_the_test() -> None:
    """The bound is where the test turns: rejected just above it, not just below (random tables); and it is
    close to Tango's asymptotic bound, a little wider (exact)."""
    rng = random.Random(5)
    for _ in range(30):
        n = rng.randint(1, 40)
        up = rng.randint(0, n)
        down = rng.randint(0, n - up)
        bound = exact_upper_bound(up, down, n)
        assert (up - down) / n <= bound <= 1.0
        if bound < 1.0:
            assert exact_p(up, down, n, bound) < ALPHA
            assert exact_p(up, down, n, bound - 1e-6) >= ALPHA
        if n >= 15:
            assert abs(bound - tango_interval(up, down, n, 0.90)[1]) < 0.05


@pytest.mark.parametrize("tolerance", [0.0, 0.05, 0.1, 0.3])
def test_min_pairs_is_where_all_failing_becomes_significant(tolerance: float) -> None:
    needed = min_pairs(tolerance)
    assert needed is not None
    d = -tolerance
    assert exact_p(0, needed, needed, d, d) < ALPHA <= exact_p(0, needed - 1, needed - 1, d, d)
    assert min_pairs(1.0) is None


def test_improvement_is_not_a_drop() -> None:
    result = paired_test(*_runs([0.0] * 10, [1.0] * 10))
    assert result.p_drop == 1.0
    assert result.ci_low > 0.0
    assert result.flips_to_pass == [f"t{i}" for i in range(10)]


def test_tolerance_is_tested_not_compared_to_the_estimate() -> None:
    """200 tasks at 0.9 -> 0.85 (drop 0.05): significant against 0, not against "more than 0.05"."""
    before, after = _runs([1.0] * 180 + [0.0] * 20, [1.0] * 170 + [0.0] * 30)
    result = paired_test(before, after, tolerance=0.05)
    assert result.significant_drop()
    assert not result.beyond_tolerance()
    assert result.ci_high > -0.05
    strict = paired_test(before, after)
    assert strict.p_beyond == strict.p_drop


def test_fractional_values_use_the_score_test_and_its_bounds() -> None:
    before, after = _runs([0.5, 0.75, 1.0, 0.25, 0.5, 0.75], [0.25, 0.5, 1.0, 0.0, 0.75, 0.5])
    result = paired_test(before, after)
    assert result.method.startswith("score test")
    assert not result.exact
    # The one-sided bound and the one-sided p say the same at every tolerance.
    for tolerance in (0.0, 0.05, 0.1, 0.2, 0.4):
        at = paired_test(before, after, tolerance=tolerance)
        assert at.beyond_tolerance() == (at.ci_high < -tolerance), tolerance


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


def test_unchanged_tasks_have_width() -> None:
    """20 unchanged tasks bound the change to about +-0.14 (one-sided 95%), they do not prove it is 0."""
    result = paired_test(*_runs([1.0] * 20, [1.0] * 20))
    assert result.ci_low == pytest.approx(-result.ci_high)
    assert 0.13 < result.ci_high < 0.15
    low, high = tango_interval(0, 0, 20)
    assert low == pytest.approx(-high)
    assert 0.15 < high < 0.17


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
    assert result == PairedTest(0, None, 1.0, "no shared tasks", [], [])
    assert (result.ci_low, result.ci_high) == (-1.0, 1.0)
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


# --- stable flips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "rule", "expected"),
    [
        ((3, 3), (3, 0), "all", "new_failure"),
        ((3, 3), (3, 2), "all", "flaky_failure"),  # fails by the rule, but two of three still pass
        ((3, 2), (3, 0), "all", None),  # failed by the rule before too
        ((3, 2), (3, 0), "majority", "flaky_failure"),
        ((1, 1), (1, 0), "all", "new_failure"),  # one trial each: stable by definition (and noted as noise)
        ((1, 1), (5, 0), "all", "new_failure"),
        ((5, 5), (1, 0), "all", "new_failure"),
        ((3, 0), (3, 3), "all", "fixed"),
        ((3, 0), (3, 1), "any", "flaky_fix"),
        ((3, 3), (3, 3), "all", None),
        ((0, 0), (3, 0), "all", None),  # no verdict before
    ],
)
def test_flip_is_stable_only_when_every_trial_agrees(
    before: tuple[int, int], after: tuple[int, int], rule: str, expected: str | None
) -> None:
    assert flip(before, after, rule) == expected  # type: ignore[arg-type]


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


# --- rescaled score test for fractional values ------------------------------------------------------------


def test_fractional_bounds_are_tango_at_one_sided_95() -> None:
    """Fractional values: the one-sided 95% bounds are Tango's 90% two-sided interval on the rescaled mass."""
    before, after = _runs([1.0] * 20, [2 / 3, 1 / 3] + [1.0] * 18)  # two changed tasks carry the spread: no rescaling
    result = paired_test(before, after)
    assert (result.ci_low, result.ci_high) == pytest.approx(tango_interval(0.0, 1.0, 20, 0.90))


def test_consistent_small_drops_are_measured_tightly() -> None:
    """30 tasks each down 0.1 +- 0.03: the spread is small, so the bounds are near a t-interval's, not Tango's."""
    rng = random.Random(4)
    deltas = [-0.1 + rng.uniform(-0.03, 0.03) for _ in range(30)]
    result = paired_test(*_runs([0.5] * 30, [0.5 + d for d in deltas]))
    plain = tango_interval(0.0, -math.fsum(deltas), 30, 0.90)
    assert result.ci_low < result.mean_delta < result.ci_high < 0.0  # type: ignore[operator]
    assert result.ci_high - result.ci_low < (plain[1] - plain[0]) / 3
    assert result.ci_high - result.ci_low > 2 * 1.645 * 0.03 / math.sqrt(3) / math.sqrt(30)  # wider than z*sd/sqrt(n)
    assert result.p_drop < 1e-6


def test_identical_fractional_flips_are_not_a_point() -> None:
    result = paired_test(*_runs([0.75, 0.75], [0.25, 0.25]))
    assert 0.05 < result.p_drop < 0.25
    assert (result.ci_low, result.ci_high) == pytest.approx(tango_interval(0.0, 1.0, 2, 0.90))
    assert result.ci_high > 0.0


def test_a_small_drop_shows_its_own_p_not_one() -> None:
    """94 up and 101 down of 1000: the bound's test gives p = 1 here (no task changing at all is ranked beyond
    the observed, and is sure when none can change); the p shown is the exact test's at 0, 0.32, and both
    leave 0 inside the bound."""
    before, after = _runs([0.0] * 94 + [1.0] * 101 + [1.0] * 805, [1.0] * 94 + [0.0] * 101 + [1.0] * 805)
    result = paired_test(before, after)
    assert exact_p(94, 101, 1000) == 1.0
    assert result.p_drop == pytest.approx(exact_p(94, 101, 1000, 0.0, order=0.0))
    assert 0.2 < result.p_drop < 0.5
    assert result.ci_high > 0.0
