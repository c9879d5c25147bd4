"""``--gym-verdict task``: one test per task (``<dataset>::<hash>``), its repeats judged by ``--gym-task-pass``.

JUnit counts tasks, each with its task-level properties; every trial is still in the run folder and the
summary. The runs attach to the stand-in Gym of ``tests/helpers/standin.py`` answering a scripted reward
per (task, repeat) (``tests/session/test_adaptive.Scripted``).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gym.core.dataset import read_tasks
from pytest_gym.report.junit import read_trial_properties
from tests.helpers.standin import Request, StandinGym, serving
from tests.session.test_adaptive import Scripted, write_rows

AGENT = "fake_agent"  # the stand-in Gym's agent

XDIST = [("-p", "no:xdist"), ("-n", "2")]
#: Successes out of 5 per task: 4/5 passes those with at least 4.
PATTERNS = {
    "t0": (1, 1, 1, 1, 1),
    "t1": (1, 1, 1, 1, 0),
    "t2": (0, 1, 1, 1, 1),
    "t3": (1, 1, 1, 0, 0),
    "t4": (0, 0, 0, 0, 0),
    "t5": (1, 0, 1, 0, 1),
    "t6": (1, 1, 0, 1, 1),
}


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving() as server:
        yield server


def run(pytester: pytest.Pytester, gym: StandinGym, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run",
        "--gym-trajectories", "off", "--gym-verdict", "task", "--junitxml", "report.xml",
        "-p", "no:cacheprovider", "-p", "no:randomly", *args,
    )  # fmt: skip


def hashes(path: Path) -> dict[str, str]:
    """Task text -> short hash, as the node ids name them."""
    return {f"t{i}": task.short_hash for i, task in enumerate(read_tasks(path))}


@pytest.mark.parametrize("xdist", XDIST)
def test_one_junit_test_per_task_with_the_rule_s_outcome(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    write_rows(pytester.path / "data.jsonl", list(PATTERNS))
    gym.routes["/run"] = Scripted(PATTERNS)
    result = run(pytester, gym, "--gym-repeats", "5", "--gym-task-pass", "4/5", *xdist)
    passing = {t for t, p in PATTERNS.items() if sum(p) >= 4}
    result.assert_outcomes(passed=len(passing), failed=len(PATTERNS) - len(passing))
    short = hashes(pytester.path / "data.jsonl")
    suite = ET.parse(pytester.path / "report.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == (str(len(PATTERNS)), str(len(PATTERNS) - len(passing)))
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == set(short.values())
    for task in PATTERNS:
        case = cases[short[task]]
        assert (case.find("failure") is None) is (task in passing), task
    properties = read_trial_properties(pytester.path / "report.xml")
    t1 = properties[f"data.jsonl.{short['t1']}"]
    assert (t1["gym_successes"], t1["gym_trials_run"], t1["gym_task_pass"]) == ("4", "5", "4/5")
    assert all("gym_trials" not in props for props in properties.values())  # trials stay in the run folder
    # Every trial is in the run folder and in the suite's numbers.
    records = (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()
    assert len(records) == 5 * len(PATTERNS)
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    (numbers,) = summary["suites"].values()
    assert (numbers["tasks"], numbers["trials"]) == (len(PATTERNS), 5 * len(PATTERNS))
    assert numbers["mean_reward"] == pytest.approx(sum(map(sum, PATTERNS.values())) / (5 * len(PATTERNS)))
    result.stdout.fnmatch_lines(
        [f"*task {short['t3']} (*data.jsonl:4) failed --gym-task-pass 4/5: 3 of 5 trials reached min_reward 1*"]
    )


def test_task_node_ids_select_and_rerun(pytester: pytest.Pytester, gym: StandinGym) -> None:
    pytester.makeini("[pytest]\n")
    write_rows(pytester.path / "data.jsonl", list(PATTERNS))
    scripted = Scripted(PATTERNS)
    gym.routes["/run"] = scripted
    short = hashes(pytester.path / "data.jsonl")
    one = run(pytester, gym, "--gym-repeats", "5", "-k", short["t0"])
    one.assert_outcomes(passed=1)
    assert {task for task, _ in scripted.called} == {"t0"}
    with_cache = pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-trajectories", "off",
        "--gym-verdict", "task", "--gym-repeats", "5", "--gym-task-pass", "all", "-p", "no:randomly",
    )  # fmt: skip
    with_cache.assert_outcomes(passed=1, failed=len(PATTERNS) - 1)
    scripted.called.clear()
    rerun = pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-trajectories", "off",
        "--gym-verdict", "task", "--gym-repeats", "5", "--gym-task-pass", "any", "--lf", "-p", "no:randomly",
    )  # fmt: skip
    rerun.assert_outcomes(passed=len(PATTERNS) - 2, failed=1)  # t4 fails even "any"; t0 not rerun
    assert "t0" not in {task for task, _ in scripted.called}


def test_a_fault_errors_the_task_only_when_it_leaves_the_verdict_open(
    pytester: pytest.Pytester, gym: StandinGym
) -> None:
    pytester.makeini("[pytest]\n")
    write_rows(pytester.path / "data.jsonl", ["a", "b"])
    scripted = Scripted({"a": (1, 1, 1), "b": (1, 1, 1)})

    def answer(request: Request) -> tuple[int, bytes]:

        body = request.json()
        if int(body["_ng_rollout_index"]) == 2:
            return 500, b'{"error": "scripted outage"}'
        return scripted(request)

    gym.routes["/run"] = answer
    # "any": a's first success decides it, the fault does not matter; "all" needs the faulted trial.
    lenient = run(pytester, gym, "--gym-repeats", "3", "--gym-task-pass", "any")
    lenient.assert_outcomes(passed=2)
    strict = run(pytester, gym, "--gym-repeats", "3", "--gym-task-pass", "all", "--gym-run-dir", "run2")
    strict.assert_outcomes(errors=2)
    strict.stdout.fnmatch_lines(["*the task's trials do not decide it, 1 faulted:*"])
    summary = json.loads((pytester.path / "run2" / "pytest_gym_summary.json").read_text())
    (numbers,) = summary["suites"].values()
    assert (numbers["trials"], numbers["errors"]) == (4, 2)
