"""Retry policy (faults only, bounded backoff with jitter) and the error budget."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gym.rollout.budget import ErrorBudget, parse_error_budget
from pytest_gym.rollout.retry import BASE_DELAY_S, MAX_DELAY_S, backoff_s, is_retryable
from pytest_gym.rollout.transport import TrialFault, parse_answer


@pytest.mark.parametrize(
    ("error_class", "status", "expected"),
    [
        ("connection", None, True),
        ("timeout", None, True),
        ("gym_failure", 200, True),
        ("http_status", 503, True),
        ("http_status", 429, True),
        ("http_status", 400, False),
        ("http_status", 404, False),
        ("bad_body", 200, False),
        ("no_reward", 200, False),
        ("bad_reward", 200, False),
        (None, None, False),
    ],
)
def test_only_infrastructure_faults_are_retried(error_class: str | None, status: int | None, expected: bool) -> None:
    assert is_retryable(error_class, status) is expected


@given(st.integers(min_value=1, max_value=60), st.integers(min_value=0, max_value=2**32))
def test_backoff_is_bounded_and_grows(attempt: int, seed: int) -> None:
    rng = random.Random(seed)
    delay = backoff_s(attempt, rng)
    ceiling = min(MAX_DELAY_S, BASE_DELAY_S * 2 ** (attempt - 1))
    assert ceiling / 2 <= delay <= ceiling <= MAX_DELAY_S


def test_backoff_has_jitter() -> None:
    rng = random.Random(1)
    assert len({round(backoff_s(3, rng), 6) for _ in range(20)}) > 10


def test_the_jitter_does_not_repeat_when_the_random_module_is_reseeded() -> None:
    """pytest-randomly reseeds ``random`` before every test: trials throttled together must not retry together."""
    draws = []
    for _ in range(5):
        random.seed(1234)  # as before each trial
        draws.append(backoff_s(3))
    assert len(set(draws)) == 5


def test_gym_infrastructure_failure_kind_is_a_fault_but_a_verifier_verdict_is_a_result() -> None:
    body = b'{"reward": 0.0, "failure_kind": "provider_unavailable", "failure_reason": "upstream 503"}'
    with pytest.raises(TrialFault) as excinfo:
        parse_answer(200, body, "http://gym/run", "reward")
    assert excinfo.value.error_class == "gym_failure"
    assert "provider_unavailable" in excinfo.value.message
    assert "upstream 503" in excinfo.value.message
    _, reward = parse_answer(200, b'{"reward": 0.0, "failure_kind": "verifier_error"}', "http://gym/run", "reward")
    assert reward == 0.0


@pytest.mark.parametrize(
    ("text", "budget", "total", "limit"),
    [
        ("3", ErrorBudget(count=3), 100, 3),
        ("10%", ErrorBudget(percent=10.0), 55, 5),
        ("0", ErrorBudget(count=0), 9, 0),
        (None, ErrorBudget(), 10, None),
    ],
)
def test_error_budget(text: str | None, budget: ErrorBudget, total: int, limit: int | None) -> None:
    parsed = parse_error_budget(text)
    assert parsed == budget
    assert parsed.limit(total) == limit
    if limit is not None:
        assert not parsed.exceeded(limit, total)
        assert parsed.exceeded(limit + 1, total)


@pytest.mark.parametrize("text", ["-1", "1.5", "ten", "120%", "5 %%"])
def test_bad_error_budget_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"number of errors|percentage"):
        parse_error_budget(text)


@pytest.mark.parametrize("text", ["1" + "0" * 400, "1" + "0" * 400 + ".5", "٣", "٣%"])
def test_an_error_budget_too_large_or_in_other_digits_is_refused_saying_what_is_accepted(text: str) -> None:
    """A 400-digit count is infinity as a float (int() of it raised OverflowError); Arabic-Indic digits are no
    number a user means on a command line (Python's float() reads them)."""
    with pytest.raises(ValueError, match=r"number of errors|percentage"):
        parse_error_budget(text)
