"""The health checks one ``/run`` answer decides, applied as each trial finishes, with Gym's codes.

Gym's health checks (``nemo_gym/health/checks.py``) read a rollout's trajectory at the end of a run; three of
them need nothing but the answer itself, so a trial whose evidence is broken is reported at once, as an error
(an infrastructure fault: its low reward says nothing about the model), naming the check:

- ``model_call_failed``: the model call failed (the Responses object's ``status`` is failed, error or
  cancelled, or it carries an ``error``);
- ``model_call_zero_completion_tokens``: the model produced no completion tokens (``usage.output_tokens`` 0);
- ``agent_turn_hollow``: the agent's turn has neither a message with text (or reasoning) nor a tool call.

An answer without a Responses object (a custom agent, a stand-in) has nothing to check here: Gym's checks at
the end decide for it. Gym's full checks run on the run folder at the end (``gym.healthcheck``).
"""

from __future__ import annotations

from typing import Any

FAILED_CALL = "model_call_failed"
ZERO_COMPLETION = "model_call_zero_completion_tokens"
HOLLOW_TURN = "agent_turn_hollow"
#: What each check means, for the error message.
MEANING = {
    FAILED_CALL: "the model call failed",
    ZERO_COMPLETION: "the model produced no completion tokens",
    HOLLOW_TURN: "the agent's turn has no message and no tool call",
}
_FAILED_STATUSES = frozenset({"failed", "error", "cancelled"})
_TOOL_CALLS = frozenset(
    {"function_call", "tool_call", "tool_use", "mcp_call", "file_search_call", "web_search_call", "computer_call",
     "image_generation_call", "code_interpreter_call", "local_shell_call", "custom_tool_call"}
)  # fmt: skip
_TEXT_KEYS = ("text", "content", "output_text", "refusal", "summary", "reasoning_content", "encrypted_content")


def _nonempty(value: Any, depth: int = 0) -> bool:
    """Whether a value holds some text (as Gym's checks read a turn: strings, lists of parts, text fields)."""
    if depth > 8 or value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list):
        return any(_nonempty(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return any(_nonempty(value.get(key), depth + 1) for key in _TEXT_KEYS)
    return False


def _has_substance(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    return item.get("type") in _TOOL_CALLS or bool(item.get("tool_calls")) or _nonempty(item)


def answer_checks(answer: Any) -> tuple[str, ...]:
    """The codes of the checks this answer fails (empty: healthy, or nothing to check)."""
    response = answer.get("response") if isinstance(answer, dict) else None
    if not isinstance(response, dict):
        return ()
    found = []
    if response.get("status") in _FAILED_STATUSES or response.get("error"):
        found.append(FAILED_CALL)
    usage = response.get("usage")
    completion = usage.get("output_tokens", usage.get("completion_tokens")) if isinstance(usage, dict) else None
    if type(completion) is int and completion == 0:
        found.append(ZERO_COMPLETION)
    output = response.get("output")
    if isinstance(output, list) and not any(_has_substance(item) for item in output):
        found.append(HOLLOW_TURN)
    return tuple(found)


def unhealthy_message(checks: tuple[str, ...]) -> str:
    """The error of a trial whose answer failed ``checks``."""
    named = "; ".join(f"{code} ({MEANING.get(code, 'see Gym')})" for code in checks)
    return (
        f"Gym's health check found this trial's evidence broken: {named}. Its reward says nothing about the "
        "model (an empty or failed model answer); check the model endpoint, or --gym-health-check off"
    )
