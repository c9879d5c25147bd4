"""Verdicts in words, and suite-file baselines honoured everywhere (issue 24 items 1 and 7).

Runs reuse the trials of run folders written here (``--gym-resume``): no Gym starts.
"""

from __future__ import annotations

import json
import shlex

import pytest

from pytest_gym.core.dataset import task_hash
from tests.helpers.browser import page_data
from tests.helpers.reused_runs import AGENT, earlier_run, latest_run, row

ROWS = [row(i, id=f"q{i}") for i in range(10)]
BEFORE = [(r, [1.0, 1.0]) for r in ROWS]
#: Two tasks fail now on both trials: new failures the paired test (p = 0.115 for 2 of 10) cannot call a drop.
AFTER = [(r, [0.0, 0.0] if i in (3, 7) else [1.0, 1.0]) for i, r in enumerate(ROWS)]


@pytest.fixture
def suite_file(pytester: pytest.Pytester) -> str:
    pytester.mkdir("suites")
    pytester.mkdir("baselines")
    (pytester.path / "suites" / "mine.gym.yaml").write_text(
        f"dataset: ../d.jsonl\nagent: {AGENT}\nrepeats: 2\nbaseline: ../baselines/mine.json\n"
    )
    return "suites/mine.gym.yaml"


def test_update_baseline_writes_a_suite_files_baseline(pytester: pytest.Pytester, suite_file: str) -> None:
    before = earlier_run(pytester, {"d.jsonl": BEFORE}, "before")
    first = pytester.runpytest("suites", "--gym-agent", AGENT, "--gym-resume", before)
    first.assert_outcomes(passed=20, failed=1)  # suites/mine.gym.yaml::baseline: there is none to compare with
    note = next(line for line in first.stdout.lines if line.startswith("  no baseline at "))
    assert note.startswith(f"  no baseline at {pytester.path}/baselines/mine.json: create it with pytest suites ")
    hint = shlex.split(note.split(": create it with ", 1)[1])
    assert hint[-1] == "--gym-update-baseline"
    written = pytester.runpytest(*hint[1:])  # the hint, as printed
    written.assert_outcomes(passed=20)
    written.stdout.fnmatch_lines(["  baseline of suites/mine.gym.yaml written to */baselines/mine.json"])
    stored = json.loads((pytester.path / "baselines" / "mine.json").read_text())
    assert list(stored["suites"]) == ["suites/mine.gym.yaml"]


def test_update_baseline_without_any_path_names_the_suites(pytester: pytest.Pytester) -> None:
    run = earlier_run(pytester, {"d.jsonl": BEFORE})
    result = pytester.runpytest(
        "--gym-dataset", "d.jsonl", "--gym-agent", AGENT, "--gym-resume", run, "--gym-update-baseline"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gym-update-baseline has nowhere to write the baseline of d.jsonl: pass --gym-baseline PATH, or add *"]
    )


def test_baseline_says_why_it_passed_and_names_the_new_failures_gate(
    pytester: pytest.Pytester, suite_file: str
) -> None:
    before = earlier_run(pytester, {"d.jsonl": BEFORE}, "before")
    pytester.runpytest("suites", "--gym-agent", AGENT, "--gym-resume", before, "--gym-update-baseline").assert_outcomes(
        passed=20
    )
    after = earlier_run(pytester, {"d.jsonl": AFTER}, "after")
    result = pytester.runpytest("suites", "--gym-agent", AGENT, "--gym-resume", after)
    result.assert_outcomes(passed=16 + 1, failed=4)  # the baseline check passes: p(drop) 0.115
    result.stdout.fnmatch_lines(
        [
            "  baseline: delta -0.200 over 10 shared tasks*",
            "  baseline check: PASS: the paired test shows no drop (p 0.115, not < 0.05, over 10 shared tasks); "
            "2 tasks newly failing are too few to show a drop; "
            'to fail the run on any new failure add --gym-gate "new_failures<=0"',
        ]
    )
    # The run's report has every task's value before, from the suite file's baseline.
    tasks = page_data((latest_run(pytester) / "report.html").read_text())["tasks"]
    failing = {task_hash(ROWS[i])[:12] for i in (3, 7)}
    assert {t["hash"]: t["baseline"]["before"] for t in tasks if t["hash"] in failing} == dict.fromkeys(failing, 1.0)
    # The gate named, added as printed, fails the run on them.
    gated = pytester.runpytest("suites", "--gym-agent", AGENT, "--gym-resume", after, "--gym-gate", "new_failures<=0")
    gated.assert_outcomes(passed=16 + 1, failed=4 + 1)
    assert not any("to fail the run on any new failure" in line for line in gated.stdout.lines)


def test_quiet_keeps_the_essentials(pytester: pytest.Pytester, suite_file: str) -> None:
    before = earlier_run(pytester, {"d.jsonl": BEFORE}, "before")
    quiet = pytester.runpytest(
        "suites",
        "--gym-agent",
        AGENT,
        "--gym-resume",
        before,
        "--gym-update-baseline",
        "--gym-gate",
        "mean_reward>=0.5",
        "-q",
    )
    quiet.stdout.fnmatch_lines(
        [
            "*= pytest-gym =*",
            "suites/mine.gym.yaml: 10 tasks, 20 trials*",
            "  gate mean_reward>=0.5: PASS*",
            "  baseline of suites/mine.gym.yaml written to */baselines/mine.json",
            "run folder: *",
        ]
    )
    assert not any(line.startswith("  totals:") for line in quiet.stdout.lines)
    very_quiet = pytester.runpytest("suites", "--gym-agent", AGENT, "--gym-resume", before, "-qq")
    assert not any("pytest-gym" in line for line in very_quiet.stdout.lines)
