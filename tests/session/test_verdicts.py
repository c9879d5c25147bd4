"""Suite verdicts without Gym: flaky tasks, totals, undecided gates, per-suite baselines, -k/-m by row fields.

The pytester runs reuse (``--gym-resume``) trials of a run folder written here, so every trial has the
reward the test chose and no Gym starts; what runs is the plugin's own path from reports to verdicts,
on the only process and on the xdist controller alike.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.settings import GymSettings
from pytest_gym.report.junit import read_suite_properties
from pytest_gym.runfolder.runinfo import write_run_info

XDIST = [(), ("-n", "2")]
AGENT = "a"


def row(i: int, **fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": f"question {i}"}, **fields}


# --- through pytest, reusing trials of a written run folder ---------------------------------------


def earlier_run(pytester: pytest.Pytester, datasets: dict[str, list[tuple[dict[str, Any], list[float]]]]) -> str:
    """Write the datasets and a run folder holding a reward for every trial; returns the folder (for --gym-resume)."""
    run = pytester.path / "earlier"
    write_run_info(run, GymSettings(agent=AGENT))
    records = []
    for name, tasks in datasets.items():
        (pytester.path / name).write_text("".join(json.dumps(r) + "\n" for r, _ in tasks))
        for index, (r, rewards) in enumerate(tasks):
            for repeat, reward in enumerate(rewards):
                records.append(
                    {
                        "reward": reward,
                        "_ng_task_index": index,
                        "_ng_rollout_index": repeat,
                        "_pytest_gym_task_hash": task_hash(r),
                        "_pytest_gym_attempts": 1 + repeat % 2,
                    }
                )
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pytester.makeini("[pytest]\n")
    return str(run)


def reuse(run: str, *datasets: str, repeats: int = 2) -> list[str]:
    args = ["--gym-agent", AGENT, "--gym-resume", run, "--gym-repeats", str(repeats)]
    for dataset in datasets:
        args += ["--gym-dataset", dataset]
    return args


def summary_of(pytester: pytest.Pytester) -> dict[str, Any]:
    """The summary of the latest run (by modification time: two runs in one second sort by their random suffix)."""
    runs = sorted((pytester.path / ".pytest_gym" / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    data: dict[str, Any] = json.loads((runs[-1] / "pytest_gym_summary.json").read_text())
    return data


FLAKY_TASKS = [(row(0), [1.0, 1.0]), (row(1), [1.0, 0.0]), (row(2), [0.0, 0.0]), (row(3), [0.0, 1.0])]


@pytest.mark.parametrize("xdist", XDIST)
def test_flaky_tasks_totals_and_undecided_gates_in_terminal_summary_and_junit(
    pytester: pytest.Pytester, xdist: tuple[str, ...]
) -> None:
    run = earlier_run(pytester, {"d.jsonl": FLAKY_TASKS})
    gates = ["--gym-gate", "ci_low(mean_reward)>=0.3", "--gym-gate", "flaky_rate<=0.5"]
    result = pytester.runpytest(*reuse(run, "d.jsonl"), *gates, "--junitxml", "r.xml", *xdist)
    result.assert_outcomes(passed=5, failed=5)  # 4 low-reward trials and the undecided gate
    h1, h3 = (task_hash(row(i))[:12] for i in (1, 3))
    result.stdout.fnmatch_lines(
        [
            "d.jsonl: 4 tasks, 8 trials, 0 errors, mean reward 0.500 (95% CI 0.068..0.932), pass@1 0.500, pass@2 0.750",
            "  totals: retries 4",
            f"  flaky (2 of 4 tasks, passed/trials): {h1} (line 2) 1/2, {h3} (line 4) 1/2",
            "  gate ci_low(mean_reward)>=0.3: FAIL (ci_low(mean_reward) = 0.067586, required >= 0.3; "
            "undecided: needs about 23 more tasks (mean reward 0.5 is above 0.3, but 4 tasks are too few to show it))",
            "  gate flaky_rate<=0.5: PASS (flaky_rate = 0.5 <= 0.5 (the chance that two trials of a task disagree))",
        ]
    )
    suite = summary_of(pytester)["suites"]["d.jsonl"]
    assert suite["flaky_tasks"] == [
        {"hash": h1, "line": 2, "successes": 1, "repeats": 2},
        {"hash": h3, "line": 4, "successes": 1, "repeats": 2},
    ]
    assert suite["flaky_rate"] == 0.5
    assert suite["totals"]["retries"] == 4
    assert suite["totals"]["trials"] == 8
    gate = suite["gates"]["ci_low(mean_reward)>=0.3"]
    assert (gate["passed"], gate["undecided"], gate["tasks_needed"]) == (False, True, 23)
    assert 0.0 <= suite["ci_low"] < suite["ci_high"] <= 1.0
    props = read_suite_properties(pytester.path / "r.xml")
    assert props["gym.d.jsonl.flaky"] == "2"
    assert props["gym.d.jsonl.flaky_tasks"] == f"{h1} (line 2) 1/2, {h3} (line 4) 1/2"
    assert props["gym.d.jsonl.totals.retries"] == "4"
    assert props["gym.d.jsonl.totals.total_tokens"] == "None"
    assert "undecided: needs about 23 more tasks" in props["gym.d.jsonl.gate[ci_low(mean_reward)>=0.3]"]


@pytest.mark.parametrize("xdist", XDIST)
def test_two_suites_one_baseline_file(pytester: pytest.Pytester, xdist: tuple[str, ...]) -> None:
    run = earlier_run(
        pytester,
        {
            "a.jsonl": [(row(i), [1.0, 1.0]) for i in range(5)],
            "b.jsonl": [(row(10 + i), [1.0, 1.0] if i else [0.0, 0.0]) for i in range(6)],
            "c.jsonl": [(row(20), [1.0, 1.0])],
        },
    )
    args = [*reuse(run, "a.jsonl", "b.jsonl"), "--gym-baseline", "base.json", "--gym-verdict", "gate", *xdist]
    missing = pytester.runpytest(*args)
    missing.stdout.fnmatch_lines(["  no baseline at */base.json: create it with pytest *--gym-update-baseline"] * 2)
    pytester.runpytest(*args, "--gym-update-baseline").stdout.fnmatch_lines(
        ["  baseline of a.jsonl written to */base.json", "  baseline of b.jsonl written to */base.json"]
    )
    assert sorted(json.loads((pytester.path / "base.json").read_text())["suites"]) == ["a.jsonl", "b.jsonl"]
    again = pytester.runpytest(*args, "--gym-gate", "new_failures<=0")
    again.assert_outcomes(passed=20 + 2 + 2, xfailed=2, failed=0)  # trials, gates, baseline checks
    again.stdout.fnmatch_lines(
        [
            "a.jsonl: 5 tasks*",
            "  baseline: delta +0.000 over 5 shared tasks*; each task on its 2 trials",
            "b.jsonl: 6 tasks*",
            "  baseline: delta +0.000 over 6 shared tasks*; each task on its 2 trials",
        ]
    )
    # A third suite is missing from the file, and says so.
    third = pytester.runpytest(*args, "--gym-dataset", "c.jsonl")
    third.stdout.fnmatch_lines(
        [
            "c.jsonl: 1 tasks*",
            "  no baseline for suite c.jsonl in */base.json: create it with pytest *--gym-update-baseline",
        ]
    )


def test_new_failures_gate_names_the_tasks(pytester: pytest.Pytester) -> None:
    tasks = [(row(i), [1.0]) for i in range(5)]
    run = earlier_run(pytester, {"d.jsonl": tasks})
    args = [*reuse(run, "d.jsonl", repeats=1), "--gym-baseline", "base.json", "--gym-verdict", "gate"]
    pytester.runpytest(*args, "--gym-update-baseline")
    later = earlier_run(pytester, {"d.jsonl": [(row(i), [0.0 if i in (1, 2) else 1.0]) for i in range(5)]})
    result = pytester.runpytest(*reuse(later, "d.jsonl", repeats=1), *args[8:], "--gym-gate", "new_failures<=0")
    h1, h2 = (task_hash(row(i))[:12] for i in (1, 2))
    result.stdout.fnmatch_lines(
        [
            f"  gate new_failures<=0: FAIL (new_failures = 2, required <= 0: {h1} (line 2), {h2} (line 3) (the "
            "baseline and this run have tasks with one trial: a flip of such a task cannot be told from noise*",
            "  baseline: delta -0.400 over 5 shared tasks (one-sided 95% bounds -0.847..+0.171, p(drop) 0.128; exact "
            "unconditional test (one-sided, pass/fail)); each task on its 1 trial",
            f"  new failures (2): {h1} (line 2), {h2} (line 3)",
        ]
    )
    result.assert_outcomes(passed=4, xfailed=2, failed=1)  # two flips are not a significant drop
    baseline = summary_of(pytester)["suites"]["d.jsonl"]["baseline"]
    assert baseline["new_failure_tasks"] == [{"hash": h1, "line": 2}, {"hash": h2, "line": 3}]
    assert (baseline["p_drop"], baseline["regressed"], baseline["passed"]) == (
        pytest.approx(0.128, abs=5e-4),
        False,
        True,
    )
    assert baseline["method"].startswith("exact unconditional")
    assert baseline["compared"] == "each task on its 1 trial"


def test_task_pass_rule_and_prices_are_options(pytester: pytest.Pytester) -> None:
    run = earlier_run(pytester, {"d.jsonl": [(row(0), [1.0, 1.0, 1.0])]})
    args = ["--gym-baseline", "base.json", "--gym-verdict", "gate", "--gym-gate", "new_failures<=0"]
    pytester.runpytest(*reuse(run, "d.jsonl", repeats=3), *args, "--gym-update-baseline")
    later = reuse(earlier_run(pytester, {"d.jsonl": [(row(0), [1.0, 0.0, 1.0])]}), "d.jsonl", repeats=3)
    h0 = task_hash(row(0))[:12]
    pytester.runpytest(*later, *args).stdout.fnmatch_lines(
        [f"  gate new_failures<=0: PASS (new_failures = 0 <= 0 (flaky, not counted: {h0} (line 1)))"]
    )  # fails by "all", but two of three trials pass: no stable flip
    majority = pytester.runpytest(*later, *args, "--gym-task-pass", "majority", "--gym-price-out", "3")
    majority.stdout.fnmatch_lines(
        ["  gate new_failures<=0: PASS (new_failures = 0 <= 0)", "  settings differ from the baseline's: task_pass"]
    )  # passes by "majority": no flip at all
    bad = pytester.runpytest(*later, "--gym-task-pass", "most")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    negative = pytester.runpytest(*later, "--gym-price-in", "-1")
    assert negative.ret == pytest.ExitCode.USAGE_ERROR
    negative.stderr.fnmatch_lines(["*invalid value*price_in*command line (--gym-price-in)*"])


# --- row fields as keywords and markers --------------------------------------------------------------

LABELLED = [
    row(0, id="alpha-1", category="algebra", difficulty="hard", tags=["proof", "long"]),
    row(1, id="beta-2", category="geometry", difficulty="easy", tags=["figure"]),
    row(2, task_id=17, category="algebra", difficulty="multi step", notes="x" * 500),
    row(3, uuid="3f1c", category="geometry", difficulty=3),
]


@pytest.fixture
def labelled(pytester: pytest.Pytester) -> list[str]:
    """labelled.jsonl, every trial (one per row) reusable from a written run: the reuse arguments."""
    return reuse(earlier_run(pytester, {"labelled.jsonl": [(r, [1.0]) for r in LABELLED]}), "labelled.jsonl", repeats=1)


def ids(*indexes: int) -> list[str]:
    return sorted(f"labelled.jsonl::{task_hash(LABELLED[i])[:12]}[r0]" for i in indexes)


def selected(pytester: pytest.Pytester, args: list[str], *select: str) -> list[str]:
    """Node ids of the trials that ran (and passed: every reused reward is 1), without their rows' labels."""
    result = pytester.runpytest(*args, "-rA", *select)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stdout.str()
    ran = [line.split()[1] for line in result.outlines if line.startswith("PASSED labelled.jsonl::")]
    return sorted(re.sub(r"::([0-9a-f]{12})-[^\[]+\[", r"::\1[", nodeid) for nodeid in ran)


