"""The HTML report of real-Gym runs: written at the end of every run (into the run folder, and at --gym-html), and a
run with failures, flaky tasks, errors and a baseline read in Chromium."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.report.html import build_report
from tests.helpers.browser import artifacts_dir, click, console_errors, page_data, rows_shown, screenshot
from tests.helpers.paths import EXAMPLE_ANSWERS
from tests.helpers.realgym import RealGym, attach


def _page_data(path: Path) -> dict[str, object]:
    text = path.read_text(encoding="utf-8")
    start = text.index('<script type="application/json"')
    body = text[text.index(">", start) + 1 : text.index("</script>", start)]
    data: dict[str, object] = json.loads(body)
    return data


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_every_run_leaves_report_html_in_its_run_folder_and_at_gym_html(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    result = pytester.runpytest(
        *attach(gym, "--gym-repeats", "2", "--gym-run-dir=run", "--gym-html=out/page.html"), *xdist
    )
    result.assert_outcomes(passed=4, failed=6)
    in_run_folder = pytester.path / "run" / "report.html"
    copied = pytester.path / "out" / "page.html"
    assert in_run_folder.is_file()
    assert copied.read_bytes() == in_run_folder.read_bytes()
    assert '"trials"' in in_run_folder.read_text(encoding="utf-8")
    assert _page_data(in_run_folder)


def test_python_m_pytest_gym_report_rebuilds_the_page_from_a_run_folder(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    pytester.runpytest(*attach(gym, "--gym-run-dir=run")).assert_outcomes(passed=2, failed=3)
    (pytester.path / "run" / "report.html").unlink()
    result = pytester.run(
        __import__("sys").executable, "-m", "pytest_gym", "report", str(pytester.path / "run"), "-o", "again.html"
    )
    assert result.ret == 0, result.stderr.str()
    assert (pytester.path / "again.html").stat().st_size > 10_000


@pytest.mark.browser
def test_real_gym_report_in_a_browser(browser: Any, pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    """A run with failures, flaky tasks, errors and a baseline, against the real Gym, read in Chromium.

    The baseline is a first run answering E. The run itself reuses (``--gym-resume``) the r0 trials of a run
    answering E and runs r1, r2 with the policy answering B, every fifth call failing: tasks that expect B
    flip to passing (two of three repeats pass: ``--gym-task-pass majority``), those that expect E to failing,
    and both are flaky (their repeats disagree): flips listed as flaky, not counted as new failures or fixes.
    """
    assert EXAMPLE_ANSWERS == ["B", "C", "I", "E", "E"]
    pytester.runpytest(*attach(gym, "--gym-repeats", "3", "--gym-run-dir", "run0"),
                       "--gym-baseline", "base.json", "--gym-update-baseline")  # fmt: skip
    assert (pytester.path / "base.json").is_file()
    pytester.runpytest(*attach(gym, "--gym-repeats", "3", "--gym-run-dir", "run1"), "-k", "r0")
    gym.script(answer="\\boxed{B}", fault_every=5, fault_status=400, reset_stats=True)
    result = pytester.runpytest(
        *attach(gym, "--gym-repeats", "3", "--gym-resume", "run1", "--gym-run-dir", "run2", "--gym-concurrency", "1"),
        "--gym-baseline", "base.json", "--gym-min-reward", "0.6", "--gym-task-pass", "majority",
        "--gym-gate", "pass@2>=0.5", "--gym-gate", "mean_reward>=0.4",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    run = pytester.path / "run2"
    page = build_report(run, baseline=pytester.path / "base.json")
    data = page_data(page.read_text())
    (suite,) = data["suites"]
    tasks = data["tasks"]
    assert suite["numbers"]["tasks"] == 5
    assert sum(len(t["trials"]) for t in tasks) == 15
    errored = [t for t in tasks if t["errors"]]
    flaky = [t for t in tasks if t["flaky"]]
    assert len(errored) >= 1
    assert len(flaky) >= 2
    assert suite["baseline"]["new_failures_count"] == suite["baseline"]["fixed_count"] == 0  # no flip for good
    assert suite["baseline"]["flaky_failures_count"] >= 1
    assert suite["baseline"]["flaky_fixes_count"] >= 1

    browser.get(page.as_uri())
    assert rows_shown(browser) == 5
    kpis = browser.find_element("css selector", ".kpis").text
    assert "5\ntasks" in kpis
    assert "15\ntrials" in kpis
    click(browser, 'button[data-filter="flaky"]')
    assert rows_shown(browser) == len(flaky)
    click(browser, 'button[data-filter="errored"]')
    assert rows_shown(browser) == len(errored)
    click(browser, 'button[data-filter="regressed"]')
    assert rows_shown(browser) == sum(1 for t in tasks if t.get("regressed"))
    assert "flaky failure, not counted" in browser.find_element("css selector", "table.tasks tbody").text

    # Task 0 expects B: its fresh repeats answered \boxed{B}.
    click(browser, 'button[data-filter="all"]')
    first = tasks[0]
    click(browser, f'tr.row[data-i="{tasks.index(first)}"]')
    detail = browser.find_element("css selector", "tr.detail").text
    assert "\\boxed{B}" in detail
    assert "\\boxed{E}" in detail  # the reused r0
    assert f"pytest 'example.jsonl::{first['hash']}[r0]'" in detail
    assert console_errors(browser) == []

    shot = screenshot(browser, artifacts_dir() / "report.png")
    shutil.copy(page, artifacts_dir() / "report.html")
    assert shot.stat().st_size > 10_000
