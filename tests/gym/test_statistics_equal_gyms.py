"""pytest-gym's pass@k and mean reward equal NeMo Gym's own implementation, run in Gym's interpreter (binary
rewards; on continuous ones Gym diverges as documented)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.judge.stats import suite_stats
from tests.helpers.paths import ROOT

# Binary rewards, where Gym's pass@k is the same estimator; some tasks with fewer repeats.
GYM_REWARD_SETS: list[list[list[float]]] = [
    [[1, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]],
    [[0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0]],
    [[1, 0, 1, 0, 1], [0, 0, 0, 1, 0], [1, 1, 1, 1, 0]],
    [[1, 0, 1], [0, 1], [1, 1, 1, 0]],  # unequal repeats
]


# A continuous reward: Gym switches to max(rewards[:k]) for that task, we keep the estimator.
GYM_CONTINUOUS_SET: list[list[float]] = [[0.5, 1.0, 0.0]]
_GYM_SCRIPT = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from nemo_gym.reward_profile import compute_aggregate_metrics, compute_pass_majority_metrics

out = []
for reward_set in json.load(sys.stdin):
    tasks = [
        [{"reward": r, "_ng_task_index": t, "_ng_rollout_index": i} for i, r in enumerate(rewards)]
        for t, rewards in enumerate(reward_set)
    ]
    metrics = compute_pass_majority_metrics(tasks)[0]
    aggregate = compute_aggregate_metrics([r for task in tasks for r in task])
    metrics["mean/reward"] = aggregate.agent_metrics["mean/reward"]
    out.append({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
print(json.dumps(out))
"""


def _gym_python() -> Path | None:
    configured = os.environ.get("PYTEST_GYM_PYTHON")
    candidates = [Path(configured)] if configured else []
    candidates.append(ROOT / ".venvs" / "gym" / "bin" / "python")
    return next((p for p in candidates if p.exists()), None)


@pytest.fixture(scope="module")
def gym_metrics() -> list[dict[str, float]]:
    python = _gym_python()
    if python is None:
        message = "no NeMo Gym interpreter: set PYTEST_GYM_PYTHON or create .venvs/gym"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run(
        [str(python), "-c", _GYM_SCRIPT],
        input=json.dumps([*GYM_REWARD_SETS, GYM_CONTINUOUS_SET]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("index", range(len(GYM_REWARD_SETS)))
def test_matches_gym_pass_at_k_and_mean_reward(gym_metrics: list[dict[str, float]], index: int) -> None:
    reward_set = GYM_REWARD_SETS[index]
    gym = gym_metrics[index]
    ours = suite_stats({f"t{i}": rewards for i, rewards in enumerate(reward_set)}, min_reward=1.0)
    assert ours.max_k == min(len(r) for r in reward_set)
    for k, value in ours.pass_at.items():
        assert 100.0 * value == pytest.approx(gym[f"pass@{k}/accuracy"], rel=1e-12, abs=1e-12)
    assert ours.mean_reward == pytest.approx(gym["mean/reward"], rel=1e-12)
    if len({len(r) for r in reward_set}) == 1:
        assert ours.mean_reward is not None
        n = len(reward_set[0])
        assert 100.0 * ours.mean_reward == pytest.approx(gym[f"pass@1[avg-of-{n}]/accuracy"], rel=1e-12)


def test_gym_diverges_on_continuous_rewards_as_documented(gym_metrics: list[dict[str, float]]) -> None:
    gym = gym_metrics[len(GYM_REWARD_SETS)]
    ours = suite_stats({"t": GYM_CONTINUOUS_SET[0]}, min_reward=1.0)
    assert gym["pass@1/accuracy"] == pytest.approx(50.0)  # max of the first reward, 0.5
    assert gym["pass@2/accuracy"] == pytest.approx(100.0)  # max(0.5, 1.0)
    assert ours.pass_at[1] == pytest.approx(1 / 3)  # one of three trials reaches 1.0
    assert ours.mean_reward == pytest.approx(gym["mean/reward"])
