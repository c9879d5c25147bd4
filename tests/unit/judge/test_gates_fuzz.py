"""Fuzzing the gate parser users feed directly: every expression is a gate or a clear GateSyntaxError."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gym.judge.gates import GateSyntaxError, parse_gate


@settings(max_examples=500)
@given(st.text(max_size=60))
def test_gate_parser_accepts_or_explains(text: str) -> None:
    try:
        gate = parse_gate(text)
    except GateSyntaxError as exc:
        assert "pass@K" in str(exc)
    else:
        assert parse_gate(gate.label) == gate or parse_gate(gate.label).label == gate.label


@given(
    st.sampled_from(["mean_reward", "pass@3", "pass^2", "error_rate", "ci_low(mean_reward)"]),
    st.sampled_from([">=", ">", "<=", "<"]),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_gate_numbers_nan_and_inf_are_refused(metric: str, op: str, number: float) -> None:
    text = f"{metric} {op} {number}"
    try:
        gate = parse_gate(text)
    except GateSyntaxError:
        assert number != number or number in (float("inf"), float("-inf")) or "e" in repr(number)
    else:
        assert gate.threshold == number
