"""Rollout health against a real Gym: a policy that answers nothing for some tasks makes those trials errors
naming Gym's health check, Gym's own checks run on the run folder at the end (in Gym's interpreter), and a
``health_clean_rate`` gate fails.

Start mode (attached to the kept mcqa Gym, ``kept_pool``), the scripted policy answering ``\\boxed{E}`` except to
the two rows about cystic fibrosis, which get empty text and no completion tokens (a broken endpoint).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.standins.policy import SCRIPT_ENV
from tests.helpers.realgym import RealGym, attach, reuse, start_mode


def test_empty_answers_are_errors_naming_the_check_and_the_clean_rate_gate_fails(
    pytester: pytest.Pytester, example: object, gym_cli: str, monkeypatch: pytest.MonkeyPatch, kept_pool: Path
) -> None:
    # The policy's script is set at the lease: the kept mcqa Gym serves this run as a fresh start would.
    monkeypatch.setenv(SCRIPT_ENV, json.dumps({"empty_if": "cystic fibrosis"}))
    args = start_mode(gym_cli, "--gym-gate", "health_clean_rate>=0.99", "--junitxml", "report.xml", *reuse(kept_pool))
    result = pytester.runpytest_subprocess(*args, "-p", "no:randomly")
    # rows 1-2: empty answers (errors); rows 4-5 expect E (pass); row 3 expects I (fails); the gate fails
    result.assert_outcomes(passed=2, failed=2, errors=2)
    out = result.stdout.str()
    # The errors' section: with CI set, pytest's short summary repeats each message whole.
    errors = out.split("short test summary info")[0]
    assert errors.count("Gym infrastructure fault (unhealthy)") == 2, out
    assert errors.count("model_call_zero_completion_tokens (the model produced no completion tokens)") == 2
    assert "Gym's health checks: 3 rollouts checked" in out  # Gym's own checks on the folder, in its interpreter
    run = pytester.path / "run"
    assert (run / "quality_summary.json").is_file()
    assert (run / "rollout_verdicts.jsonl").is_file()
    summary = json.loads((run / "pytest_gym_summary.json").read_text())["suites"]["example.jsonl"]
    assert summary["unhealthy_trials"] >= 2
    assert summary["health_unobserved"] == 0
    assert summary["health_clean_rate"] <= 3 / 5
    gate = summary["gates"]["health_clean_rate>=0.99"]
    assert gate["passed"] is False
    assert gate["value"] == summary["health_clean_rate"]
    junit = (pytester.path / "report.xml").read_text()
    assert junit.count("[[PROPERTY|gym_health=model_call_zero_completion_tokens,agent_turn_hollow]]") == 2
    assert junit.count("[[PROPERTY|gym_health_verdict=") == 3  # Gym's verdict on each rollout with an answer


def test_attached_to_a_gym_the_checks_run_on_the_folder_when_gyms_cli_is_here(
    pytester: pytest.Pytester, example: object, gym: RealGym
) -> None:
    """A Gym someone else started: Gym's checks still run on this run's folder, with the CLI given here.

    Its model calls are not captured for this run, so the records get Gym's collector step without them (as
    ``gym eval run`` against a Gym without observability): Gym's checks on model calls are unobserved, not
    "missing captured call" (each trial unhealthy, as the agent's raw trajectory made them), and the clean
    rate has no value: insufficient evidence, said by its gate."""
    result = pytester.runpytest_subprocess(
        *attach(gym, f"--gym-cli={gym.cli}", "--gym-run-dir", "run", "--gym-gate", "health_clean_rate>=0.99"),
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=2, failed=4)  # rows 1, 2, 3 and the gate
    out = result.stdout.str()
    assert "Gym's health checks: 5 rollouts checked, 0 healthy, 0 unhealthy, 5 unobserved" in out, out
    assert "the attached Gym's model calls are not captured for this run" in out
    run = pytester.path / "run"
    verdicts = [json.loads(line) for line in (run / "rollout_verdicts.jsonl").read_text().splitlines()]
    assert [v["verdict"] for v in verdicts] == ["unobserved"] * 5
    assert all("agent_turn_hollow" not in v["unobserved"] for v in verdicts)  # what the answer shows is checked
    for line in (run / "rollouts.jsonl").read_text().splitlines():
        gaps = [gap["code"] for gap in json.loads(line)["ng_trajectory"]["gaps"]]
        assert "model_calls_unavailable" in gaps, gaps
    summary = json.loads((run / "pytest_gym_summary.json").read_text())["suites"]["example.jsonl"]
    assert (summary["unhealthy_trials"], summary["health_unobserved"]) == (0, 5)
    assert summary.get("health_clean_rate") is None
    assert summary["gates"]["health_clean_rate>=0.99"]["passed"] is False
