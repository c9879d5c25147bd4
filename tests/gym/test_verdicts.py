"""Suite verdicts end to end against a real Gym: gates, verdict modes, baselines, Gym's own metrics,
the run folder and the JUnit file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xmlschema
from junitparser import JUnitXml

from pytest_gym.core.dataset import task_hash
from pytest_gym.report.junit import read_suite_properties, read_trial_properties
from tests.helpers.paths import EXAMPLE, JUNIT_XSD
from tests.helpers.realgym import RealGym, attach

XSD = JUNIT_XSD


@pytest.fixture
def all_e(pytester: pytest.Pytester) -> Path:
    """Ten mcqa rows that all expect E: a policy answering E passes every one, answering B none."""
    base = json.loads(EXAMPLE.read_text().splitlines()[3])
    assert base["expected_answer"] == "E"
    rows = []
    for i in range(10):
        row = json.loads(json.dumps(base))
        row["responses_create_params"]["input"][0]["content"] += f" (variant {i})"
        rows.append(row)
    path = pytester.path / "all_e.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pytester.makeini("[pytest]\n")
    return path


def run_dir_of(pytester: pytest.Pytester) -> Path:
    (found,) = (pytester.path / ".pytest_gym" / "runs").iterdir()
    return found


def test_gates_are_reported_as_tests_and_decide_the_exit_code(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    result = pytester.runpytest(
        *attach(gym), "--gym-repeats", "2", "--gym-gate", "mean_reward >= 0.4", "--gym-gate", "pass@2>0.5", "-rA"
    )
    result.assert_outcomes(passed=5, failed=7)
    result.stdout.fnmatch_lines(
        [
            "*PASSED example.jsonl::gate?mean_reward>=0.4?*",
            "*FAILED example.jsonl::gate?pass@2>0.5? - gate pass@2>0.5 failed*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*= pytest-gym =*",
            # 2 of 5 tasks pass (every repeat alike): Clopper-Pearson 2 of 5, inside [0, 1] (was -0.280..1.080)
            "example.jsonl: 5 tasks, 10 trials, 0 errors, mean reward 0.400 (95% CI 0.053..0.853), "
            "pass@1 0.400, pass@2 0.400",
            "  gate mean_reward>=0.4: PASS (mean_reward = 0.4 >= 0.4)",
            "  gate pass@2>0.5: FAIL (pass@2 = 0.4, required > 0.5)",
        ]
    )


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_gate_verdict_mode_xfails_low_rewards_and_exits_on_gates_only(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    ok = pytester.runpytest(*attach(gym), "--gym-verdict", "gate", "--gym-gate", "mean_reward>=0.4", *xdist)
    ok.assert_outcomes(passed=3, xfailed=3)
    assert ok.ret == pytest.ExitCode.OK
    bad = pytester.runpytest(*attach(gym), "--gym-verdict", "gate", "--gym-gate", "mean_reward>=0.5", *xdist)
    bad.assert_outcomes(passed=2, xfailed=3, failed=1)
    assert bad.ret == pytest.ExitCode.TESTS_FAILED


def test_narrowed_selection_is_said(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    h = task_hash(json.loads(EXAMPLE.read_text().splitlines()[3]))[:12]
    result = pytester.runpytest(*attach(gym), "--gym-gate", "mean_reward>=1", "-k", h)
    result.assert_outcomes(passed=2, deselected=4)
    result.stdout.fnmatch_lines(["example.jsonl: 1 tasks, 1 trials*", "*selection narrowed the suite*"])


def test_our_metrics_equal_gyms_aggregate_metrics(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    pytester.runpytest(*attach(gym), "--gym-repeats", "3")
    run_dir = run_dir_of(pytester)
    ours = json.loads((run_dir / "pytest_gym_summary.json").read_text())["suites"]["example.jsonl"]
    (entry,) = json.loads((run_dir / "rollouts_aggregate_metrics.json").read_text())
    gym_metrics = entry["agent_metrics"]
    assert gym_metrics["mean/reward"] == pytest.approx(ours["mean_reward"])
    for k in (1, 2, 3):
        assert gym_metrics[f"pass@{k}/accuracy"] == pytest.approx(100 * ours["pass_at"][str(k)])
    assert len((run_dir / "rollouts.jsonl").read_text().splitlines()) == 15
    assert len((run_dir / "rollouts_materialized_inputs.jsonl").read_text().splitlines()) == 15


def test_regression_against_baseline_fails_naming_new_failures(
    pytester: pytest.Pytester, all_e: Path, gym: RealGym
) -> None:
    args = attach(
        gym, "--gym-repeats", "2", "--gym-verdict", "gate", "--gym-baseline", "base.json", dataset="all_e.jsonl"
    )
    missing = pytester.runpytest(*args)
    missing.stdout.fnmatch_lines(["*no baseline at */base.json: create it with pytest *--gym-update-baseline*"])
    missing.stdout.fnmatch_lines(["FAILED all_e.jsonl::baseline*"])
    assert missing.ret == pytest.ExitCode.TESTS_FAILED  # nothing to compare with fails the check, as in gate mode
    written = pytester.runpytest(*args, "--gym-update-baseline")
    assert written.ret == pytest.ExitCode.OK
    assert len(json.loads((pytester.path / "base.json").read_text())["suites"]["all_e.jsonl"]["tasks"]) == 10
    same = pytester.runpytest(*args)
    same.assert_outcomes(passed=21)
    same.stdout.fnmatch_lines(["  baseline: delta +0.000 over 10 shared tasks*"])
    gym.script(answer="\\boxed{B}")
    worse = pytester.runpytest(*args)
    worse.assert_outcomes(xfailed=20, failed=1)
    assert worse.ret == pytest.ExitCode.TESTS_FAILED
    first = task_hash(json.loads(all_e.read_text().splitlines()[0]))[:12]
    worse.stdout.fnmatch_lines(
        [
            "regression against the baseline: delta -1.000 over 10 shared tasks (one-sided 95% bounds *); each task "
            f"on its 2 trials; new failures: {first}*"
        ]
    )
    worse.stdout.fnmatch_lines(
        [
            f"  new failures (10): {first} (line 1), * and 5 more",
            "  update the baseline: pytest *--gym-baseline base.json*--gym-update-baseline",
            "FAILED all_e.jsonl::baseline - regression against the baseline*",
        ]
    )


def test_a_stochastic_policy_against_its_baseline(pytester: pytest.Pytester, all_e: Path, gym: RealGym) -> None:
    """Issue 21 end to end: the scripted policy right with chance 0.9 (seeded) and one row broken. The baseline was
    one trial a row, this run three: each row is compared on its first trial, the noise of the nine others makes no
    new failure, and the broken row (every trial wrong now) is one, named."""
    args = attach(gym, "--gym-verdict", "gate", "--gym-baseline", "base.json", "--gym-summary", "summary.json",
                  dataset="all_e.jsonl")  # fmt: skip
    written = pytester.runpytest(*args, "--gym-repeats", "1", "--gym-update-baseline")
    assert written.ret == pytest.ExitCode.OK
    gym.script(chance=0.9, seed=21, broken=["(variant 3)"])
    result = pytester.runpytest(*args, "--gym-repeats", "3", "--gym-gate", "new_failures<=0")
    broken = task_hash(json.loads(all_e.read_text().splitlines()[3]))[:12]
    result.stdout.fnmatch_lines(
        [
            f"  gate new_failures<=0: FAIL (new_failures = 1, required <= 0: {broken} (line 4)*",
            "  baseline: delta * over 10 shared tasks (one-sided 95% bounds *); each task on its first 1 trial both "
            "runs have (the baseline has 1 per task, this run 3)*",
        ]
    )
    suite = json.loads((pytester.path / "summary.json").read_text())["suites"]["all_e.jsonl"]
    assert 0.5 < suite["mean_reward"] < 0.9  # the broken row, and the others wrong now and then
    assert suite["flaky_tasks"]
    baseline = suite["baseline"]
    assert baseline["new_failure_tasks"] == [{"hash": broken, "line": 4}]
    assert baseline["trials_compared"] == {"min": 1, "max": 1}


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_totals_and_flaky_tasks_from_real_trials(
    pytester: pytest.Pytester, all_e: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    """Every third model call answers B: some repeats of a row fail, so the row is flaky; usage is summed."""
    prices = ("--gym-price-in", "2", "--gym-price-out", "8")
    args = attach(
        gym, "--gym-repeats", "3", "--gym-verdict", "gate", *prices, "--junitxml", "r.xml", dataset="all_e.jsonl"
    )
    gym.script(answers=["\\boxed{E}", "\\boxed{E}", "\\boxed{B}"])
    try:
        result = pytester.runpytest(*args, *xdist)
    finally:
        gym.script(answers=[])
    assert result.ret == pytest.ExitCode.OK
    suite = json.loads((run_dir_of(pytester) / "pytest_gym_summary.json").read_text())["suites"]["all_e.jsonl"]
    assert suite["mean_reward"] == pytest.approx(20 / 30)
    trials = read_trial_properties(pytester.path / "r.xml")
    successes: dict[str, int] = {}
    for props in trials.values():
        if "gym_task_hash" in props:
            key = props["gym_task_hash"][:12]
            successes[key] = successes.get(key, 0) + (float(props["gym_reward"]) >= 1.0)
    flaky = {h: c for h, c in successes.items() if 0 < c < 3}
    assert flaky  # E, E, B over 30 calls leaves some row with mixed repeats however they are dispatched
    assert {t["hash"]: t["successes"] for t in suite["flaky_tasks"]} == flaky
    assert all(t["repeats"] == 3 and t["line"] in range(1, 11) for t in suite["flaky_tasks"])
    # The chance two trials of a task disagree: 2/3 for a task with 1 or 2 of 3 right, 0 for the others.
    assert suite["flaky_rate"] == pytest.approx(2 / 3 * len(flaky) / 10)

    totals = suite["totals"]
    tokens = [
        (int(p["gym_input_tokens"]), int(p["gym_output_tokens"])) for p in trials.values() if "gym_input_tokens" in p
    ]
    assert len(tokens) == totals["trials_with_usage"] == totals["trials"] == 30
    assert (totals["input_tokens"], totals["output_tokens"]) == tuple(map(sum, zip(*tokens, strict=True)))
    assert totals["input_tokens"] > 0
    assert totals["cost"] == pytest.approx((2 * totals["input_tokens"] + 8 * totals["output_tokens"]) / 1e6)
    assert 0 < totals["latency_p50_s"] <= totals["latency_p90_s"] <= totals["latency_p99_s"] <= totals["latency_max_s"]
    assert totals["retries"] == 0
    result.stdout.fnmatch_lines(
        [
            "all_e.jsonl: 10 tasks, 30 trials, 0 errors*",
            f"  totals: tokens {totals['input_tokens']} in / {totals['output_tokens']} out / "
            f"{totals['total_tokens']} total, latency p50 *s p90 *s p99 *s max *s, retries 0, cost *",
            f"  flaky ({len(flaky)} of 10 tasks, passed/trials): *",
        ]
    )
    props = read_suite_properties(pytester.path / "r.xml")
    assert props["gym.all_e.jsonl.flaky"] == str(len(flaky))
    assert props["gym.all_e.jsonl.totals.input_tokens"] == str(totals["input_tokens"])
    assert float(props["gym.all_e.jsonl.totals.cost"]) == pytest.approx(totals["cost"])


def test_reordered_and_inserted_rows_do_not_disturb_the_baseline(
    pytester: pytest.Pytester, all_e: Path, gym: RealGym
) -> None:
    args = attach(gym, "--gym-verdict", "gate", "--gym-baseline", "base.json", dataset="all_e.jsonl")
    pytester.runpytest(*args, "--gym-update-baseline")
    lines = all_e.read_text().splitlines()
    extra = json.loads(lines[0])
    extra["responses_create_params"]["input"][0]["content"] += " (new)"
    all_e.write_text("\n".join([json.dumps(extra), *reversed(lines)]) + "\n")
    again = pytester.runpytest(*args)
    again.assert_outcomes(passed=12)
    again.stdout.fnmatch_lines(["  baseline: delta +0.000 over 10 shared tasks*", "  new tasks (not in baseline): 1"])


def test_suite_result_hook_gets_the_metrics(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    pytester.makeconftest(
        """
        import json
        def pytest_gym_suite_result(suite, metrics):
            with open("suite.json", "w") as fh:
                json.dump({"suite": suite, "metrics": metrics}, fh)
        """
    )
    pytester.runpytest(*attach(gym), "--gym-gate", "error_rate<=0")
    data = json.loads((pytester.path / "suite.json").read_text())
    assert data["suite"] == "example.jsonl"
    assert data["metrics"]["mean_reward"] == pytest.approx(0.4)
    assert data["metrics"]["gates"]["error_rate<=0"]["passed"] is True


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_junit_validates_and_carries_trial_and_suite_properties(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    pytester.runpytest(
        *attach(gym), "--gym-repeats", "2", "--gym-gate", "mean_reward>=0.4", "--junitxml", "r.xml", *xdist
    )
    path = pytester.path / "r.xml"
    xmlschema.XMLSchema(str(XSD)).validate(str(path))
    suite = read_suite_properties(path)
    assert float(suite["gym.example.jsonl.mean_reward"]) == pytest.approx(0.4)
    assert suite["gym.example.jsonl.gate[mean_reward>=0.4]"].startswith("pass")
    trials = read_trial_properties(path)
    rewards = sorted(float(p["gym_reward"]) for name, p in trials.items() if "gym_reward" in p)
    assert rewards == [0.0] * 6 + [1.0] * 4
    cases = [case.name for s in JUnitXml.fromfile(str(path)) for case in s]
    assert "gate[mean_reward>=0.4]" in cases


def test_junit_keeps_error_for_infrastructure_faults(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    pytester.runpytest(*attach(gym), "--gym-reward-key", "nope", "--junitxml", "r.xml")
    xml = (pytester.path / "r.xml").read_text()
    assert xml.count("<error ") == 5
    assert "<properties>" not in xml.split("<testcase", 1)[1]


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_trial_result_hook_runs_once_per_trial_on_the_owner(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this test session's own, when it runs under -n
    pytester.makeconftest(
        """
        import json, os
        def pytest_gym_trial_result(trial, result):
            if os.environ.get("PYTEST_XDIST_WORKER"):
                raise AssertionError("trial results are for the owner process")
            with open("trials.jsonl", "a") as fh:
                fh.write(json.dumps([result.nodeid, result.reward, result.error_class]) + "\\n")
        """
    )
    pytester.runpytest(*attach(gym), "--gym-repeats", "2", *xdist)
    seen = [json.loads(line) for line in (pytester.path / "trials.jsonl").read_text().splitlines()]
    assert len(seen) == 10
    assert len({nodeid for nodeid, _, _ in seen}) == 10
    assert sorted(reward for _, reward, _ in seen) == [0.0] * 6 + [1.0] * 4


def test_progress_lines_show_done_total_errors_and_mean(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest(*attach(gym), "--gym-repeats", "2", "--gym-progress-interval", "0.000001")
    result.stdout.fnmatch_lines(
        ["pytest-gym: 1/10 trials done, 0 errors, mean reward *", "pytest-gym: 10/10 trials done*"]
    )
    quiet = pytester.runpytest(*attach(gym), "--gym-progress-interval", "0.000001", "-q")
    assert "trials done" not in quiet.stdout.str()


def test_exports_run_once_at_the_end_and_a_failure_fails_the_run(
    pytester: pytest.Pytester, example: Path, gym: RealGym, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "github.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makeconftest(
        """
        from pytest_gym.exporters import ExportResult
        def pytest_gym_export(run, config):
            return [("mine", ExportResult("failed", f"could not reach tracker for {run.run_id}"))]
        """
    )
    args = (
        *attach(gym),
        "--gym-min-reward",
        "0",
        "--gym-export",
        "summary",
        "--gym-export-opt",
        "summary.dir=out",
        "--gym-export",
        "github",
        "-n",
        "2",
    )
    failed = pytester.runpytest(*args)
    failed.assert_outcomes(passed=5)
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    failed.stdout.fnmatch_lines(
        ["export summary: succeeded*", "export github: succeeded*", "export mine: failed - could not reach tracker*"]
    )
    (written,) = (pytester.path / "out").glob("*.json")
    assert json.loads(written.read_text())["suites"]["example.jsonl"]["mean_reward"] == pytest.approx(0.4)
    assert summary.read_text().count("example.jsonl") >= 1
    soft = pytester.runpytest(*args, "--gym-export-soft")
    assert soft.ret == pytest.ExitCode.OK


def test_bad_export_settings_fail_before_any_rollout(pytester: pytest.Pytester, example: Path, gym: RealGym) -> None:
    result = pytester.runpytest(
        *attach(gym), "--gym-export", "summary", "--gym-export", "nope", "--gym-export-opt", "summary.colour=red"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*nope*", "*colour*"])
    assert gym.policy_calls() == 0