@pytest.mark.parametrize("xdist", XDIST)
def test_k_selects_by_row_fields(pytester: pytest.Pytester, labelled: list[str], xdist: tuple[str, ...]) -> None:
    args = [*labelled, *xdist]
    assert selected(pytester, args, "-k", "algebra") == ids(0, 2)
    assert selected(pytester, args, "-k", "geometry and not easy") == ids(3)
    assert selected(pytester, args, "-k", "category:geometry") == ids(1, 3)
    assert selected(pytester, args, "-k", "proof or figure") == ids(0, 1)  # tags, a list of strings
    if xdist:
        return
    assert selected(pytester, args, "-k", "beta") == ids(1)
    assert selected(pytester, args, "-k", "task_id:17") == ids(2)
    assert selected(pytester, args, "-k", "3f1c") == ids(3)
    assert selected(pytester, args, "-k", "xxxxx") == []  # a long field is text, not a label
    # Named fields replace the defaults, from the command line or the ini file.
    assert selected(pytester, args, "-k", "algebra", "--gym-keyword-field", "id") == []
    assert selected(pytester, args, "-k", "beta", "--gym-keyword-field", "id") == ids(1)
    pytester.makeini("[pytest]\ngym_keyword_field =\n    difficulty\n")
    assert selected(pytester, args, "-k", "hard") == ids(0)
    assert selected(pytester, args, "-k", "algebra") == []


