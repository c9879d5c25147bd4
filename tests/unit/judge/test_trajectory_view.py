"""The trajectory view in a failed agentic trial's message: turns, tool calls, final answer; bounded and masked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_gym.core.masking import MAX_MESSAGE
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.judge.messages import MAX_VIEW_LINE, MAX_VIEW_LINES, failure_message, trajectory_view

MARKER = "sk-pytestgym-VIEW-7f3a9c11"
RECORD = "/runs/r1/rollouts.jsonl (_ng_task_index=3, _ng_rollout_index=1)"


@pytest.fixture(autouse=True)
def policy_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", MARKER)


def call(name: str, arguments: str, n: int = 0) -> list[dict[str, Any]]:
    return [
        {"type": "function_call", "name": name, "arguments": arguments, "call_id": f"c{n}"},
        {"type": "function_call_output", "call_id": f"c{n}", "output": json.dumps({"city": "sf", "n": n})},
    ]


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def answer(*items: dict[str, Any], turns: int | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"reward": 0.0, "response": {"output": list(items)}}
    if turns is not None:
        result["ng_trajectory"] = {"turns": [{}] * turns}
    return result


def test_the_view_lists_tool_calls_outputs_and_the_final_answer() -> None:
    view = trajectory_view(answer(*call("get_weather", '{"city": "sf"}'), message("Sunny."), turns=2), RECORD)
    assert view == [
        "  trajectory: 2 turns, 1 tool call:",
        '    tool call get_weather({"city": "sf"})',
        '    tool output: {"city": "sf", "n": 0}',
        "    assistant: Sunny.",
        f"  full record: {RECORD}",
    ]


def test_no_tool_calls_no_view() -> None:
    """One answer says everything: the verifier's fields already show it."""
    assert trajectory_view(answer(message("\\boxed{E}")), RECORD) == []
    assert trajectory_view({"reward": 0.0, "response": "not an object"}) == []
    assert trajectory_view(None) == []


def test_the_view_is_bounded_in_lines_and_characters_and_keeps_the_end() -> None:
    items = [item for n in range(40) for item in call("search", "q" * 10_000, n)]
    view = trajectory_view(answer(*items, message("final " + "z" * 5000)), RECORD)
    assert len(view) == MAX_VIEW_LINES + 2  # head, the lines, the record
    assert all(len(line) <= MAX_VIEW_LINE for line in view[:-1])
    assert view[0] == "  trajectory: 41 turns, 40 tool calls:"
    assert "more items" in "".join(view)
    assert view[-2].startswith("    assistant: final zzz")
    assert view[-2].endswith("...")
    assert view[1].startswith("    tool call search(qqq")


def test_the_view_is_masked() -> None:
    items = [*call("login", json.dumps({"api_key": "hunter2-secret", "k": MARKER})), message(f"done {MARKER}")]
    text = "\n".join(trajectory_view(answer(*items), RECORD))
    assert MARKER not in text
    assert MARKER[:8] not in text
    assert "hunter2" not in text
    assert "tool call login(" in text


def test_failure_message_carries_the_view_within_its_bound() -> None:
    items = [item for n in range(200) for item in call("t" * 500, "a" * 50_000, n)]
    outcome = TrialOutcome(
        nodeid="d.jsonl::abc[r0]", task_hash="abcdef123456" * 5, repeat=0, line=3, dataset="d.jsonl",
        reward=0.0, answer=answer(*items, message("no")),
    )  # fmt: skip
    text = failure_message(outcome, 1.0, "reward", RECORD)
    assert len(text) < MAX_MESSAGE
    assert "  trajectory: 201 turns, 200 tool calls:" in text
    assert text.endswith(f"  full record: {RECORD}")
