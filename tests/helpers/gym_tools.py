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
from pytest_gym.runfolder.layout import MATERIALIZED_FILE, ROLLOUTS_FILE

TOOL_SCRIPT = {"tool_name": "get_weather", "tool_arguments": '{"city": "sf"}'}


def run_gym(cli: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL
    )


#: Runs several ``gym`` commands, in turn, in one process of Gym's interpreter: each command's imports are most
#: of its cost (6-9 s of CPU), and mostly the same. Each runs as ``gym ARGS`` would (its argv, its folder, its
#: exit status), its output caught at the file descriptors (what it writes by any means); Gym's config, parsed
#: once per process from the command line and cached (``nemo_gym.global_config``), is dropped before each.
#: Reads a JSON list of {"args", "cwd"} on stdin, writes a JSON list of {"returncode", "stdout", "stderr"} on
#: its last line.
_BATCH = r"""
import json, os, sys, tempfile, traceback
import nemo_gym.global_config
from nemo_gym.cli.main import main

results = []
for item in json.loads(sys.stdin.read()):
    caught = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(caught[0].fileno(), 1), os.dup2(caught[1].fileno(), 2)
    code = 0
    nemo_gym.global_config._GLOBAL_CONFIG_DICT = None  # parsed again from this command's argv
    try:
        os.chdir(item["cwd"])
        sys.argv = ["gym", *item["args"]]
        try:
            code = main() or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    texts = []
    for handle in caught:
        handle.seek(0)
        texts.append(handle.read().decode("utf-8", "replace"))
        handle.close()
    results.append({"returncode": code, "stdout": texts[0], "stderr": texts[1]})
sys.stdout.write("\n" + json.dumps(results) + "\n")
"""


def run_gym_commands(cli: str, commands: list[tuple[list[str], Path]]) -> list[subprocess.CompletedProcess[str]]:
    """``gym ARGS`` in folder ``cwd`` for each (ARGS, cwd), in turn, in one process of Gym's interpreter."""
    python = str(Path(cli).parent / "python")
    payload = json.dumps([{"args": args, "cwd": str(cwd)} for args, cwd in commands])
    done = subprocess.run(
        [python, "-c", _BATCH], input=payload, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return [
        subprocess.CompletedProcess(["gym", *args], r["returncode"], r["stdout"], r["stderr"])
        for (args, _), r in zip(commands, results, strict=True)
    ]


def health_args(run: Path) -> list[str]:
    return ["eval", "health-check", str(run), "--json"]


def health_report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The run's part of what ``gym eval health-check --json`` printed."""
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 1: some rollout unhealthy
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])["run"]
    return report


def profile_args(run: Path, *extra: str) -> list[str]:
    return ["eval", "profile", "--inputs", str(run / MATERIALIZED_FILE), "--rollouts", str(run / ROLLOUTS_FILE), *extra]


def export_atif_args(rollouts: Path, out: Path) -> list[str]:
    return [
        *("eval", "export", "--format", "atif", "--rollouts", str(rollouts), "--output-dir", str(out)),
        *("--session-id", "pytest-gym", "--agent-version", "test"),
    ]


def check_run_folder(
    cli: str,
    run: Path,
    datasets: list[Path],
    trials: int,
    env_server: str,
    tool_calls: int,
    tools: bool = True,
    also: list[tuple[list[str], Path]] | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    """What Gym's collector writes is there, and Gym's own tools read the folder as one of theirs
    (``tools=False``: health-check only). ``also``: more of Gym's commands run in the same process (each
    command's imports cost seconds); their results are returned."""
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

    commands = [(health_args(run), run.parent)]
    if tools:
        whole = run.parent / f"{run.name}-resolved.jsonl"  # the records without Gym's one gap (below)
        with whole.open("w") as fh:
            for record in records:
                record["ng_trajectory"]["gaps"] = []
                fh.write(json.dumps(record) + "\n")
        commands += [
            (export_atif_args(run / "rollouts.jsonl", run.parent / f"{run.name}-atif"), run.parent),
            (export_atif_args(whole, run.parent / f"{run.name}-atif-resolved"), run.parent),
            (profile_args(run), run.parent),
        ]
    results = run_gym_commands(cli, commands + list(also or []))
    extra = results[len(commands) :]

    report = health_report(results[0])
    assert report["artifacts"]["records"] == trials
    verdicts = report["verdicts"]
    assert verdicts["unobserved"] == 0, verdicts
    assert verdicts["healthy"] + verdicts["unhealthy"] == trials
    if not tools:
        return extra
    rejected, exported, profile = results[1 : len(commands)]

    # Strict ATIF export refuses source-coverage gaps; this run's only one is Gym's own "resolution_unavailable".
    assert rejected.returncode != 0
    reasons = [line for line in (rejected.stdout + rejected.stderr).splitlines() if line.startswith("- line")]
    assert len(reasons) == trials, reasons
    assert all("ng_trajectory.gaps" in line for line in reasons), reasons
    # Without it, every trial exports: the trajectories are whole.
    assert exported.returncode == 0, exported.stdout + exported.stderr
    manifest = read_jsonl(run.parent / f"{run.name}-atif-resolved" / "manifest.jsonl")
    assert len(manifest) == trials

    assert profile.returncode == 0, profile.stdout + profile.stderr
    assert f"Reward profile completion: {trials}/{trials} rollout rows" in profile.stdout
    return extra


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
