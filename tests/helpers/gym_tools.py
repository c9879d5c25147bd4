"""A started Gym's run folder read by Gym's own tools (health-check, ATIF export, profile), and the tool-calling
example (example_single_tool_call with the scripted policy calling get_weather): shared by the real-Gym tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.jsonl import read_jsonl

TOOL_SCRIPT = {"tool_name": "get_weather", "tool_arguments": '{"city": "sf"}'}


def run_gym(cli: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL
    )


def health(cli: str, run: Path) -> dict[str, Any]:
    result = run_gym(cli, "eval", "health-check", str(run), "--json", cwd=run.parent)
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 1: some rollout unhealthy
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])["run"]
    return report


def export_atif(cli: str, rollouts: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return run_gym(
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

    profile = run_gym(
        cli,
        *("eval", "profile", "--inputs", str(run / "rollouts_materialized_inputs.jsonl")),
        *("--rollouts", str(run / "rollouts.jsonl")),
        cwd=run.parent,
    )
    assert profile.returncode == 0, profile.stdout + profile.stderr
    assert f"Reward profile completion: {trials}/{trials} rollout rows" in profile.stdout


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
