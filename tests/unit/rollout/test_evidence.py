"""The health checks one answer decides (Gym's codes), applied as each trial finishes."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gym.rollout.evidence import answer_checks


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
