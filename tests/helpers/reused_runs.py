"""Runs without Gym: an earlier run folder holding a reward for every trial, which ``--gym-resume`` reuses.

A pytester run given ``reuse(...)`` reports every trial with the reward written here and starts no Gym,
so what it exercises is the plugin's own path from collection and reports to verdicts and reports.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.runinfo import write_run_info

AGENT = "a"


def row(i: int, **fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": f"question {i}"}, **fields}


def earlier_run(
    pytester: pytest.Pytester, datasets: dict[str, list[tuple[dict[str, Any], list[float]]]], name: str = "earlier"
) -> str:
    """Write the datasets and a run folder holding a reward for every trial; returns the folder (for --gym-resume)."""
    run = pytester.path / name
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
                        "responses_create_params": r["responses_create_params"],  # Gym's answer echoes it
                    }
                )
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if not (pytester.path / "pytest.ini").exists():
        pytester.makeini("[pytest]\n")
    return str(run)


def reuse(run: str, *datasets: str, repeats: int = 2) -> list[str]:
    args = ["--gym-agent", AGENT, "--gym-resume", run, "--gym-repeats", str(repeats)]
    for dataset in datasets:
        args += ["--gym-dataset", dataset]
    return args


def latest_run(pytester: pytest.Pytester) -> Any:
    """The latest run folder (by modification time)."""
    runs = sorted((pytester.path / ".pytest_gym" / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return runs[-1]


def summary_of(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((latest_run(pytester) / "pytest_gym_summary.json").read_text())
    return data
