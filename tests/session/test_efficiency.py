"""Efficiency gates: what the trials cost (money, tokens, latency, retries, an agent's turns and tool calls),
plain and against the baseline's stored figures (``delta(...)``).

The pytester runs attach to the stand-in Gym of ``tests/helpers/standin.py``, whose ``/run`` answers
with the usage each test scripts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_gym.core.outcome import agent_steps, from_properties, usage_of
from pytest_gym.judge.baseline import load_baselines
from pytest_gym.judge.efficiency import evaluate_efficiency, figures
from pytest_gym.judge.gates import GateSyntaxError, parse_gate
from pytest_gym.judge.totals import TrialCost, suite_totals
from tests.helpers.standin import Request, StandinGym, serving

AGENT = "fake_agent"  # the stand-in Gym's agent

XDIST = [("-p", "no:xdist"), ("-n", "2")]


def _figures(**usage: Any) -> dict[str, float | None]:
    trials = [TrialCost(latency_s=1.0 + i, attempts=1 + (i == 0), turns=3, tool_calls=2, **usage) for i in range(4)]
    return figures(suite_totals(trials, price_in=2.0, price_out=10.0))


def test_figures_from_the_totals() -> None:
    found = _figures(input_tokens=100, output_tokens=50, total_tokens=150)
    assert found["mean_input_tokens"] == 100
    assert found["mean_output_tokens"] == 50
    assert found["mean_total_tokens"] == 150
    assert found["cost"] == pytest.approx(4 * (100 * 2.0 + 50 * 10.0) / 1e6)
    assert (found["p50_latency_s"], found["p90_latency_s"], found["p99_latency_s"]) == (2.0, 4.0, 4.0)
    assert found["retry_rate"] == 0.25  # one retry over four trials
    assert (found["mean_turns"], found["mean_tool_calls"]) == (3, 2)


@pytest.mark.parametrize(
    ("gate", "passed"),
    [
        ("mean_output_tokens <= 50", True),
        ("mean_output_tokens < 50", False),
        ("cost <= 0.003", True),
        ("cost <= 0.0027", False),
        ("p90_latency_s < 5", True),
        ("retry_rate <= 0.2", False),
        ("mean_turns <= 3", True),
        ("mean_tool_calls < 2", False),
    ],
)
def test_plain_efficiency_gates(gate: str, passed: bool) -> None:
    result = evaluate_efficiency(parse_gate(gate), _figures(input_tokens=100, output_tokens=50), None, "")
    assert result.passed is passed, result.reason
    if not passed:
        assert "required" in result.reason


def test_a_figure_that_cannot_be_measured_fails_saying_why() -> None:
    no_prices = figures(suite_totals([TrialCost(latency_s=1.0, input_tokens=5, output_tokens=5)]))
    result = evaluate_efficiency(parse_gate("cost <= 1"), no_prices, None, "")
    assert not result.passed
    assert "--gym-price-in" in result.reason
    no_usage = figures(suite_totals([TrialCost(latency_s=1.0)]))
    assert "usage" in evaluate_efficiency(parse_gate("mean_total_tokens <= 1"), no_usage, None, "").reason
    assert "turns" in evaluate_efficiency(parse_gate("mean_turns <= 9"), no_usage, None, "").reason


@pytest.mark.parametrize(
    ("gate", "now", "before", "passed", "value"),
    [
        ("delta(mean_output_tokens) <= 10%", 200.0, 100.0, False, 100.0),  # doubled
        ("delta(mean_output_tokens) <= 10%", 109.0, 100.0, True, 9.0),
        ("delta(mean_output_tokens) <= -5%", 90.0, 100.0, True, -10.0),  # an improvement required
        ("delta(p90_latency_s) <= 0.5", 2.4, 2.0, True, 0.4),  # absolute, in seconds
        ("delta(p90_latency_s) <= 0.5", 2.6, 2.0, False, 0.6),
        ("delta(cost) <= 10%", 0.0, 0.0, True, 0.0),
    ],
)
def test_delta_against_the_baseline(gate: str, now: float, before: float, passed: bool, value: float) -> None:
    metric = parse_gate(gate).metric
    result = evaluate_efficiency(parse_gate(gate), {metric: now}, {metric: before}, "no baseline")
    assert result.passed is passed, result.reason
    assert result.value == pytest.approx(value)
    assert "in the baseline" in result.reason


def test_delta_without_a_baseline_figure_fails() -> None:
    gate = parse_gate("delta(mean_output_tokens) <= 10%")
    assert evaluate_efficiency(gate, {"mean_output_tokens": 1.0}, None, "no baseline to compare").reason.endswith(
        "no baseline to compare"
    )
    older = evaluate_efficiency(gate, {"mean_output_tokens": 1.0}, {}, "")
    assert not older.passed
    assert "--gym-update-baseline" in older.reason
    from_zero = evaluate_efficiency(gate, {"mean_output_tokens": 1.0}, {"mean_output_tokens": 0.0}, "")
    assert not from_zero.passed
    assert from_zero.value is None


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("delta( mean_output_tokens ) <= 10 %", "delta(mean_output_tokens)<=10%"),
        ("p99_latency_s<30", "p99_latency_s<30"),
        ("delta(retry_rate) <= 0.1", "delta(retry_rate)<=0.1"),
    ],
)
def test_grammar_spells_efficiency_gates_canonically(text: str, label: str) -> None:
    gate = parse_gate(text)
    assert gate.label == label
    assert parse_gate(gate.label) == parse_gate(label)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("cost <= 10%", "write delta"),
        ("delta(mean_reward) <= 1", "unknown metric"),
        ("delta(cost) <= 10%%", "unexpected text"),
        ("mean_output_tokenz <= 1", "unknown metric"),
    ],
)
def test_grammar_refuses(text: str, problem: str) -> None:
    with pytest.raises(GateSyntaxError, match=problem):
        parse_gate(text)


AGENT_ANSWER = {
    "reward": 1.0,
    "response": {
        "usage": {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42},
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "search", "arguments": "{}"},
            {"type": "function_call", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "output": "a"},
            {"type": "function_call_output", "output": "b"},
            {"type": "function_call", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "output": "c"},
            {"type": "message", "role": "assistant", "content": "done"},
        ],
    },
}


def test_agent_steps_count_turns_and_tool_calls() -> None:
    # Three model calls: reasoning + two parallel calls, one more call, the final message.
    assert agent_steps(AGENT_ANSWER) == {"turns": 3, "tool_calls": 3}
    assert agent_steps({**AGENT_ANSWER, "ng_trajectory": {"turns": [{}, {}, {}, {}]}})["turns"] == 4
    assert agent_steps({"reward": 1.0}) == {}
    plain = {"response": {"output": [{"type": "message", "content": "B"}]}}
    assert agent_steps(plain) == {"turns": 1, "tool_calls": 0}
    assert usage_of(AGENT_ANSWER) == {
        "input_tokens": 30,
        "output_tokens": 12,
        "total_tokens": 42,
        "turns": 3,
        "tool_calls": 3,
    }


def test_steps_travel_in_the_trial_properties() -> None:
    from pytest_gym.core.outcome import TrialOutcome

    outcome = TrialOutcome("d::h[r0]", "h" * 64, 0, 1, "d", reward=1.0, tokens=usage_of(AGENT_ANSWER))
    back = from_properties("d::h[r0]", outcome.to_properties())
    assert back is not None
    assert back.tokens == outcome.tokens


# --- through pytest --------------------------------------------------------------------------------


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving() as server:
        yield server


def usage_answer(output_tokens: int, steps: bool = False) -> Any:
    def answer(_: Request) -> tuple[int, bytes]:
        data: dict[str, Any] = {
            "reward": 1.0,
            "response": {"usage": {"input_tokens": 100, "output_tokens": output_tokens}},
        }
        if steps:
            data["response"]["output"] = AGENT_ANSWER["response"]["output"]  # type: ignore[index]
        return 200, json.dumps(data).encode()

    return answer


def _run(pytester: pytest.Pytester, gym: StandinGym, run_dir: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", run_dir,
        "--gym-repeats", "2", "--gym-baseline", "base.json", "--gym-trajectories", "off",
        "-p", "no:cacheprovider", "-p", "no:randomly", *args,
    )  # fmt: skip


@pytest.mark.parametrize("xdist", XDIST)
def test_doubled_output_tokens_fail_the_delta_gate(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(5)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gym.routes["/run"] = usage_answer(40, steps=True)
    first = _run(pytester, gym, "run1", "--gym-update-baseline", *xdist)
    first.assert_outcomes(passed=10)
    stored = load_baselines(pytester.path / "base.json")
    assert stored is not None
    (suite,) = stored.suites.values()
    assert suite.suite.efficiency is not None
    assert suite.suite.efficiency["mean_output_tokens"] == 40
    assert suite.suite.efficiency["mean_tool_calls"] == 3

    gates = ("--gym-gate", "delta(mean_output_tokens) <= 10%", "--gym-gate", "mean_turns <= 3")
    same = _run(pytester, gym, "run2", *gates, *xdist)
    same.assert_outcomes(passed=13)  # 10 trials, 2 gates, the baseline check

    gym.routes["/run"] = usage_answer(80, steps=True)
    doubled = _run(pytester, gym, "run3", *gates, "--junitxml", "doubled.xml", *xdist)
    doubled.assert_outcomes(passed=12, failed=1)
    doubled.stdout.fnmatch_lines(["*gate delta(mean_output_tokens)<=10%: FAIL (*+100%*80 now, 40 in the baseline*"])
    summary = json.loads((pytester.path / "run3" / "pytest_gym_summary.json").read_text())
    (entry,) = summary["suites"].values()
    assert entry["gates"]["delta(mean_output_tokens)<=10%"]["value"] == pytest.approx(100.0)
    assert entry["efficiency"]["mean_output_tokens"] == 80
