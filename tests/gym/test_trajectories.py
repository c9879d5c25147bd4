"""A started Gym's run folder read by Gym's own tools: trajectories, health-check, ATIF export, profile, compare.

Start mode, the scripted policy standing in for the model: mcqa (one turn) and example_single_tool_call (a
tool call, then an answer); a run under xdist is checked the same way by tests/gym/test_end_to_end.py's start-mode
test. The commands are the README's ("Inspecting a run folder with Gym's tools").
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.jsonl import read_jsonl
from tests.helpers.realgym import start_mode

TOOL_SCRIPT = {"tool_name": "get_weather", "tool_arguments": '{"city": "sf"}'}


def gym(cli: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL
    )


def health(cli: str, run: Path) -> dict[str, Any]:
    result = gym(cli, "eval", "health-check", str(run), "--json", cwd=run.parent)
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 1: some rollout unhealthy
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])["run"]
    return report


def export_atif(cli: str, rollouts: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return gym(
        cli,
        *("eval", "export", "--format", "atif", "--rollouts", str(rollouts), "--output-dir", str(out)),
        *("--session-id", "pytest-gym", "--agent-version", "test"),
        cwd=out.parent,
    )


def check_run_folder(
    cli: str, run: Path, datasets: list[Path], trials: int, env_server: str, tool_calls: int, tools: bool = True
) -> None:
    """What Gym's collector writes is there, and Gym's own tools read the folder as one of theirs
    (``tools=False``: health-check only; each of Gym's commands costs seconds of imports)."""
    records = read_jsonl(run / "rollouts.jsonl")
    assert len(records) == trials
    positions, start = {}, 0  # each dataset's range of task indices follows the one before (its rows)
    for dataset in datasets:
        rows = [line for line in dataset.read_text().splitlines() if line.strip()]
        positions.update({task_hash(json.loads(line)): start + n for n, line in enumerate(rows)})
        start += len(rows)
    for record in records:
        assert record["_ng_task_index"] == positions[record["_pytest_gym_task_hash"]]  # the row's place, stable
        assert (record["_ng_environment_server"], record["_ng_result_type"]) == (env_server, "legacy_agent")
        assert record["ng_model_call_capture"]["rollout_id"] == record["_ng_rollout_id"]  # pytest-gym's, per trial
        assert len(record["ng_model_call_capture"]["calls"]) == 1 + tool_calls
        assert record["ng_perf"]["num_tool_calls"] == tool_calls
        # Gym's simple_agent notes that the verifier reported no `resolved`: the only gap, as in `gym eval run`.
        assert [gap["code"] for gap in record["ng_trajectory"]["gaps"]] == ["resolution_unavailable"]

    report = health(cli, run)
    assert report["artifacts"]["records"] == trials
    verdicts = report["verdicts"]
    assert verdicts["unobserved"] == 0, verdicts
    assert verdicts["healthy"] + verdicts["unhealthy"] == trials
    if not tools:
        return

    # Strict ATIF export refuses source-coverage gaps; this run's only one is Gym's own "resolution_unavailable".
    rejected = export_atif(cli, run / "rollouts.jsonl", run.parent / f"{run.name}-atif")
    assert rejected.returncode != 0
    reasons = [line for line in (rejected.stdout + rejected.stderr).splitlines() if line.startswith("- line")]
    assert len(reasons) == trials, reasons
    assert all("ng_trajectory.gaps" in line for line in reasons), reasons
    # Without it, every trial exports: the trajectories are whole.
    whole = run.parent / f"{run.name}-resolved.jsonl"
    with whole.open("w") as fh:
        for record in records:
            record["ng_trajectory"]["gaps"] = []
            fh.write(json.dumps(record) + "\n")
    exported = export_atif(cli, whole, run.parent / f"{run.name}-atif-resolved")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    manifest = read_jsonl(run.parent / f"{run.name}-atif-resolved" / "manifest.jsonl")
    assert len(manifest) == trials

    profile = gym(
        cli,
        *("eval", "profile", "--inputs", str(run / "rollouts_materialized_inputs.jsonl")),
        *("--rollouts", str(run / "rollouts.jsonl")),
        cwd=run.parent,
    )
    assert profile.returncode == 0, profile.stdout + profile.stderr
    assert f"Reward profile completion: {trials}/{trials} rollout rows" in profile.stdout


def test_an_mcqa_run_folder_reads_as_gyms_own(pytester: pytest.Pytester, example: Path, gym_cli: str) -> None:
    """Without xdist; tests/gym/test_end_to_end.py's start-mode test checks the folder of a run under -n 2. Gym's
    export and profile read mcqa folders in the two-datasets test below."""
    result = pytester.runpytest_subprocess(*start_mode(gym_cli, "--gym-repeats", "2"), "-p", "no:randomly")
    result.assert_outcomes(passed=4, failed=6)
    check_run_folder(gym_cli, pytester.path / "run", [example], 10, "mcqa_environment_server", 0, tools=False)


def test_two_datasets_in_one_run_keep_their_trajectories_apart(
    pytester: pytest.Pytester, example: Path, gym_cli: str
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
        *start_mode(gym_cli, "--gym-dataset", "other.jsonl"), "-p", "no:randomly", "-n", "2"
    )
    result.assert_outcomes(passed=4, failed=6)
    run = pytester.path / "run"
    check_run_folder(gym_cli, run, [example, other], 10, "mcqa_environment_server", 0)
    ids = [record["_ng_rollout_id"] for record in read_jsonl(run / "rollouts.jsonl")]
    assert len(set(ids)) == 10, ids
    assert len(list((run / "model_calls").glob("*.capture.jsonl"))) == 10
    compare = gym(
        gym_cli,
        *("eval", "compare", "--baseline", str(run / "rollouts.jsonl"), "--candidates", str(run / "rollouts.jsonl")),
        *("--output-dir", "compare", "--report-format", "json"),
        cwd=pytester.path,
    )
    assert compare.returncode == 0, compare.stdout + compare.stderr
    assert list((pytester.path / "compare").glob("*.json"))


def tool_call_example(gym_cli: str, folder: Path) -> Path:
    found = sorted(
        Path(gym_cli).parent.parent.glob("lib/python3*/site-packages/resources_servers/example_single_tool_call/data")
    )
    if not found:
        pytest.fail(f"no resources_servers/example_single_tool_call next to {gym_cli}: is it a nemo-gym 0.7 install?")
    # Gym's ATIF export supports no "developer" message (its own reason to refuse a row): the copy says "system".
    rows = [json.loads(line) for line in (found[0] / "example.jsonl").read_text().splitlines() if line.strip()]
    for row in rows:
        for message in row["responses_create_params"]["input"]:
            if message.get("role") == "developer":
                message["role"] = "system"
    target = folder / "weather.jsonl"
    target.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return target


def tool_call_args(gym_cli: str, *args: str) -> tuple[str, ...]:
    return (
        "--gym-dataset", "weather.jsonl", "--gym-resources-server", "example_single_tool_call",
        "--gym-policy", "scripted", "--gym-policy-answer", "Sunny in SF.", f"--gym-cli={gym_cli}",
        "--gym-server-venv", "auto", "--gym-agent", "example_single_tool_call_simple_agent", "-p", "no:randomly", *args,
    )  # fmt: skip


def test_a_tool_calling_run_folder_and_its_failure_messages(
    pytester: pytest.Pytester, gym_cli: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\n")
    dataset = tool_call_example(gym_cli, pytester.path)
    monkeypatch.setenv("PYTEST_GYM_POLICY_SCRIPT", json.dumps(TOOL_SCRIPT))
    # Every trial calls get_weather (reward 1.0); min_reward 2 fails them all, to read their messages. Under
    # xdist: the run folder of a tool-calling run whose records come from two processes.
    args = tool_call_args(gym_cli, "--gym-run-dir", "run", "--gym-min-reward", "2", "-n", "2")
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
