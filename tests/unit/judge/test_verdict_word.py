"""The suite's verdict word and what happened, from its summary: PASS, WARN, FAIL, INCONCLUSIVE."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gym.judge.summary import BaselineSummary, GateSummary, KnownFailuresSummary, KnownTask, SuiteSummary
from pytest_gym.judge.verdict_word import verdict_of


def suite(trials: int = 10, failed: int = 0, errors: int = 0, **fields: Any) -> SuiteSummary:
    return SuiteSummary(tasks=trials, trials=trials - errors, errors=errors, failed_trials=failed, **fields)


def gate(passed: bool, undecided: bool = False) -> GateSummary:
    return GateSummary(value=0.5, passed=passed, undecided=undecided)


def known(failing: int = 0, fixed: int = 0, expired: int = 0, failed_trials: int = 0) -> KnownFailuresSummary:
    def tasks(n: int) -> list[KnownTask]:
        return [KnownTask(hash=f"{i:012x}", entry=f"k.yaml:{i}") for i in range(n)]

    return KnownFailuresSummary(
        failing=tasks(failing), fixed=tasks(fixed), expired=tasks(expired), failed_trials=failed_trials
    )


@pytest.mark.parametrize(
    ("summary", "mode", "word", "text"),
    [
        (suite(failed=6), "trial", "FAIL", "6 of 10 trials failed, no gates"),
        (suite(), "trial", "PASS", "all 10 trials passed, no gates"),
        (suite(failed=6), "gate", "WARN", "6 of 10 trials below min reward (xfail), no gates"),
        (suite(failed=6, gates={"mean_reward>=0.3": gate(True)}), "gate", "PASS",
         "6 of 10 trials below min reward (xfail), 1 gate passed"),
        (suite(failed=6, gates={"mean_reward>=0.8": gate(False), "pass@1>=0.1": gate(False)}), "gate", "FAIL",
         "6 of 10 trials below min reward (xfail), gate mean_reward>=0.8 and 1 more failed"),
        (suite(gates={"ci_low(mean_reward)>=0.9": gate(False, undecided=True)}), "trial", "INCONCLUSIVE",
         "all 10 trials passed, gate ci_low(mean_reward)>=0.9 undecided"),
        (suite(errors=1), "trial", "FAIL", "all 9 trials passed, 1 trial errored, no gates"),
        (suite(failed=2, known_failures=known(failing=1, failed_trials=2)), "trial", "WARN",
         "all 8 other trials passed, 1 quarantined task failed (known failures), no gates"),
        (suite(known_failures=known(fixed=2)), "trial", "WARN",
         "all 10 trials passed, 2 known failures now pass: remove from the list, no gates"),
        (suite(known_failures=known(expired=1)), "trial", "FAIL",
         "all 10 trials passed, 1 known-failure entry expired, no gates"),
        (suite(baseline=BaselineSummary(regressed=True)), "trial", "FAIL",
         "all 10 trials passed, no gates, regression against the baseline"),
        (suite(baseline=BaselineSummary(passed=False, no_evidence="1 shared task")), "trial", "FAIL",
         "all 10 trials passed, no gates, baseline check failed"),
        (suite(baseline=BaselineSummary(passed=False, undecided=True)), "trial", "INCONCLUSIVE",
         "all 10 trials passed, no gates, baseline check undecided"),
        (suite(gates_deferred={"mean_reward>=0.5": "deferred"}), "trial", "PASS",
         "all 10 trials passed, gates deferred to the merge"),
    ],
)  # fmt: skip
def test_the_word_and_what_happened(summary: SuiteSummary, mode: str, word: str, text: str) -> None:
    assert verdict_of(summary, mode) == (word, text)


def test_a_fixed_known_failure_fails_under_strict() -> None:
    assert verdict_of(suite(known_failures=known(fixed=1)), "trial", strict_known=True)[0] == "FAIL"
