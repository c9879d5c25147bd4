"""Rollout health as a gate: an answer whose evidence is broken (no completion tokens, a hollow turn, a failed
model call) makes its trial an error naming Gym's check at once; ``health_clean_rate`` and ``unhealthy_trials``
are gate metrics; without Gym's interpreter its end-of-run checks do not run and the run says why.

A stand-in Gym answers; Gym's own checks on a real run folder are tests/test_health_gym.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_gym.judge.gates import evaluate, parse_gate
from pytest_gym.judge.health import suite_health
from pytest_gym.judge.stats import suite_stats
from pytest_gym.rollout.evidence import answer_checks
from tests.helpers.standin import Request, StandinGym, reply, serving

AGENT = "fake_agent"


def response(text: str | None, output_tokens: int = 3, status: str = "completed", **extra: Any) -> dict[str, Any]:
    output = (
        []
        if text is None
        else [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]
    )
    usage = {"input_tokens": 5, "output_tokens": output_tokens, "total_tokens": 5 + output_tokens}
    return {"response": {"status": status, "output": output, "usage": usage, **extra}, "reward": 0.0}


@pytest.mark.parametrize(
    ("answer", "checks"),
    [
        (response("\\boxed{B}"), ()),
        (response("", output_tokens=0), ("model_call_zero_completion_tokens", "agent_turn_hollow")),
        (response("  \n", output_tokens=2), ("agent_turn_hollow",)),
        (response(None, output_tokens=1), ("agent_turn_hollow",)),
        (response("x", status="failed"), ("model_call_failed",)),
        (response("x", error={"code": "server_error"}), ("model_call_failed",)),
        ({"response": {"output": [{"type": "function_call", "name": "f", "arguments": "{}"}],
                       "usage": {"output_tokens": 4}}}, ()),
        ({"response": {"output": [{"type": "reasoning", "summary": [{"text": "thinking"}]}]}}, ()),
        ({"reward": 1.0}, ()),  # no Responses object: nothing this check can read
        ({"reward": 1.0, "response": "text"}, ()),
    ],
)  # fmt: skip
def test_the_checks_one_answer_decides(answer: dict[str, Any], checks: tuple[str, ...]) -> None:
    assert answer_checks(answer) == checks


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
    result = pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-repeats", "2",
        "--gym-gate", "unhealthy_trials<=0", "--gym-gate", "health_clean_rate>=0.99", "--gym-cli=/nonexistent/gym",
        "--gym-run-dir", "run", "--junitxml", "report.xml", "-p", "no:cacheprovider", "-p", "no:randomly", *xdist,
        timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=6, errors=2, failed=2)  # the two gates fail
    out = result.stdout.str()
    assert out.count("Gym infrastructure fault (unhealthy)") == 2
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
    result = pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-health-check", "off",
        "--gym-run-dir", "run", "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())["suites"]["data.jsonl"]
    assert "unhealthy_trials" not in summary
