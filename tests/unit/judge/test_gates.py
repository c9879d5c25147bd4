"""Gate grammar, error messages and verdicts."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gym.core.dataset import task_hash
from pytest_gym.judge.baseline import baseline_from, compare
from pytest_gym.judge.gates import Gate, GateSyntaxError, Imputed, evaluate, parse_gate
from pytest_gym.judge.intervals import clopper_pearson
from pytest_gym.judge.stats import suite_stats


@pytest.mark.parametrize(
    ("text", "metric", "k", "op", "threshold", "label"),
    [
        ("mean_reward>=0.8", "mean_reward", None, ">=", 0.8, "mean_reward>=0.8"),
        ("pass@4 >= 0.9", "pass@", 4, ">=", 0.9, "pass@4>=0.9"),
        ("  pass^2<  .5 ", "pass^", 2, "<", 0.5, "pass^2<0.5"),
        ("error_rate <= 5e-2", "error_rate", None, "<=", 0.05, "error_rate<=0.05"),
        ("ci_low( mean_reward ) > 0.7", "ci_low(mean_reward)", None, ">", 0.7, "ci_low(mean_reward)>0.7"),
        ("mean_reward >= 1", "mean_reward", None, ">=", 1.0, "mean_reward>=1"),
        ("mean_reward > -0.25", "mean_reward", None, ">", -0.25, "mean_reward>-0.25"),
        ("pass@016>=1.", "pass@", 16, ">=", 1.0, "pass@16>=1"),
        ("ci_high(mean_reward)<=0.2", "ci_high(mean_reward)", None, "<=", 0.2, "ci_high(mean_reward)<=0.2"),
        ("new_failures <= 0", "new_failures", None, "<=", 0.0, "new_failures<=0"),
        ("fixed>=1", "fixed", None, ">=", 1.0, "fixed>=1"),
        ("flaky_rate < 0.1", "flaky_rate", None, "<", 0.1, "flaky_rate<0.1"),
    ],
)
def test_parse_valid_gates(text: str, metric: str, k: int | None, op: str, threshold: float, label: str) -> None:
    gate = parse_gate(text)
    assert (gate.text, gate.metric, gate.k, gate.op, gate.threshold) == (text, metric, k, op, threshold)
    assert gate.label == label


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("accuracy >= 0.8", "unknown metric 'accuracy'"),
        ("mean_rewards >= 0.8", "unknown metric 'mean_rewards'"),
        ("new_failure <= 0", "unknown metric 'new_failure'"),
        ("fixed_tasks >= 1", "unknown metric 'fixed_tasks'"),
        ("pass@0 >= 0.5", "positive integer"),
        ("pass@k >= 0.5", "positive integer"),
        ("pass@-1 >= 0.5", "positive integer"),
        ("pass@" + "9" * 5000 + ">=1", "too large"),
        ("mean_reward", "missing a comparison"),
        ("mean_reward == 0.8", "expected one of >=, >, <=, < after 'mean_reward', found '=='"),
        ("mean_reward => 0.8", "found '=>'"),
        ("mean_reward >=", "expected a number after '>='"),
        ("mean_reward >= high", "found 'high'"),
        ("mean_reward >= nan", "not a finite number"),
        ("mean_reward >= -inf", "not a finite number"),
        ("mean_reward >= 1e400", "not a finite number"),
        ("mean_reward >= 0.8 and pass@2 >= 1", "unexpected text after the threshold"),
        ("__import__('os').system('x') >= 1", "unknown metric"),
        ("mean_reward >= \u0661", "expected a number"),  # ARABIC-INDIC DIGIT ONE: digits are ASCII only
    ],
)
def test_malformed_gates_explain_themselves(text: str, problem: str) -> None:
    with pytest.raises(GateSyntaxError) as info:
        parse_gate(text)
    message = str(info.value)
    assert problem in message
    assert repr(text) in message  # quotes the bad expression
    assert "<metric> <op> <number>" in message  # shows the grammar
    assert '"pass@4>=0.9"' in message  # and examples
    assert isinstance(info.value, ValueError)


@given(st.text(max_size=40))
def test_parser_raises_only_gate_syntax_errors_and_round_trips(text: str) -> None:
    error: GateSyntaxError | None = None
    try:
        gate = parse_gate(text)
    except GateSyntaxError as exc:
        error = exc
    if error is not None:
        assert error.text == text
        return
    again = parse_gate(gate.label)
    assert (again.metric, again.k, again.op, again.threshold) == (gate.metric, gate.k, gate.op, gate.threshold)
    assert again.label == gate.label


metric_texts = st.sampled_from(
    [
        "mean_reward",
        "error_rate",
        "ci_low(mean_reward)",
        "ci_low( mean_reward )",
        "ci_high(mean_reward)",
        "flaky_rate",
        "new_failures",
        "fixed",
    ]
) | (st.tuples(st.sampled_from("@^"), st.integers(min_value=1, max_value=10**6)).map(lambda t: f"pass{t[0]}{t[1]}"))
spaces = st.sampled_from(["", " ", "  ", "\t"])


@given(
    metric_texts,
    st.sampled_from([">=", ">", "<=", "<"]),
    st.floats(allow_nan=False, allow_infinity=False),
    spaces,
    spaces,
    spaces,
)
def test_generated_gates_parse_and_round_trip(
    metric: str, op: str, threshold: float, s1: str, s2: str, s3: str
) -> None:
    gate = parse_gate(f"{s1}{metric}{s2}{op}{s3}{threshold!r}")
    assert gate.op == op
    assert gate.threshold == threshold
    assert parse_gate(gate.label) == Gate(gate.label, gate.metric, gate.k, gate.op, gate.threshold)


# --- evaluation --------------------------------------------------------------------------------

# Tasks A [1, 1], B [1, 0], C [0, 0], D errored twice: mean 0.5, pass@1 0.5, pass@2 2/3,
# pass^2 1/3, error_rate 2/8, interval Clopper-Pearson 1.5 of 3 = [0.0387, 0.9613] (see test_stats
# for the hand computation; the t-interval was [-0.742, 1.742]), B flaky: flaky_rate 1/3.
CI = clopper_pearson(1.5, 3)
STATS = suite_stats({"A": [1, 1], "B": [1, 0], "C": [0, 0]}, min_reward=1.0, errors_by_task={"D": 2})


@pytest.mark.parametrize(
    ("text", "value", "passed"),
    [
        ("mean_reward >= 0.5", 0.5, True),
        ("mean_reward > 0.5", 0.5, False),
        ("pass@2 >= 0.6", 2 / 3, True),
        ("pass@2 >= 0.7", 2 / 3, False),
        ("pass^2 < 0.34", 1 / 3, True),
        ("pass^1 <= 0.4", 0.5, False),
        ("error_rate <= 0.25", 0.25, True),
        ("error_rate < 0.25", 0.25, False),
        ("ci_low(mean_reward) >= 0", CI[0], True),
        ("ci_low(mean_reward) >= 0.05", CI[0], False),
        ("ci_high(mean_reward) <= 1", CI[1], True),
        ("ci_high(mean_reward) < 0.9", CI[1], False),
        ("flaky_rate <= 0.34", 1 / 3, True),
        ("flaky_rate < 0.3", 1 / 3, False),
    ],
)
def test_evaluate(text: str, value: float, passed: bool) -> None:
    result = evaluate(parse_gate(text), STATS)
    assert result.value == pytest.approx(value, rel=1e-12)
    assert result.passed is passed
    assert result.gate.text == text
    assert ("required" in result.reason) is not passed


def test_failure_reason_shows_value_and_requirement() -> None:
    result = evaluate(parse_gate("pass@2>=0.7"), STATS)
    assert result.reason == "pass@2 = 0.666667, required >= 0.7"


def test_reason_never_prints_a_failing_value_like_its_threshold() -> None:
    stats = suite_stats({"a": [0.7999999], "b": [0.8]}, min_reward=1.0)  # mean 0.79999995, "0.8" at 6 digits
    result = evaluate(parse_gate("mean_reward >= 0.8"), stats)
    assert not result.passed
    assert "0.8," not in result.reason
    assert "0.7999999" in result.reason


def test_pass_at_k_beyond_repeats_fails_with_reason() -> None:
    for text in ("pass@3 >= 0", "pass^3 <= 1"):
        result = evaluate(parse_gate(text), STATS)
        assert result.value is None
        assert not result.passed
        assert "K=3 exceeds the repeats" in result.reason
        assert "fewest any task has is 2" in result.reason


def test_no_trials_fails_every_gate() -> None:
    stats = suite_stats({}, min_reward=1.0, errors_by_task={"x": 4})
    for text in ("mean_reward >= 0", "error_rate <= 1", "pass@1 >= 0", "ci_low(mean_reward) >= 0"):
        result = evaluate(parse_gate(text), stats)
        assert not result.passed
        assert result.value is None
        assert "no trial produced a reward (4 errored)" in result.reason


def test_ci_gate_with_a_single_task_is_undecided_with_reason() -> None:
    """One task (was "needs at least 2 tasks"): the interval is wide, so the gate fails as undecided."""
    stats = suite_stats({"x": [1, 1, 1]}, min_reward=1.0)
    result = evaluate(parse_gate("ci_low(mean_reward) >= 0.5"), stats)
    assert not result.passed
    assert result.value == pytest.approx(0.025)
    assert result.undecided
    assert result.tasks_needed == 5  # 0.025 ** (1/6) = 0.54 >= 0.5 > 0.025 ** (1/5)
    assert "undecided: needs about 5 more tasks (mean reward 1 is above 0.5, but 1 task is too few" in result.reason
    assert evaluate(parse_gate("mean_reward >= 0.5"), stats).passed


def test_undecided_gate_says_how_many_more_tasks() -> None:
    """Two tasks that always pass cannot show ci_low >= 0.95: about 70 more tasks at the same rate can."""
    stats = suite_stats({"a": [1, 1], "b": [1, 1]}, min_reward=1.0)
    result = evaluate(parse_gate("ci_low(mean_reward) >= 0.95"), stats)
    assert (result.passed, result.undecided, result.tasks_needed) == (False, True, 70)
    assert result.reason.startswith("ci_low(mean_reward) = 0.158114, required >= 0.95; undecided: needs about 70 more")


def test_gate_is_not_undecided_when_the_mean_is_on_the_bad_side() -> None:
    stats = suite_stats({"a": [1], "b": [0], "c": [1], "d": [0], "e": [0]}, min_reward=1.0)  # mean 0.4
    for text in ("ci_low(mean_reward) >= 0.5", "ci_low(mean_reward) >= 0.4", "ci_high(mean_reward) <= 0.4"):
        result = evaluate(parse_gate(text), stats)
        assert not result.passed
        assert not result.undecided
        assert "undecided" not in result.reason


def test_ci_high_gate_is_undecided_mirrored() -> None:
    """Mirror of the two passing tasks: two failing tasks cannot show ci_high <= 0.05, 70 more can."""
    stats = suite_stats({"a": [0, 0], "b": [0, 0]}, min_reward=1.0)
    result = evaluate(parse_gate("ci_high(mean_reward) <= 0.05"), stats)
    assert (result.passed, result.undecided, result.tasks_needed) == (False, True, 70)
    assert "mean reward 0 is below 0.05" in result.reason


def test_ci_gate_without_an_interval_says_why() -> None:
    stats = suite_stats({"a": [2.0], "b": [0.5]}, min_reward=1.0)
    result = evaluate(parse_gate("ci_low(mean_reward) >= 0.5"), stats)
    assert (result.passed, result.value) == (False, None)
    assert "the interval needs rewards in [0, 1], got 2.0" in result.reason


def test_flaky_rate_needs_repeats() -> None:
    result = evaluate(parse_gate("flaky_rate <= 0"), suite_stats({"a": [1], "b": [0]}, min_reward=1.0))
    assert (result.passed, result.value) == (False, None)
    assert "raise --gym-repeats" in result.reason


def _row_hash(i: int) -> str:
    return task_hash({"responses_create_params": {"input": f"q{i}"}})


def test_new_failures_and_fixed_gates_count_and_name_tasks() -> None:
    h = [_row_hash(i) for i in range(5)]
    before = suite_stats({h[0]: [1, 1], h[1]: [1, 1], h[2]: [0, 0], h[3]: [1, 1], h[4]: [1, 1]}, min_reward=1.0)
    baseline = baseline_from(before, {}, {x: i + 1 for i, x in enumerate(h)})
    now = suite_stats({h[0]: [1, 0], h[1]: [1, 1], h[2]: [1, 1], h[3]: [0, 0], h[4]: [0, 0]}, min_reward=1.0)
    comparison = compare(baseline, now, lines={x: i + 10 for i, x in enumerate(h)})
    result = evaluate(parse_gate("new_failures <= 0"), now, comparison)
    # h[3] and h[4] passed every trial and fail every one now; h[0] fails one of two: flaky, not counted.
    assert (result.passed, result.value) == (False, 2.0)
    assert result.reason == (
        f"new_failures = 2, required <= 0: {h[3][:12]} (line 13), {h[4][:12]} (line 14) "
        f"(flaky, not counted: {h[0][:12]} (line 10))"
    )
    assert evaluate(parse_gate("fixed >= 1"), now, comparison).passed
    # The majority rule forgives the one failed repeat of h[0]; it is no flip at all then.
    lenient = compare(baseline, suite_stats({h[0]: [1, 0, 1]}, min_reward=1.0, rule="majority"), rule="majority")
    assert evaluate(parse_gate("new_failures <= 0"), now, lenient).passed
    assert lenient.flaky_failures == []


def test_new_failures_gate_with_one_trial_says_flips_are_noise() -> None:
    h = [_row_hash(i) for i in range(6)]
    baseline = baseline_from(suite_stats({x: [1] for x in h}, min_reward=1.0), {}, {})
    now = suite_stats({x: [0 if i == 0 else 1] for i, x in enumerate(h)}, min_reward=1.0)
    result = evaluate(parse_gate("new_failures <= 0"), now, compare(baseline, now))
    assert not result.passed  # one trial each: a flip is still counted (a deterministic break is caught)
    assert "a flip of such a task cannot be told from noise" in result.reason


def test_baseline_gates_with_no_shared_task_are_no_evidence() -> None:
    baseline = baseline_from(suite_stats({_row_hash(0): [1]}, min_reward=1.0), {}, {})
    now = suite_stats({_row_hash(1): [1]}, min_reward=1.0)
    for text in ("new_failures <= 0", "fixed >= 0"):
        result = evaluate(parse_gate(text), now, compare(baseline, now))
        assert (result.passed, result.value) == (False, None)
        assert "no evidence: the baseline and this run share no task" in result.reason


def test_baseline_gates_without_a_baseline_fail_with_reason() -> None:
    result = evaluate(parse_gate("new_failures <= 0"), STATS)
    assert (result.passed, result.value) == (False, None)
    assert "no baseline to compare with (give --gym-baseline FILE)" in result.reason
    custom = evaluate(parse_gate("fixed >= 0"), STATS, no_comparison="no baseline for suite s in b.json")
    assert custom.reason == "fixed>=0: no baseline for suite s in b.json"


# --- errored trials: a gate is decided over what they could have been -----------------------------------


def _imputed(trials: dict[str, list[float | None]]) -> tuple[Any, Imputed]:
    rewards = {h: [r for r in v if r is not None] for h, v in trials.items()}
    errors = {h: v.count(None) for h, v in trials.items() if None in v}
    stats = suite_stats(rewards, 1.0, errors)
    fill = {value: suite_stats({h: [value if r is None else r for r in v] for h, v in trials.items()}, 1.0)
            for value in (0.0, 1.0)}  # fmt: skip
    errored = [h for h in trials if None in trials[h]]
    return stats, Imputed(fill[0.0], fill[1.0], None, None, errored, sum(errors.values()), ", ".join)


def test_errored_trials_pass_a_gate_only_when_it_holds_either_way() -> None:
    trials: dict[str, list[float | None]] = {f"t{i}": [1.0, 1.0] for i in range(18)}
    trials["t0"] = [1.0, None]  # one errored trial of 36
    stats, imputed = _imputed(trials)
    holds = evaluate(parse_gate("mean_reward >= 0.9"), stats, imputed=imputed)  # 35/36 or 1 either way
    assert holds.passed
    assert holds.bounds == (pytest.approx(35 / 36), 1.0)
    assert holds.errored_tasks == ["t0"]
    assert "with the 1 errored trial (t0) counted as failures or as successes" in holds.reason
    fails = evaluate(parse_gate("mean_reward >= 1.01"), stats, imputed=imputed)
    assert (fails.passed, fails.undecided) == (False, False)
    assert "however the 1 errored trial (t0) had gone" in fails.reason
    open_ = evaluate(parse_gate("mean_reward >= 0.99"), stats, imputed=imputed)  # 0.972 as a failure, 1 as a success
    assert (open_.passed, open_.undecided) == (False, True)
    assert "undecided: 0.972222..1 with the 1 errored trial (t0) counted as failures or as successes" in open_.reason
    assert evaluate(parse_gate("error_rate <= 0.05"), stats, imputed=imputed).bounds is None  # measured, not bounded


def test_every_metric_of_a_suite_with_errors_is_bounded() -> None:
    trials: dict[str, list[float | None]] = {f"t{i}": [1.0, 1.0, 1.0, 1.0] for i in range(100)}
    trials.update({f"e{i}": [None] * 4 for i in range(100)})
    stats, imputed = _imputed(trials)
    for text in ("ci_low(mean_reward)>=0.95", "mean_reward>=0.99", "pass@4>=0.99", "pass^2>=0.6", "flaky_rate<=0.1"):
        result = evaluate(parse_gate(text), stats, imputed=imputed)
        assert result.bounds is not None, text
        if text.startswith("flaky"):  # any mix of outcomes: up to 2*2*2/(4*3) = 2/3 on the errored half
            assert result.bounds == (0.0, pytest.approx(1 / 3))
        assert not result.passed, text
        assert result.undecided, text


def test_pass_at_k_short_of_trials_because_of_errors_says_so() -> None:
    """Was "raise --gym-repeats to at least 4": the repeats were 4, one trial errored."""
    stats = suite_stats({"a": [1.0] * 4, "b": [1.0, 1.0, 1.0]}, 1.0, {"b": 1})
    result = evaluate(parse_gate("pass@4 >= 0.9"), stats)
    assert "raise --gym-repeats" not in result.reason
    assert "1 task has fewer than 4 trials with a reward because 1 trial errored (b)" in result.reason


def test_ci_gate_names_the_ceiling_of_too_few_tasks() -> None:
    """Ten perfect tasks can never show ci_low >= 0.95 (at most 0.692); the reason says it needs 72."""
    result = evaluate(
        parse_gate("ci_low(mean_reward) >= 0.95"), suite_stats({f"t{i}": [1.0] * 3 for i in range(10)}, 1.0)
    )
    assert result.undecided
    assert result.tasks_needed == 62
    assert "ci_low cannot pass 0.692 with 10 tasks even if every trial passed; 0.95 needs at least 72 tasks" in (
        result.reason
    )


def test_flaky_rate_means_the_same_at_any_repeats() -> None:
    """A policy right with chance 0.9 on every task: the share of flaky tasks was 0.18/0.41/0.57 at k = 2/5/8;
    the chance that two trials of a task disagree is 0.18 at each (2000 tasks: within 0.02, 2 SE at k = 2)."""
    rng = random.Random(12)
    for k in (2, 5, 8):
        stats = suite_stats({f"t{i}": [float(rng.random() < 0.9) for _ in range(k)] for i in range(2000)}, 1.0)
        assert stats.flaky_rate == pytest.approx(0.18, abs=0.02), k
        result = evaluate(parse_gate("flaky_rate <= 0.25"), stats)
        assert result.passed
        assert "(the chance that two trials of a task disagree)" in result.reason
