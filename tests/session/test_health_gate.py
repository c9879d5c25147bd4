"""Rollout health as a gate: an answer whose evidence is broken (no completion tokens, a hollow turn, a failed
model call) makes its trial an error naming Gym's check at once; ``health_clean_rate`` and ``unhealthy_trials``
are gate metrics; without Gym's interpreter its end-of-run checks do not run and the run says why.

A stand-in Gym answers; Gym's own checks on a real run folder are tests/gym/test_health.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.standin import Request, StandinGym, reply, serving

AGENT = "fake_agent"


def response(text: str, output_tokens: int = 3) -> dict[str, Any]:
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
    usage = {"input_tokens": 5, "output_tokens": output_tokens, "total_tokens": 5 + output_tokens}
    return {"response": {"status": "completed", "output": output, "usage": usage}, "reward": 0.0}


class EmptyForSome:
    """/run: an empty answer (no text, no completion tokens) for rows whose prompt holds "broken"."""

    def __call__(self, request: Request) -> Any:
        body = request.json()
        text = json.dumps(body["responses_create_params"])
        if "broken" in text:
            return reply(response("", output_tokens=0))
        return reply({**response("\\boxed{B}"), "reward": 1.0})


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        server.routes["/run"] = EmptyForSome()
        yield server


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_broken_answers_are_errors_naming_the_check_and_fail_the_health_gate(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    prompts = ["fine 1", "broken 2", "fine 3", "fine 4"]
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": p}]}} for p in prompts]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-repeats", "2",
        "--gym-gate", "unhealthy_trials<=0", "--gym-gate", "health_clean_rate>=0.99", "--gym-cli=/nonexistent/gym",
        "--gym-run-dir", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider", "-p", "no:randomly", *xdist,
    )  # fmt: skip
    result.assert_outcomes(passed=6, errors=2, failed=2)  # the two gates fail
    out = result.stdout.str()
    # The errors' section: with CI set, pytest's short summary repeats each message whole.
    errors = out.split("short test summary info")[0]
    assert errors.count("Gym infrastructure fault (unhealthy)") == 2
    assert "model_call_zero_completion_tokens (the model produced no completion tokens)" in out
    assert "agent_turn_hollow" in out
    assert "Gym's health checks did not run: Gym's interpreter was not found beside '/nonexistent/gym'" in out
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())["suites"]["data.jsonl"]
    assert summary["unhealthy_trials"] == 2
    assert summary["health_unobserved"] == 6
    assert summary["health_checks"] == {"agent_turn_hollow": 2, "model_call_zero_completion_tokens": 2}
    assert summary.get("health_clean_rate") is None  # Gym's own checks did not run: nothing is known clean
    assert summary["gates"]["unhealthy_trials<=0"]["passed"] is False
    assert "did not run" in summary["gates"]["health_clean_rate>=0.99"]["reason"]
    failures = [
        json.loads(line) for line in (pytester.path / "run" / "rollouts_failures.jsonl").read_text().splitlines()
    ]
    assert [f["_ng_failure_type"] for f in failures] == ["unhealthy", "unhealthy"]
    assert all(f["_pytest_gym_health"] == ["model_call_zero_completion_tokens", "agent_turn_hollow"] for f in failures)
    junit = (pytester.path / "report.xml").read_text()
    assert junit.count("[[PROPERTY|gym_health=model_call_zero_completion_tokens,agent_turn_hollow]]") == 2


def test_health_checks_off_keeps_broken_answers_as_rewards(pytester: pytest.Pytester, gym: StandinGym) -> None:
    pytester.makeini("[pytest]\n")
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": p}]}} for p in ("fine", "broken")]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-health-check", "off",
        "--gym-run-dir", "run", "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())["suites"]["data.jsonl"]
    assert "unhealthy_trials" not in summary
