"""Issue 21's table on pytest runs: a seeded stochastic Gym answers, the plugin judges end to end.

The fake Gym head (tests/helpers/standin.StandinGym) answers each ``/run`` with a seeded draw of the
task's chance (tests/helpers/stochastic.Draws): a model at temperature > 0, reproducible by its seed. Each test
is one row of the table, on real pytest runs (attach mode, a subprocess each): the terminal section, the
``::baseline`` and gate outcomes and the summary file. The rates behind each row need thousands of runs
and are measured in tests/unit/judge/test_stochastic.py; here a few seeds show the behaviour where a user sees it.
A real Gym with the scripted policy's stochastic mode: tests/gym/test_verdicts.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.judge.intervals import clopper_pearson
from tests.helpers import stochastic
from tests.helpers.standin import StandinGym, serving
from tests.helpers.stochastic import Draws, StandIn

pytestmark = pytest.mark.simulation

AGENT = "fake_agent"


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        yield server


def run(pytester: pytest.Pytester, gym: StandinGym, draws: Draws, *args: str) -> pytest.RunResult:
    """One pytest run against the stochastic Gym; every run has a baseline file and gate verdicts."""
    gym.routes["/run"] = lambda request: draws(request.json())
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-baseline", "base.json",
        "--gym-verdict", "gate", "--gym-summary", "summary.json", "-p", "no:cacheprovider", "-p", "no:randomly",
        *args,
    )  # fmt: skip


def dataset(pytester: pytest.Pytester, stand_in: StandIn, prefix: str = "q") -> dict[str, float]:
    pytester.makeini("[pytest]\n")
    text, chances = stochastic.rows(stand_in, prefix)
    (pytester.path / "data.jsonl").write_text(text)
    return chances


def summary(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "summary.json").read_text())["suites"]["data.jsonl"]
    return data


def short_hash(text: str) -> str:
    return task_hash({"responses_create_params": {"input": [{"role": "user", "content": text}]}})[:12]


def test_raising_the_repeats_makes_no_regression(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """Baseline at --gym-repeats 1, this run at 5 (what our messages advise): compared on each task's first trial."""
    chances = dataset(pytester, stochastic.equal(20, 0.9))
    run(pytester, gym, Draws(chances, seed=1), "--gym-repeats", "1", "--gym-update-baseline")
    result = run(pytester, gym, Draws(chances, seed=2), "--gym-repeats", "5")
    baseline = summary(pytester)["baseline"]
    assert (
        baseline["compared"]
        == "each task on its first 1 trial both runs have (the baseline has 1 per task, this run 5)"
    )
    assert baseline["trials_compared"] == {"min": 1, "max": 1}
    assert baseline["passed"], baseline
    result.stdout.fnmatch_lines(["  baseline: delta * over 20 shared tasks (one-sided 95% bounds *; each task on*"])
    assert result.ret == 0


