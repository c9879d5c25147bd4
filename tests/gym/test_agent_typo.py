"""An agent Gym does not serve stops the run once Gym's head answers, before any rollout, with "did you mean"
(issue 24 item 8: a typo used to cost one "Gym infrastructure fault" per trial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.realgym import RealGym, attach


def test_a_misspelled_agent_stops_the_run_before_any_rollout(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    result = pytester.runpytest(*attach(gym, "--gym-repeats", "2"), "--gym-agent", "mcqa_simpel_agent")
    result.assert_outcomes(errors=1)  # the first trial says why; the other nine do not run
    result.stdout.fnmatch_lines(
        [
            "*agent 'mcqa_simpel_agent' (--gym-agent, or a suite file's agent:) is not served by this Gym "
            "deployment: did you mean 'mcqa_simple_agent'? its agents: *mcqa_simple_agent*. No trial was run.*",
            "*Interrupted: *",
        ]
    )
    assert gym.policy_calls() == 0
