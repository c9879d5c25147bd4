"""The reviewer's view against a real Gym (the scripted policy standing in for the model): a baseline run and a
changed-policy run (the shared Gym's policy set to another answer is the "changed model") give a report whose
Changes section shows both answers of every flipped task (read in Chromium), the terminal's top flips and a
Markdown comment naming them;
a tool-calling environment answered without a tool call fails with the model's answer text, and its Changes show
the baseline's trajectory; known failures against the shared Gym."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.jsonl import read_jsonl
from tests.helpers.browser import console_errors, page_data, screenshot
from tests.helpers.gym_tools import TOOL_SCRIPT, tool_call_args, tool_call_example
from tests.helpers.paths import EXAMPLE_ANSWERS
from tests.helpers.realgym import RealGym, attach, reuse


def hashes(dataset: Path) -> list[str]:
    return [task_hash(row) for row in read_jsonl(dataset)]


@pytest.mark.browser
def test_a_changed_policy_shows_every_flip_with_both_answers(
    pytester: pytest.Pytester,
    example: Path,
    gym: RealGym,
    browser: Any,
) -> None:
    """The shared Gym (its policy answering \\boxed{E}) gives the baseline; the policy changed to answer
    \\boxed{B} is the "changed model" of the pull request."""
    assert EXAMPLE_ANSWERS == ["B", "C", "I", "E", "E"]
    tasks = hashes(example)
    base = pytester.runpytest_subprocess(*attach(gym, "--gym-repeats", "2", "--gym-run-dir", "base"))
    base.assert_outcomes(passed=4, failed=6)  # \boxed{E}: rows 4 and 5 pass
    gym.script(answer="\\boxed{B}")
    result = pytester.runpytest_subprocess(
        *attach(gym, "--gym-repeats", "2", "--gym-run-dir", "pr", "--gym-baseline-run", "base")
    )
    result.assert_outcomes(passed=2, failed=8)  # \boxed{B}: row 1 passes
    # The terminal: the top flips, each with both final answers.
    result.stdout.fnmatch_lines(
        [
            "  changes against the baseline run */base: 2 new failures, 1 fixed, 0 moved*",
            f"    new failure {tasks[3][:12]} (line 4): mean reward 1.000 -> 0.000",
            "      baseline r0: \\boxed{E}",
            "      this run r0: \\boxed{B}",
            f"    new failure {tasks[4][:12]} (line 5): mean reward 1.000 -> 0.000",
            "      baseline r0: \\boxed{E}",
            "      this run r0: \\boxed{B}",
            f"    fixed {tasks[0][:12]} (line 1): mean reward 0.000 -> 1.000",
            "      baseline r0: \\boxed{E}",
            "      this run r0: \\boxed{B}",
        ]
    )
    flipped = {tasks[3][:12]: "new_failure", tasks[4][:12]: "new_failure", tasks[0][:12]: "fixed"}

    # The report's Changes section, in Chromium: every flipped task, both answers side by side, the words marked.
    page = pytester.path / "pr" / "report.html"
    data = page_data(page.read_text())
    assert {t["hash"]: t["kind"] for t in data["suites"][0]["changes"]["tasks"]} == flipped
    browser.get(page.as_uri())
    articles = browser.find_elements("css selector", "#changes article.change")
    assert {a.get_attribute("data-hash"): a.get_attribute("class").split()[1] for a in articles} == flipped
    for article in articles:
        before = [c.text for c in article.find_elements("css selector", "td.before pre.answer")]
        after = [c.text for c in article.find_elements("css selector", "td.after pre.answer")]
        assert before == ["\\boxed{E}", "\\boxed{E}"]
        assert after == ["\\boxed{B}", "\\boxed{B}"]
        assert [d.text for d in article.find_elements("css selector", "td.before del")] == ["E", "E"]
        assert [i.text for i in article.find_elements("css selector", "td.after ins")] == ["B", "B"]
        fields = article.find_element("css selector", "table.fields").text
        assert "extracted_answer E B" in fields
        assert article.find_element("css selector", "details.prompt").text.startswith("prompt")
    badge = browser.find_element("css selector", "section.suite h2 .badge")
    assert badge.text == "FAIL"
    assert browser.find_element("css selector", "p.verdict").text == "8 of 10 trials failed, no gates"
    assert console_errors(browser) == []
    screenshot(browser, pytester.path / "changes.png")

    # The pull-request comment names the flips with both answers.
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gym", "comment", "pr", "--format", "md"],
        cwd=pytester.path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for short, line in ((tasks[3][:12], 4), (tasks[4][:12], 5), (tasks[0][:12], 1)):
        row = next(x for x in done.stdout.splitlines() if x.startswith(f"| `{short}` | {line} |"))
        assert row.endswith("| `\\boxed{E}` | `\\boxed{B}` |")


def test_a_tool_call_failure_without_a_tool_call_shows_the_answer_text(
    pytester: pytest.Pytester, gym_cli: str, monkeypatch: pytest.MonkeyPatch, kept_pool: Path
) -> None:
    pytester.makeini("[pytest]\n")
    dataset = tool_call_example(gym_cli, pytester.path)
    monkeypatch.setenv("PYTEST_GYM_POLICY_SCRIPT", json.dumps(TOOL_SCRIPT))
    base = pytester.runpytest_subprocess(*tool_call_args(gym_cli, "--gym-run-dir", "base", *reuse(kept_pool)))
    base.assert_outcomes(passed=5)  # every trial called get_weather
    monkeypatch.delenv("PYTEST_GYM_POLICY_SCRIPT")
    # The same kept Gym: this run's lease scripts its policy anew, without the tool call.
    result = pytester.runpytest_subprocess(
        *tool_call_args(gym_cli, "--gym-run-dir", "pr", "--gym-baseline-run", "base", *reuse(kept_pool))
    )
    result.assert_outcomes(failed=5)  # answered without calling the tool: reward 0
    first = hashes(dataset)[0][:12]
    result.stdout.fnmatch_lines(
        [
            f"reward 0.0 < min_reward 1.0 for task {first} (*weather.jsonl:1, repeat 0)",
            "  final answer: Sunny in SF.",
        ]
    )
    assert "trajectory:" not in result.stdout.str()  # no tool call: no trajectory view, the answer says it all
    result.stdout.fnmatch_lines(
        [
            "  changes against the baseline run */base: 5 new failures, 0 fixed, 0 moved*",
            "      this run r0: Sunny in SF.",
        ]
    )
    data = page_data((pytester.path / "pr" / "report.html").read_text())
    change = data["suites"][0]["changes"]["tasks"][0]
    (pair,) = change["repeats"]
    assert [kind for kind, _ in pair["before"]["steps"]] == ["call", "result"]  # the baseline's trajectory
    assert pair["before"]["steps"][0][1] == 'get_weather({"city": "sf"})'
    assert "steps" not in pair["after"]
    assert pair["after"]["answer"] == "Sunny in SF."


def test_known_failures_against_gym(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    tasks = hashes(example)
    (pytester.path / "known.yaml").write_text(
        f"- task: {tasks[0][:8]}\n  reason: expects B (issue 7)\n"  # fails with \\boxed{{E}}: xfail
        f"- task: example.jsonl::{tasks[3][:12]}\n  reason: was broken\n"  # passes now: XPASS
        f"- task: {tasks[1][:12]}\n  reason: old\n  expires: 2021-03-01\n"  # expired: fails, and so does the entry
    )
    result = pytester.runpytest(
        *attach(gym, "--gym-known-failures", "known.yaml", "--gym-run-dir", "run", "--gym-gate", "mean_reward>=0.3")
    )
    result.assert_outcomes(passed=2, failed=3, xfailed=1, xpassed=1)  # row 5 and the gate pass; rows 2, 3, entry fail
    result.stdout.fnmatch_lines(["*known failure expired on 2021-03-01: known.yaml:5 task *"])
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())["suites"]["example.jsonl"]
    assert [t["hash"] for t in summary["known_failures"]["failing"]] == [tasks[0][:12]]
    assert [t["hash"] for t in summary["known_failures"]["fixed"]] == [tasks[3][:12]]
    assert [t["entry"] for t in summary["known_failures"]["expired"]] == ["known.yaml:5"]
    assert summary["gates"]["mean_reward>=0.3"]["reason"].endswith(
        "(judged without the 2 quarantined tasks: known failures)"
    )
    assert summary["verdict"] == "FAIL"