def test_noise_is_no_new_failure_and_a_break_is(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """20 tasks, half always right and half right with chance 0.9, 4 trials: noise passes new_failures<=0, a
    task that always passed and now always fails does not (it is named, and the flaky flips are listed apart)."""
    chances = dataset(pytester, stochastic.mix(20, 0.9, solid=0.5))
    args = ("--gym-repeats", "4", "--gym-gate", "new_failures<=0")
    run(pytester, gym, Draws(chances, seed=1), *args, "--gym-update-baseline")
    noisy = run(pytester, gym, Draws(chances, seed=2), *args)
    noisy.stdout.fnmatch_lines(["  gate new_failures<=0: PASS (new_failures = 0 <= 0*"])
    broken = run(pytester, gym, Draws({**chances, "q3": 0.0}, seed=4), *args)
    broken.stdout.fnmatch_lines(
        [f"  gate new_failures<=0: FAIL (new_failures = 1, required <= 0: {short_hash('q3')} (line 4)*"]
    )
    assert summary(pytester)["baseline"]["new_failure_tasks"] == [{"hash": short_hash("q3"), "line": 4}]


def test_a_drop_of_the_tolerance_is_not_a_regression_three_times_it_is(
    pytester: pytest.Pytester, gym: StandinGym
) -> None:
    """200 tasks, one trial each, --gym-max-regression 0.05: 0.9 -> 0.85 passes the baseline check (it is the
    tolerance), 0.9 -> 0.75 fails it with the test of "drop > 0.05" in its reason."""
    base = stochastic.equal(200, 0.9)
    chances = dataset(pytester, base)
    run(pytester, gym, Draws(chances, seed=1), "--gym-update-baseline")
    at = dataset(pytester, base.lowered(0.05))
    within = run(pytester, gym, Draws(at, seed=2), "--gym-max-regression", "0.05")
    assert summary(pytester)["baseline"]["passed"]
    assert not summary(pytester)["baseline"]["regressed"]
    within.stdout.fnmatch_lines(["  baseline: delta * p(drop > 0.05) *"])
    beyond = dataset(pytester, base.lowered(0.15))
    result = run(pytester, gym, Draws(beyond, seed=3), "--gym-max-regression", "0.05")
    section = summary(pytester)["baseline"]
    assert section["regressed"]
    assert section["ci_high"] < -0.05
    assert section["p_beyond"] < 0.05
    result.stdout.fnmatch_lines(["regression against the baseline: delta -0.* p(drop > 0.05) 0.0*"])


def test_errored_tasks_never_let_a_gate_read_pass(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """100 passing tasks and 100 whose every trial errors: the three gates all read PASS before."""
    chances = dataset(pytester, stochastic.equal(200, 1.0))
    errored = frozenset(f"q{i}" for i in range(100, 200))
    gates = ("--gym-gate", "ci_low(mean_reward)>=0.95", "--gym-gate", "mean_reward>=0.99", "--gym-gate", "pass@4>=0.99")
    result = run(pytester, gym, Draws(chances, errored=errored), "--gym-repeats", "4", *gates)
    assert result.ret == 1
    gate_lines = [line for line in result.stdout.lines if line.startswith("  gate ")]
    assert len(gate_lines) == 3
    for line in gate_lines:
        assert ": FAIL (" in line, line
        assert "undecided" in line, line
        assert f"{short_hash('q100')} (line 101)" in line, line
    for entry in summary(pytester)["gates"].values():
        assert (entry["passed"], entry["undecided"]) == (False, True)
        assert entry["bounds"][0] < entry["bounds"][1]


def test_one_errored_trial_names_the_real_cause(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """One trial of 120 errors at --gym-repeats 4: pass@4>=0.9 said "raise --gym-repeats to at least 4"."""
    chances = dataset(pytester, stochastic.equal(30, 1.0))
    result = run(pytester, gym, Draws(chances, errored_calls=frozenset({("q7", 1)})), "--gym-repeats", "4",
                 "--gym-gate", "pass@4>=0.9")  # fmt: skip
    out = result.stdout.str()
    assert "raise --gym-repeats" not in out
    result.stdout.fnmatch_lines(
        [f"  gate pass@4>=0.9: PASS (pass@4 = 1 >= 0.9 with the 1 errored trial ({short_hash('q7')} (line 8))*"]
    )


def test_no_shared_task_is_no_evidence(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """The rows reformatted (every hash new): was p = 1, new_failures = 0 and a passing baseline check."""
    old = dataset(pytester, stochastic.equal(10, 1.0), prefix="q")
    run(pytester, gym, Draws(old), "--gym-update-baseline")
    new = dataset(pytester, stochastic.equal(10, 1.0), prefix="Q: ")
    result = run(pytester, gym, Draws(new), "--gym-gate", "new_failures<=0")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "  gate new_failures<=0: FAIL (new_failures<=0: no evidence: the baseline and this run share no task*",
            "  baseline check failed: no evidence against the baseline: the baseline and this run share no task*",
        ]
    )
    assert summary(pytester)["baseline"]["passed"] is False


def test_four_of_eight_flipping_the_bounds_and_the_test_agree(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """Was "95% CI -0.785..-0.013" next to "p(drop) 0.0625, not significant"."""
    chances = dataset(pytester, stochastic.equal(8, 1.0))
    run(pytester, gym, Draws(chances), "--gym-update-baseline")
    result = run(pytester, gym, Draws({**chances, "q0": 0.0, "q1": 0.0, "q2": 0.0, "q3": 0.0}))
    section = summary(pytester)["baseline"]
    assert section["bounds"] == "one-sided 95%"
    assert (section["ci_high"] < 0.0) == section["significant_drop"] == (section["p_drop"] < 0.05)
    assert section["regressed"]
    result.stdout.fnmatch_lines(
        ["  baseline: delta -0.500 over 8 shared tasks (one-sided 95% bounds -0.* p(drop) 0.0352*"]
    )


def test_fractional_rewards_get_the_narrower_interval(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """Partial credit (four quarter-point checks), 30 tasks x 4: no longer capped at one pass/fail trial per trial."""
    chances = dataset(pytester, stochastic.beta(30, 0.8, 50.0))
    run(pytester, gym, Draws(chances, seed=5, partial=True), "--gym-repeats", "4", "--gym-min-reward", "0.5")
    suite = summary(pytester)
    capped = clopper_pearson(suite["mean_reward"] * suite["trials"], suite["trials"])
    assert suite["ci_low"] < suite["mean_reward"] < suite["ci_high"]
    assert suite["ci_high"] - suite["ci_low"] < (capped[1] - capped[0]) / 1.3
