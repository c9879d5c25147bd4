"""``--gym-reuse`` with the real Gym: a second run attaches to the kept Gym, with its own captures and a policy
reset to its start script, and the kept Gym stops when its owner ends. Pool logic: tests/unit/gym/test_kept.py."""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.pids import pid_alive
from pytest_gym.gym.kept import OWNER_FILE
from pytest_gym.standins.policy import SCRIPT_ENV
from tests.helpers.gym_tools import check_run_folder
from tests.helpers.realgym import start_mode


def rewards_by_task(run: Path) -> dict[int, list[float]]:
    found: dict[int, list[float]] = defaultdict(list)
    for record in read_jsonl(run / "rollouts.jsonl"):
        found[record["_ng_task_index"]].append(record["reward"])
    return {task: sorted(rewards) for task, rewards in found.items()}


def test_a_second_run_attaches_repeats_a_seeded_policys_answers_and_the_gym_stops_with_its_owner(
    pytester: pytest.Pytester, example: Path, gym_cli: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each task's draws depend on how many calls it had: without the reset, the second run's 15 draws (5 tasks x 3,
    chance 0.5) would give every task the same number of right answers with probability (20/64)^5 = 0.3%."""
    pool = pytester.path / "pool"
    pool.mkdir()
    owner = subprocess.Popen(["sleep", "600"])
    try:
        (pool / OWNER_FILE).write_text(str(owner.pid))
        monkeypatch.setenv(SCRIPT_ENV, json.dumps({"chance": 0.5, "seed": 11}))
        args = (*start_mode(gym_cli, "--gym-repeats", "3", f"--gym-reuse={pool}"), "-p", "no:randomly")
        first = pytester.runpytest_subprocess(*args)
        second = pytester.runpytest_subprocess(*args, "--gym-run-dir", "again", "-n", "2")
        run, again = pytester.path / "run", pytester.path / "again"
        assert "env start" in (run / "gym_env.log").read_text()
        assert "env start" not in (again / "gym_env.log").read_text()
        second.stdout.fnmatch_lines(["*--gym-reuse: attached to the Gym in *pool*; it stays up for the next run*"])
        assert rewards_by_task(again) == rewards_by_task(run)
        assert {0.0, 1.0} <= {r for rewards in rewards_by_task(run).values() for r in rewards}
        assert first.parseoutcomes() == second.parseoutcomes()
        assert len(list((again / "model_calls").glob("*.capture.jsonl"))) == 15  # its own captures, all of them
        check_run_folder(gym_cli, again, [example], 15, "mcqa_environment_server", 0, tools=False)
        (entry,) = [p for p in pool.iterdir() if p.is_dir()]
        state = json.loads((entry / "deployment.json").read_text())
        pids = [s["pid"] for s in state["endpoint"]["servers"] if s["pid"]]
        assert pids
        assert all(pid_alive(pid) for pid in pids)  # kept after both runs
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 60
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(pid) for pid in pids)
