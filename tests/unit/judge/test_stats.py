"""Statistics against hand-computed values and properties (against NeMo Gym's own implementation:
tests/gym/test_statistics_equal_gyms.py)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gym.judge.intervals import clopper_pearson, suite_interval, t_ppf
from pytest_gym.judge.paired import paired_test
from pytest_gym.judge.stats import pass_at_k, pass_hat_k, suite_stats, task_stats

# Two-sided 95% Student-t critical values, t_{0.975, df}, as printed in standard tables
# (given here to more digits than tables print).
T_975 = {
    1: 12.706204736174707,  # exactly tan(0.475 * pi)
    2: 4.302652729749462,  # exactly 0.95 / sqrt(2 * 0.975 * 0.025)
    3: 3.182446305283708,
    4: 2.776445105197793,
    5: 2.570581835636315,
    10: 2.228138851986274,
    30: 2.042272456301238,
    100: 1.983971518523552,
    1000: 1.962339080826408,
}


# --- pass@k / pass^k -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (10, 3, 1, 0.3),  # pass@1 is the success fraction
        (3, 1, 3, 1.0),  # n - c = 2 < k = 3: every 3-draw contains the success
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
    ],
)
def test_pass_at_k_hand_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 3, 2, 0.5),  # C(3,2)/C(4,2) = 3/6
        (5, 2, 3, 0.0),  # cannot draw 3 successes out of 2
        (10, 3, 1, 0.3),
        (4, 4, 4, 1.0),
        (6, 4, 3, 0.2),  # C(4,3)/C(6,3) = 4/20
    ],
)
def test_pass_hat_k_hand_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_hat_k(n, c, k) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 1, 0), (3, 4, 1), (3, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="need"):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError, match="need"):
        pass_hat_k(n, c, k)


counts = st.integers(min_value=1, max_value=60).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(min_value=0, max_value=n))
)


@given(counts)
def test_pass_at_k_non_decreasing_in_k(nc: tuple[int, int]) -> None:
    n, c = nc
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(a <= b for a, b in itertools.pairwise(values))
    assert values[0] == pytest.approx(c / n)


@given(counts)
def test_pass_hat_k_non_increasing_in_k(nc: tuple[int, int]) -> None:
    n, c = nc
    values = [pass_hat_k(n, c, k) for k in range(1, n + 1)]
    assert all(a >= b for a, b in itertools.pairwise(values))


@given(counts)
def test_pass_at_k_at_least_pass_hat_k(nc: tuple[int, int]) -> None:
    n, c = nc
    for k in range(1, n + 1):
        assert pass_at_k(n, c, k) >= pass_hat_k(n, c, k)


# --- t quantile (the one the suite interval's small-sample shrinkage uses) ----------------------


@pytest.mark.parametrize(("df", "expected"), sorted(T_975.items()))
def test_t_quantile_matches_table(df: int, expected: float) -> None:
    assert t_ppf(0.975, df) == pytest.approx(expected, rel=1e-10)


def test_t_quantile_closed_forms_and_limits() -> None:
    for p in (0.6, 0.9, 0.99, 0.999):
        assert t_ppf(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-10)
        assert t_ppf(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-10)
        assert t_ppf(1 - p, 7) == -t_ppf(p, 7)
    assert t_ppf(0.5, 3) == 0.0
    # Normal limit: z_{0.975} = 1.959963984540054; t approaches it from above.
    assert 1.959963984540054 < t_ppf(0.975, 10**6) < 1.95997
    with pytest.raises(ValueError, match="p must be"):
        t_ppf(1.0, 3)
    with pytest.raises(ValueError, match="df must be"):
        t_ppf(0.975, 0)


# --- task and suite statistics -----------------------------------------------------------------


def test_task_stats_counts_successes_at_min_reward() -> None:
    ts = task_stats("h", [0.4, 0.6, 0.9], min_reward=0.6, errors=2)
    assert (ts.n, ts.successes, ts.errors) == (3, 2, 2)
    assert ts.mean_reward == pytest.approx(1.9 / 3)
    assert ts.pass_at == pytest.approx({1: 2 / 3, 2: 1.0, 3: 1.0})
    assert ts.pass_hat == pytest.approx({1: 2 / 3, 2: 1 / 3, 3: 0.0})
    assert not ts.passed  # by default every trial must reach min_reward (the mean 0.633 does not count)
    assert ts.flaky  # 2 of 3 reach it
    assert task_stats("h", [0.4, 0.6, 0.9], min_reward=0.6, rule="majority").passed
    assert task_stats("h", [0.4, 0.5, 0.9], min_reward=0.6, rule="any").passed
    assert not task_stats("h", [0.4, 0.5, 0.9], min_reward=0.6, rule="majority").passed


def test_task_stats_without_rewards_and_bad_rewards() -> None:
    ts = task_stats("h", [], min_reward=1.0, errors=3)
    assert (ts.n, ts.mean_reward, ts.pass_at, ts.passed) == (0, None, {}, False)
    with pytest.raises(ValueError, match="finite"):
        task_stats("h", [1.0, math.nan], min_reward=1.0)


def test_suite_stats_small_example_by_hand() -> None:
    # Tasks A [1, 1], B [1, 0], C [0, 0], plus task D whose 2 trials errored.
    # mean = 3/6 = 0.5. The interval (was the t-interval [-0.742069, 1.742069]): residuals per task
    # +1, 0, -1, CR1 variance 3/2 * 2/36 = 1/12, raw n_eff 0.25 * 12 = 3, shrunk by (z/t_2)^2 = 0.2075
    # -> 0.62, below the floor N^2/sum(m^2) = 36/12 = 3 tasks: Clopper-Pearson 1.5 of 3
    # = [Beta^-1(0.025; 1.5, 2.5), 1 - the same] = [0.038748, 0.961252] (scipy.stats.beta.ppf).
    # pass@1 = (1 + 0.5 + 0)/3 = 0.5; pass@2 = (1 + 1 + 0)/3; pass^2 = (1 + 0 + 0)/3.
    # error_rate = 2 / (6 + 2).
    stats = suite_stats({"A": [1, 1], "B": [1, 0], "C": [0, 0]}, min_reward=1.0, errors_by_task={"D": 2})
    assert (stats.tasks, stats.trials, stats.errors) == (4, 6, 2)
    assert stats.error_rate == 0.25
    assert stats.mean_reward == 0.5
    assert (stats.ci_low, stats.ci_high) == pytest.approx(clopper_pearson(1.5, 3), rel=1e-12)
    assert stats.ci_low == pytest.approx(0.038748, abs=1e-6)
    assert stats.ci_high == pytest.approx(0.961252, abs=1e-6)
    assert stats.pass_at == pytest.approx({1: 0.5, 2: 2 / 3})
    assert stats.pass_hat == pytest.approx({1: 0.5, 2: 1 / 3})
    assert stats.max_k == 2
    assert stats.per_task["D"].n == 0
    assert stats.per_task["D"].errors == 2
    assert [h for h, ts in stats.per_task.items() if ts.passed] == ["A"]


def test_suite_stats_unequal_repeats_weight_trials_for_mean_and_tasks_for_pass_at() -> None:
    # A [1, 1, 1], B [0]: mean over trials = 3/4 (Gym's mean/reward); pass@1 over tasks = (1 + 0)/2.
    # Interval (was the t-interval 0.75 -+ 4.764827): two tasks give df 1, so n_eff is the floor
    # N^2 / sum(m^2) = 16/10 = 1.6 effective tasks: Clopper-Pearson 0.75 * 1.6 = 1.2 of 1.6.
    stats = suite_stats({"A": [1.0, 1.0, 1.0], "B": [0.0]}, min_reward=1.0)
    assert stats.mean_reward == 0.75
    assert stats.pass_at == {1: 0.5}  # k stops at the fewest trials any task has
    assert (stats.ci_low, stats.ci_high) == pytest.approx(clopper_pearson(1.2, 1.6), rel=1e-12)
    assert stats.ci_low == pytest.approx(0.033892, abs=1e-6)
    assert stats.ci_high == pytest.approx(0.999962, abs=1e-6)


def test_suite_stats_exact_averages_reach_their_threshold() -> None:
    # Three tasks at pass@1 = 7/10 each: naive float averaging gives (0.7 + 0.7 + 0.7) / 3 = 0.6999999999999998,
    # which would fail a gate pass@1 >= 0.7 that the suite meets exactly.
    stats = suite_stats({t: [1] * 7 + [0] * 3 for t in "abc"}, min_reward=1.0)
    assert stats.pass_at[1] == 0.7
    assert stats.pass_at[2] == 42 / 45  # 1 - C(3,2)/C(10,2), rounded once


def test_suite_stats_degenerate_cases() -> None:
    empty = suite_stats({}, min_reward=1.0)
    assert (empty.tasks, empty.trials, empty.error_rate) == (0, 0, 0.0)
    assert (empty.mean_reward, empty.ci_low, empty.ci_high, empty.pass_at) == (None, None, None, {})

    all_errored = suite_stats({}, min_reward=1.0, errors_by_task={"x": 3})
    assert (all_errored.tasks, all_errored.trials, all_errored.error_rate) == (1, 0, 1.0)
    assert all_errored.mean_reward is None

    # One task (was no interval at all) and tasks with equal means (was the point [0.5, 0.5]):
    # both wide, from the Kish effective number of tasks (1 and 2).
    one_task = suite_stats({"x": [1, 0, 1, 1]}, min_reward=1.0)
    assert one_task.mean_reward == 0.75
    assert (one_task.ci_low, one_task.ci_high) == pytest.approx(clopper_pearson(0.75, 1))
    assert one_task.ci_low < 0.01
    assert one_task.ci_high > 0.99

    same_means = suite_stats({"x": [1, 0], "y": [0, 1]}, min_reward=1.0)
    assert (same_means.ci_low, same_means.ci_high) == pytest.approx(clopper_pearson(1, 2))
    assert (same_means.ci_low, same_means.ci_high) == pytest.approx((0.012579, 0.987421), abs=1e-6)


def test_suite_stats_demo_two_of_five_stays_inside_unit_interval() -> None:
    """The mcqa example answering E: 2 of 5 tasks pass (was 0.400, 95% CI -0.280..1.080)."""
    stats = suite_stats({t: [r] for t, r in zip("abcde", [1.0, 0.0, 1.0, 0.0, 0.0], strict=True)}, min_reward=1.0)
    assert stats.mean_reward == 0.4
    assert (round(stats.ci_low or 0, 2), round(stats.ci_high or 0, 2)) == (0.05, 0.85)


def test_suite_stats_no_interval_for_rewards_outside_the_unit_interval() -> None:
    stats = suite_stats({"x": [1.5, 0.5], "y": [1.0]}, min_reward=1.0)
    assert stats.mean_reward == 1.0
    assert (stats.ci_low, stats.ci_high) == (None, None)
    assert stats.ci_note == "the interval needs rewards in [0, 1], got 1.5"


def test_suite_stats_flaky_tasks() -> None:
    stats = suite_stats({"a": [1, 0], "b": [1, 1], "c": [0, 0], "d": [0, 1], "e": [1]}, min_reward=1.0)
    assert stats.flaky == ["a", "d"]
    # The chance two trials of a task disagree, over the tasks with two trials: (1 + 0 + 0 + 1) / 4.
    assert stats.flaky_rate == 2 / 4
    three = suite_stats({"a": [1, 0, 1], "b": [1, 1, 1]}, min_reward=1.0)
    assert three.flaky_rate == (2 / 3 + 0) / 2  # a: 2 of its 3 pairs of trials disagree
    assert stats.to_dict()["per_task"]["a"]["flaky"] is True
    assert suite_stats({"a": [1], "b": [0]}, min_reward=1.0).flaky_rate is None  # one trial each: cannot disagree


def test_suite_stats_to_dict_is_json() -> None:
    stats = suite_stats({"A": [1, 0], "B": [1, 1]}, min_reward=1.0, errors_by_task={"B": 1})
    data = json.loads(json.dumps(stats.to_dict()))
    assert data["pass_at"] == {"1": 0.75, "2": 1.0}
    assert data["per_task"]["B"]["errors"] == 1
    assert data["per_task"]["A"]["passed"] is False
    assert "per_task" not in stats.to_dict(per_task=False)


reward = st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.floats(min_value=-2, max_value=2, allow_nan=False)
suites = st.dictionaries(
    st.text(min_size=1, max_size=8), st.lists(reward, min_size=1, max_size=6), min_size=1, max_size=12
)


@given(suites)
def test_ci_contains_the_mean(per_task: dict[str, list[float]]) -> None:
    stats = suite_stats(per_task, min_reward=1.0)
    assert stats.mean_reward is not None
    if any(not 0.0 <= r <= 1.0 for rewards in per_task.values() for r in rewards):
        assert (stats.ci_low, stats.ci_high) == (None, None)
        assert stats.ci_note is not None
    else:
        assert stats.ci_low is not None
        assert stats.ci_high is not None
        assert 0.0 <= stats.ci_low <= stats.mean_reward <= stats.ci_high <= 1.0
        assert stats.ci_low < stats.ci_high


@given(
    st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=15),
    st.integers(min_value=2, max_value=8),
)
def test_clustering_widens_ci_when_repeats_agree(task_values: list[float], repeats: int) -> None:
    """Cloned repeats of pass/fail tasks add nothing: the interval is the one-trial-per-task one,
    never narrower than treating every trial as independent."""
    groups = [[v] * repeats for v in task_values]
    clustered = suite_interval(groups)
    assert clustered == pytest.approx(suite_interval([[v] for v in task_values]))
    trials = len(task_values) * repeats
    naive = clopper_pearson(sum(task_values) * repeats, trials)
    assert clustered[1] - clustered[0] >= naive[1] - naive[0] - 1e-12


@given(st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=3, max_size=3), min_size=1, max_size=10))
def test_pass_at_1_is_mean_reward_for_binary_equal_repeats(rewards: list[list[float]]) -> None:
    stats = suite_stats({str(i): r for i, r in enumerate(rewards)}, min_reward=1.0)
    assert stats.pass_at[1] == pytest.approx(stats.mean_reward)


@given(suites, st.sampled_from([0.25, 0.5, 1.0]))
def test_suite_pass_at_k_is_the_task_average(per_task: dict[str, list[float]], min_reward: float) -> None:
    stats = suite_stats(per_task, min_reward=min_reward)
    assert stats.max_k == min(len(r) for r in per_task.values())
    for k in range(1, stats.max_k + 1):
        tasks = stats.per_task.values()
        assert stats.pass_at[k] == pytest.approx(sum(ts.pass_at[k] for ts in tasks) / len(tasks), abs=1e-12)
        assert stats.pass_hat[k] == pytest.approx(sum(ts.pass_hat[k] for ts in tasks) / len(tasks), abs=1e-12)


# --- paired difference (now pytest_gym.judge.paired.paired_test; more in test_paired.py) ---------


def test_paired_difference_by_hand() -> None:
    # Shared a, b, c: deltas -0.5, 0, 0 -> mean -1/6: not a drop (was a t-interval [-0.883775, 0.550442]).
    # d and z are unshared.
    diff = paired_test({"a": 1.0, "b": 0.5, "c": 0.0, "z": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.0, "d": 1.0})
    assert diff.n_shared == 3
    assert diff.mean_delta == pytest.approx(-1 / 6)
    assert diff.p_drop > 0.2
    assert diff.ci_low < diff.mean_delta < diff.ci_high
    assert diff.ci_high > 0
    assert not diff.significant_drop()


def test_paired_difference_significant_drop_by_hand() -> None:
    # Deltas -0.5, -0.4, -0.6, -0.5, all alike: the rescaled score test is a t-test here (p = 0.005 on its
    # effective 2 df, where the t-interval said [-0.63, -0.37]); compare() calls 4 tasks no evidence anyway.
    before = {"a": 1.0, "b": 0.9, "c": 0.8, "d": 0.7}
    after = {"a": 0.5, "b": 0.5, "c": 0.2, "d": 0.2}
    diff = paired_test(before, after)
    assert diff.mean_delta == pytest.approx(-0.5)
    assert diff.p_drop == pytest.approx(0.0049, abs=1e-4)
    assert diff.significant_drop()
    assert diff.ci_high < 0
    assert diff.method.endswith("t on 2 df)")


def test_paired_difference_too_few_shared_tasks() -> None:
    none = paired_test({"a": 1.0}, {"b": 1.0})
    assert (none.n_shared, none.mean_delta, none.p_drop, none.significant_drop()) == (0, None, 1.0, False)
    one = paired_test({"a": 1.0}, {"a": 0.0})
    assert (one.n_shared, one.mean_delta, one.p_drop, one.significant_drop()) == (1, -1.0, 0.5, False)
