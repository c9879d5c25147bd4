"""``--gym-task-pass``: named rules, shares and counts; when a task's verdict is settled before its last repeat.

The claims about ``decided`` and ``can_start`` are checked by enumerating every sequence of outcomes.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from pytest_gym.core.settings import GymSettings
from pytest_gym.core.taskrule import TaskRuleError, parse_task_rule
from pytest_gym.judge.paired import passes_by_count
from pytest_gym.judge.stats import suite_stats


@pytest.mark.parametrize(
    ("text", "trials", "successes", "expected"),
    [
        ("all", 5, 5, True),
        ("all", 5, 4, False),
        ("majority", 4, 2, False),  # a tie is no majority
        ("majority", 5, 3, True),
        ("any", 5, 1, True),
        ("any", 5, 0, False),
        ("4/5", 5, 4, True),
        ("4/5", 5, 3, False),
        ("0.8", 5, 4, True),
        ("0.8", 10, 7, False),
        ("0.8", 10, 8, True),
        ("4/5", 4, 3, False),  # 80% of 4 trials is 3.2: all 4 are needed
        ("2/3", 3, 2, True),
        ("1", 3, 2, False),
        ("0.5", 4, 2, True),  # at least half (majority needs more than half)
    ],
)
def test_shares_and_counts(text: str, trials: int, successes: int, expected: bool) -> None:
    assert parse_task_rule(text).passes(trials, successes) is expected
    assert passes_by_count(trials, successes, text) is expected


def test_no_trial_never_passes() -> None:
    assert [parse_task_rule(r).passes(0, 0) for r in ("all", "any", "majority", "0.5", "1/3")] == [False] * 5


@pytest.mark.parametrize("text", ["0", "0.0", "5/4", "0/3", "3/0", "1.5", "most", "80%", "-0.5", ""])
def test_bad_rules_name_what_is_accepted(text: str) -> None:
    with pytest.raises(TaskRuleError, match=r"4/5|0\.8"):
        parse_task_rule(text)


def test_the_settings_take_a_share_and_refuse_nonsense() -> None:
    assert GymSettings(task_pass=" 4/5 ").task_pass == "4/5"
    assert GymSettings(task_pass="0.8").task_pass == "0.8"
    with pytest.raises(ValueError, match="4/5"):
        GymSettings(task_pass="5/4")


@pytest.mark.parametrize("text", ["all", "majority", "any", "4/5", "0.8", "2/3", "0.5", "1/7"])
@pytest.mark.parametrize("repeats", [1, 2, 3, 4, 5, 7])
def test_needed_is_the_least_count_that_passes(text: str, repeats: int) -> None:
    rule = parse_task_rule(text)
    m = rule.needed(repeats)
    assert rule.passes(repeats, m)
    assert m == 1 or not rule.passes(repeats, m - 1)


@pytest.mark.parametrize("text", ["all", "majority", "any", "4/5", "0.8", "2/3", "1/7"])
@pytest.mark.parametrize("repeats", [1, 2, 3, 4, 5, 6])
def test_decided_exactly_when_no_remaining_outcome_can_change_the_verdict(text: str, repeats: int) -> None:
    """Every prefix of every outcome sequence: ``decided`` equals "all completions give one verdict", and a task
    stopped where it is decided gets the verdict of all its trials from the trials it ran."""
    rule = parse_task_rule(text)
    for outcomes in itertools.product((0, 1), repeat=repeats):
        full = rule.passes(repeats, sum(outcomes))
        stopped = None
        for ran in range(repeats + 1):
            prefix = outcomes[:ran]
            s = sum(prefix)
            completions = {
                rule.passes(repeats, s + sum(rest)) for rest in itertools.product((0, 1), repeat=repeats - ran)
            }
            expected = completions.pop() if len(completions) == 1 else None
            assert rule.decided(repeats, s, ran - s) == expected, (text, outcomes, ran)
            if stopped is None and expected is not None:
                stopped = prefix
        assert stopped is not None
        # The judge sees only the trials that ran: its verdict of the task is the full run's.
        assert suite_stats({"t": [float(x) for x in stopped]}, 1.0, rule=text).per_task["t"].passed is full


@pytest.mark.parametrize("text", ["all", "majority", "any", "4/5", "2/3"])
@pytest.mark.parametrize("repeats", [1, 3, 5])
def test_can_start_never_starts_a_repeat_the_unfinished_ones_could_make_useless(text: str, repeats: int) -> None:
    rule = parse_task_rule(text)
    for s, f in itertools.product(range(repeats + 1), repeat=2):
        if s + f > repeats or rule.decided(repeats, s, f) is not None:
            continue
        for unfinished in range(repeats - s - f):
            useful_always = all(
                rule.decided(repeats, s + a, f + (unfinished - a)) is None for a in range(unfinished + 1)
            )
            assert rule.can_start(repeats, s, f, unfinished) is useful_always, (text, repeats, s, f, unfinished)


def test_a_share_is_exact_not_floating() -> None:
    rule = parse_task_rule("0.7")
    assert rule.share == Fraction(7, 10)
    assert rule.passes(10, 7)  # 0.7 * 10 in floating point is 7.000000000000001
