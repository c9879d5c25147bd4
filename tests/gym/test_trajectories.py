"""A started Gym's run folder read by Gym's own tools: trajectories, health-check, ATIF export, profile, compare.

Start mode, the scripted policy standing in for the model: mcqa (one turn) and example_single_tool_call (a
tool call, then an answer); a run under xdist is checked the same way by tests/gym/test_end_to_end.py's start-mode
test. The commands are the README's ("Inspecting a run folder with Gym's tools").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_gym.core.jsonl import read_jsonl
from tests.helpers.gym_tools import TOOL_SCRIPT, check_run_folder, tool_call_args, tool_call_example
from tests.helpers.realgym import reuse, start_mode


def test_an_mcqa_run_folder_reads_as_gyms_own(
    pytester: pytest.Pytester, example: Path, gym_cli: str, kept_pool: Path
) -> None:
    """Without xdist; tests/gym/test_end_to_end.py's start-mode test checks the folder of a run under -n 2. Gym's
    export and profile read mcqa folders in the two-datasets test below. The Gym is kept (``kept_pool``)."""
    result = pytester.runpytest_subprocess(
        *start_mode(gym_cli, "--gym-repeats", "2", *reuse(kept_pool)), "-p", "no:randomly"
    )
    result.assert_outcomes(passed=4, failed=6)
    check_run_folder(gym_cli, pytester.path / "run", [example], 10, "mcqa_environment_server", 0, tools=False)


FINALIZED_ACCOUNT = """
import pytest_gym.gym.trajectories as trajectories

_finalize = trajectories.Finalizer.finalize


def finalize(self, run_dir, servers):
    account = _finalize(self, run_dir, servers)
    (run_dir.parent / "finalized.txt").write_text(account)
    return account


trajectories.Finalizer.finalize = finalize
"""


def test_rollouts_finalized_while_the_trials_run_read_as_gyms_own(
    pytester: pytest.Pytester, example: Path, gym_cli: str, kept_pool: Path
) -> None:
    """Gym's collector step runs on the rollouts recorded so far while the trials go on (as Gym's own collector
    finalizes each rollout as it returns); the folder reads as Gym's own all the same."""
    pytester.makeconftest(FINALIZED_ACCOUNT)
    slow = ("--gym-repeats", "2", "--gym-concurrency", "1", "--gym-policy-latency-ms", "400")
    result = pytester.runpytest_subprocess(*start_mode(gym_cli, *slow, *reuse(kept_pool)), "-p", "no:randomly")
    result.assert_outcomes(passed=4, failed=6)
    account = (pytester.path / "finalized.txt").read_text()
    found = re.search(r"^10 records finalized \((\d+) while the trials ran\)", account)
    assert found is not None, account
    assert 0 < int(found.group(1)) < 10, account
    check_run_folder(gym_cli, pytester.path / "run", [example], 10, "mcqa_environment_server", 0, tools=False)


def test_two_datasets_in_one_run_keep_their_trajectories_apart(
    pytester: pytest.Pytester, example: Path, gym_cli: str, kept_pool: Path
) -> None:
    """The same task indices in both (0..4): Gym's default capture key "<task>-<rollout>" would collide, and a
    record paired with its input by the indices would get the other dataset's (an identity-mismatch gap).

    Gym's own tools key a run folder by (task index, rollout index): each dataset has its own range of task
    indices, so health-check, profile, export (without Gym's own resolution gap) and compare read the folder."""
    other = pytester.path / "other.jsonl"
    rows = [json.loads(line) for line in example.read_text().splitlines() if line.strip()]
    for row in rows:
        row["responses_create_params"]["input"][0]["content"] += " (second set)"
    other.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = pytester.runpytest_subprocess(
        *start_mode(gym_cli, "--gym-dataset", "other.jsonl", *reuse(kept_pool)), "-p", "no:randomly", "-n", "2"
    )
    result.assert_outcomes(passed=4, failed=6)
    run = pytester.path / "run"
    compare_args = [
        *("eval", "compare", "--baseline", str(run / "rollouts.jsonl"), "--candidates", str(run / "rollouts.jsonl")),
        *("--output-dir", "compare", "--report-format", "json"),
    ]
    [compare] = check_run_folder(
        gym_cli, run, [example, other], 10, "mcqa_environment_server", 0, also=[(compare_args, pytester.path)]
    )
    ids = [record["_ng_rollout_id"] for record in read_jsonl(run / "rollouts.jsonl")]
    assert len(set(ids)) == 10, ids
    assert len(list((run / "model_calls").glob("*.capture.jsonl"))) == 10
    assert compare.returncode == 0, compare.stdout + compare.stderr
    assert list((pytester.path / "compare").glob("*.json"))


def test_a_tool_calling_run_folder_and_its_failure_messages(
    pytester: pytest.Pytester, gym_cli: str, monkeypatch: pytest.MonkeyPatch, kept_pool: Path
) -> None:
    pytester.makeini("[pytest]\n")
    dataset = tool_call_example(gym_cli, pytester.path)
    monkeypatch.setenv("PYTEST_GYM_POLICY_SCRIPT", json.dumps(TOOL_SCRIPT))
    # Every trial calls get_weather (reward 1.0); min_reward 2 fails them all, to read their messages. Under
    # xdist: the run folder of a tool-calling run whose records come from two processes.
    args = tool_call_args(gym_cli, "--gym-run-dir", "run", "--gym-min-reward", "2", "-n", "2", *reuse(kept_pool))
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(failed=5)
    run = pytester.path / "run"
    result.stdout.fnmatch_lines(
        [
            "reward 1.0 < min_reward 2.0 for task * (*weather.jsonl:1, repeat 0)",
            "  trajectory: 2 turns, 1 tool call:",
            '    tool call get_weather({"city": "sf"})',
            "    tool output: *",
            "    assistant: Sunny in SF.",
            f"  full record: {run}/rollouts.jsonl (_ng_task_index=0, _ng_rollout_index=0)",
        ]
    )
    check_run_folder(gym_cli, run, [dataset], 5, "example_single_tool_call_environment_server", 1)