@pytest.mark.parametrize("xdist", XDIST)
def test_m_selects_by_the_marker_field(pytester: pytest.Pytester, labelled: list[str], xdist: tuple[str, ...]) -> None:
    # -W error::PytestUnknownMarkWarning, not -W error: an in-process run may warn that pytest_gym is
    # already imported (not rewritten), which says nothing about markers.
    args = [
        *labelled,
        "--gym-marker-field",
        "difficulty",
        "--strict-markers",
        "-W",
        "error::pytest.PytestUnknownMarkWarning",
        *xdist,
    ]
    assert selected(pytester, args, "-m", "hard or multi_step or difficulty_3") == ids(0, 2, 3)
    assert selected(pytester, args, "-m", "not easy") == ids(0, 2, 3)
    if xdist:
        return
    tags = [*labelled, "--gym-marker-field", "tags"]
    assert selected(pytester, tags, "-m", "long") == ids(0)


@pytest.mark.parametrize("xdist", XDIST)
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "no baseline at */base.json: create it with pytest *--gym-update-baseline"),
        ('{"schema_version": 2, "suites": {}}', "no baseline for suite d.jsonl in */base.json: create it with *"),
        ("<<<<<<< HEAD\n", "baseline unreadable: * is not valid JSON*"),
    ],
    ids=["no file", "no entry for the suite", "merge-conflicted"],
)
def test_a_baseline_that_cannot_be_compared_with_fails_the_baseline_check(
    pytester: pytest.Pytester, xdist: tuple[str, ...], content: str | None, reason: str
) -> None:
    """As a missing snapshot fails a snapshot test: with a mistyped, uncommitted or conflicted --gym-baseline
    the run passed (a note in the summary), so CI gated on a regression check that judged nothing."""
    run = earlier_run(pytester, {"d.jsonl": [(row(i), [1.0, 1.0]) for i in range(6)]})
    if content is not None:
        (pytester.path / "base.json").write_text(content)
    args = [*reuse(run, "d.jsonl"), "--gym-baseline", "base.json", "--junitxml", "r.xml", "--gym-summary", "s.json",
            "--gym-verdict", "gate"]  # fmt: skip
    result = pytester.runpytest(*args, *xdist)
    result.assert_outcomes(passed=12, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["  verdict: FAIL (all 12 trials passed, no gates, baseline check failed)", f"  {reason}"]
    )
    # The failure shows the reason (pytest < 8.1 leaves it out of the short summary's FAILED line).
    result.stdout.fnmatch_lines(["*_ baseline _*", reason, "*short test summary*", "FAILED d.jsonl::baseline*"])
    xml = (pytester.path / "r.xml").read_text()
    assert re.search(r'<testcase classname="d.jsonl" name="baseline"[^>]*><failure message="(no|baseline) ', xml)
    assert read_suite_properties(pytester.path / "r.xml")["gym.d.jsonl.baseline_missing"] == "true"
    summary = json.loads((pytester.path / "s.json").read_text())
    baseline = summary["suites"]["d.jsonl"]["baseline"]
    assert (baseline["missing"], baseline["passed"]) == (True, False)
    page = (Path(summary["run_dir"]) / "report.html").read_text()
    assert "baseline check failed</b>: nothing to compare with" in page
    assert "vs baseline · none found" in page
    assert re.fullmatch(reason.replace("*", ".*"), baseline["reason"], re.S)
    if content is None:  # the printed command creates it, and then the check passes
        pytester.runpytest(*args, "--gym-update-baseline").assert_outcomes(passed=12)
        again = pytester.runpytest(*args, *xdist)
        again.assert_outcomes(passed=13)
        assert json.loads((pytester.path / "s.json").read_text())["suites"]["d.jsonl"]["baseline"]["missing"] is False


def test_writing_the_baseline_is_no_missing_baseline(pytester: pytest.Pytester) -> None:
    run = earlier_run(pytester, {"d.jsonl": [(row(i), [1.0]) for i in range(3)]})
    result = pytester.runpytest(
        *reuse(run, "d.jsonl", repeats=1), "--gym-baseline", "new.json", "--gym-update-baseline"
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["  baseline of d.jsonl written to */new.json"])


def test_the_missing_baseline_reason_masks_a_credential_in_the_command_it_prints(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reason quotes this run's command (what writes the baseline); it goes to JUnit through pytest's own
    writer, which masks nothing."""
    secret = "sk_live_4f9b2c7e1d8a6035bd9e"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    run = earlier_run(pytester, {"d.jsonl": [(row(i), [1.0]) for i in range(3)]})
    result = pytester.runpytest(
        *reuse(run, "d.jsonl", repeats=1), "--gym-baseline", "base.json", "-k", f"not {secret}", "--junitxml", "r.xml"
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*_ baseline _*", "no baseline at */base.json: create it with pytest *"])
    assert secret not in result.stdout.str()
    assert secret not in (pytester.path / "r.xml").read_text()
