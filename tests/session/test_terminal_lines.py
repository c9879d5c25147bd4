"""The terminal in a CI log (no TTY): progress lines of their own, percentages that end at 100% (issue 24 item 8)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.reused_runs import earlier_run, reuse, row

XDIST = [(), ("-n", "2")]
TASKS = [(row(i), [0.0, 1.0] if i % 3 == 0 else [1.0, 1.0]) for i in range(6)]


@pytest.mark.parametrize("xdist", XDIST)
def test_progress_lines_stand_alone(pytester: pytest.Pytester, xdist: tuple[str, ...]) -> None:
    run = earlier_run(pytester, {"d.jsonl": TASKS})
    result = pytester.runpytest(*reuse(run, "d.jsonl"), "--gym-progress-interval", "0.001", *xdist)
    result.assert_outcomes(passed=10, failed=2)
    progress = [line for line in result.stdout.lines if "pytest-gym: " in line and "trials done" in line]
    assert progress, result.stdout.str()
    assert all(re.fullmatch(r"pytest-gym: \d+/12 trials done, 0 errors, .*", line) for line in progress), progress


@pytest.mark.parametrize("xdist", XDIST)
def test_gates_get_their_own_line_ending_at_100_percent(pytester: pytest.Pytester, xdist: tuple[str, ...]) -> None:
    run = earlier_run(pytester, {"d.jsonl": TASKS})
    gates = ["--gym-gate", "mean_reward>=0.9", "--gym-gate", "pass@2>=0.5"]
    result = pytester.runpytest(*reuse(run, "d.jsonl"), *gates, *xdist)
    result.assert_outcomes(passed=11, failed=3)
    percentages = [m.group(1) for line in result.stdout.lines for m in re.finditer(r"\[\s*(\d+)%\]", line)]
    # pytest 8.0 repeats the last line's [100%] at the end of the session ("[100%] [100%]"); newer ones do not.
    old = pytest.version_tuple < (8, 1)
    assert percentages == (["100", "100", "100"] if old and len(percentages) == 3 else ["100", "100"]), result.stdout
    gates_line = r"(d\.jsonl )?F\.\s+\[100%\]" + (r"( \[100%\])?" if old else "")
    assert any(re.fullmatch(gates_line, line) for line in result.stdout.lines)  # 2 gates
