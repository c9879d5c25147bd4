"""A gate the repeats can never decide is refused at collection, before Gym starts (issue 24 item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.reused_runs import AGENT, earlier_run, row

#: No Gym anywhere (a command that exits 1: a missing one is refused at start-up): a run that got as far as a
#: rollout would fail on it instead.
NO_GYM = ("--gym-cli=/bin/false", "--gym-agent", AGENT, "--gym-resources-server", "mcqa")


def test_pass_at_k_above_the_repeats_is_refused_before_any_rollout(pytester: pytest.Pytester) -> None:
    earlier_run(pytester, {"d.jsonl": [(row(i), [1.0]) for i in range(3)]})
    result = pytester.runpytest("--gym-dataset", "d.jsonl", "--gym-repeats", "2", "--gym-gate", "pass@5>=0.5", *NO_GYM)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*ERROR collecting d.jsonl*",
            "*gate pass@5>=0.5 (from --gym-gate / gym_gate) can never be decided: pass@5 needs 5 trials of each "
            "task and this suite has 2; raise the repeats (--gym-repeats, or repeats: in a suite file) to 5, "
            "or gate on pass@2",
        ]
    )
    assert "/bin/false" not in result.stdout.str()  # Gym was never started
    assert not list(Path(pytester.path, ".pytest_gym", "runs").glob("*/gym_env.log"))


def test_suite_files_repeats_count(pytester: pytest.Pytester) -> None:
    earlier_run(pytester, {"d.jsonl": [(row(i), [1.0]) for i in range(3)]})
    (pytester.path / "a.gym.yaml").write_text('dataset: d.jsonl\nrepeats: 1\ngates: ["flaky_rate <= 0.2"]\n')
    (pytester.path / "b.gym.yaml").write_text('dataset: d.jsonl\nrepeats: 4\ngates: ["pass^4 >= 0.5"]\n')
    result = pytester.runpytest("--co", "-q", *NO_GYM)
    result.stdout.fnmatch_lines(
        [
            "pytest-gym: gate flaky_rate<=0.2 (from */a.gym.yaml (key gates, or --gym-gate)) can never be "
            "decided: flaky_rate needs 2 trials of each task and this suite has 1; raise the repeats*to 2"
        ]
    )
    assert any(line.startswith("b.gym.yaml::") for line in result.stdout.lines)  # 4 repeats decide pass^4
