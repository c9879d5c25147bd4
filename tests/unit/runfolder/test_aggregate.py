"""Gym's aggregate recomputed for a merged run folder refuses what Gym refuses. (Equal to Gym's own computation:
tests/gym/test_aggregate_equals_gyms.py.)"""

from __future__ import annotations

import pytest

from pytest_gym.runfolder.aggregate import aggregate_metrics


def test_aggregate_refuses_what_gym_refuses() -> None:
    twice = [{"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0}] * 2
    with pytest.raises(ValueError, match="two records for task 0 repeat 0"):
        aggregate_metrics(twice)
    assert aggregate_metrics([])["agent_metrics"] == {}
