"""The gate metrics health_clean_rate and unhealthy_trials: measured from Gym's verdicts, failed saying why
when nothing was checked or the checks were off, measured even when no trial produced a reward."""

from __future__ import annotations

import pytest

from pytest_gym.judge.gates import evaluate, parse_gate
from pytest_gym.judge.health import suite_health
from pytest_gym.judge.stats import suite_stats


def test_health_gates() -> None:
    stats = suite_stats({"a": [1.0], "b": [1.0]}, 1.0, {"c": 1})
    health = suite_health([("healthy", ()), ("healthy", ()), ("unhealthy", ("agent_turn_hollow",)), (None, ())])
    assert (health.healthy, health.unhealthy, health.unobserved) == (2, 1, 1)
    assert health.by_check == {"agent_turn_hollow": 1}
    clean = evaluate(parse_gate("health_clean_rate>=0.99"), stats, health=health)
    assert not clean.passed
    assert clean.value == pytest.approx(2 / 3)
    assert evaluate(parse_gate("unhealthy_trials<=1"), stats, health=health).passed
    assert not evaluate(parse_gate("unhealthy_trials<1"), stats, health=health).passed
    unchecked = evaluate(parse_gate("health_clean_rate>=0.5"), stats, health=suite_health([(None, ())] * 3))
    assert not unchecked.passed
    assert "no trial's evidence was checked (3 unobserved)" in unchecked.reason
    off = evaluate(parse_gate("health_clean_rate>=0.5"), stats, health=None)
    assert not off.passed
    assert "--gym-health-check off" in off.reason
    # every trial errored on its answer: no reward anywhere, the health gates are still measured
    broken = suite_health([("unhealthy", ("agent_turn_hollow",))] * 2)
    no_rewards = suite_stats({"a": []}, 1.0, {"a": 2})
    assert evaluate(parse_gate("health_clean_rate>=0.99"), no_rewards, health=broken).value == 0.0
