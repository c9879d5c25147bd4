"""Bad option values are usage errors that say what is accepted: --gym-max-errors, --gym-gate, --gym-concurrency,
--gym-reuse with --gym-url."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_bad_error_budget_is_a_usage_error(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest("--gym-dataset", "example.jsonl", "--gym-max-errors", "150%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_malformed_gate_is_a_usage_error_showing_the_grammar(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest("--gym-dataset", "example.jsonl", "--gym-gate", "mean_reward => 0.8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad gate from --gym-gate*mean_reward => 0.8*", "*pass@K*"])


def test_concurrency_must_be_a_positive_integer(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest("--gym-url", "http://127.0.0.1:9", "--gym-concurrency", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid value '0' for concurrency from command line (--gym-concurrency)*"])


def test_reuse_with_an_attached_gym_is_a_usage_error_naming_both(pytester: pytest.Pytester, example: Path) -> None:
    result = pytester.runpytest(
        "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "example.jsonl", "--gym-reuse", "kept"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-reuse keeps a Gym this run starts*with --gym-url nothing is started*"])
    assert not (pytester.path / "kept").exists()
