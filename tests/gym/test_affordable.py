"""Affordable runs against a real Gym (mcqa, the scripted policy answering E): task verdicts with adaptive
repeats, a token budget that stops dispatch and a resume that finishes the rest, and a sequential run that
stops once its gate is decided. The statistics are checked by simulation in tests/session/test_sequential.py; here
the same machinery runs through Gym's head, its agent and its resources server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.report.junit import read_suite_properties
from tests.helpers.paths import EXAMPLE
from tests.helpers.realgym import RealGym, attach

XDIST = [("-p", "no:xdist"), ("-n", "2")]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def suite_of(run_dir: Path) -> dict[str, Any]:
    (suite,) = json.loads((run_dir / "pytest_gym_summary.json").read_text())["suites"].values()
    return dict(suite)


def expecting_e(pytester: pytest.Pytester, count: int) -> None:
    """``count`` mcqa rows that all expect E: the policy answering E passes every one."""
    base = json.loads(EXAMPLE.read_text().splitlines()[3])
    assert base["expected_answer"] == "E"
    rows = []
    for i in range(count):
        row = json.loads(json.dumps(base))
        row["responses_create_params"]["input"][0]["content"] += f" (variant {i})"
        rows.append(row)
    (pytester.path / "all_e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("xdist", XDIST)
def test_task_verdicts_with_adaptive_repeats_run_only_what_decides(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    """5 tasks, 2 of which the policy answers right every time: under 4/5 a right task is decided by 4
    successes, a wrong one by 2 failures, so 2*4 + 3*2 = 14 of the 25 trials run, and JUnit has 5 tests."""
    result = pytester.runpytest_subprocess(
        *attach(gym, "--gym-repeats", "5", "--gym-task-pass", "4/5", "--gym-verdict", "task",
                "--gym-repeats-adaptive", "--gym-run-dir", "run", "--junitxml", "r.xml", *xdist),
        timeout=600,
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=3)
    assert len(lines(pytester.path / "run" / "rollouts.jsonl")) == 14
    suite = suite_of(pytester.path / "run")
    assert (suite["tasks"], suite["trials"], suite["skipped"]) == (5, 14, {"decided": 11})
    junit = (pytester.path / "r.xml").read_text()
    assert junit.count("<testcase ") == 5
    assert read_suite_properties(pytester.path / "r.xml")["gym.example.jsonl.trials_saved"] == "11"


@pytest.mark.parametrize("xdist", XDIST)
def test_a_token_budget_stops_gym_dispatch_and_resume_finishes(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    """One rollout at a time and a budget of 1 token: the first trial spends it, nothing else starts; the rest
    are skipped saying so, the gate is undecided; --gym-resume runs the other 4 and passes."""
    first = pytester.runpytest_subprocess(
        *attach(gym, "--gym-max-tokens", "1", "--gym-concurrency", "1", "--gym-gate", "mean_reward>=0.2",
                "--gym-run-dir", "run1", "-rs", *xdist),
        timeout=600,
    )  # fmt: skip
    outcomes = first.parseoutcomes()
    assert outcomes["skipped"] == 4
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1 + 1  # one trial and the (failing) gate
    first.stdout.fnmatch_lines(["*budget exhausted after 1 trial (* of 1 tokens)*"])
    assert len(lines(pytester.path / "run1" / "rollouts.jsonl")) == 1
    suite = suite_of(pytester.path / "run1")
    assert suite["gates"]["mean_reward>=0.2"]["passed"] is False
    assert "budget stopped" in suite["cut_short"]
    assert first.ret == pytest.ExitCode.TESTS_FAILED

    second = pytester.runpytest_subprocess(
        *attach(gym, "--gym-resume", "run1", "--gym-gate", "mean_reward>=0.2", "--gym-run-dir", "run2", *xdist),
        timeout=600,
    )  # fmt: skip
    second.assert_outcomes(passed=3, failed=3)  # 2 right answers and the gate; 3 wrong answers
    assert len(lines(pytester.path / "run2" / "rollouts.jsonl")) == 5
    assert "cut_short" not in suite_of(pytester.path / "run2")


def test_a_sequential_run_stops_once_decided(pytester: pytest.Pytester, gym: RealGym) -> None:
    """20 tasks all answered right against mean_reward>=0.5, one rollout at a time: decided long before the
    end (at the latest when 10 have passed, the whole suite's mean is certain); the rest are skipped."""
    pytester.makeini("[pytest]\n")
    expecting_e(pytester, 20)
    result = pytester.runpytest_subprocess(
        *attach(gym, "--gym-sequential", "--gym-seed", "3", "--gym-gate", "mean_reward>=0.5", "--gym-concurrency",
                "1", "--gym-run-dir", "run", "-rs", dataset="all_e.jsonl"),
        timeout=600,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    suite = suite_of(pytester.path / "run")
    seq = suite["sequential"]
    ran = len(lines(pytester.path / "run" / "rollouts.jsonl"))
    assert ran == seq["decided_at"] <= 10
    assert outcomes["skipped"] == 20 - ran == suite["skipped"]["sequential"]
    assert seq["message"] == (f"decided after {ran} of 20 tasks: mean_reward>=0.5 holds for the whole suite at 95%")
    assert suite["gates"]["mean_reward>=0.5"]["passed"] is True
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"*decided after {ran} of 20 tasks*"])
