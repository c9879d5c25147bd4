"""The text of a trial's failure or error: what a reader needs to act, bounded and free of secrets."""

from __future__ import annotations

from typing import Any

from pytest_gym.core.outcome import TrialOutcome

_SKIP_FIELDS = {"responses_create_params", "response", "mask_sample", "_ng_task_index", "_ng_rollout_index"}
_MAX_FIELDS = 8
_MAX_VALUE = 120


def diagnostics(answer: dict[str, Any] | None, reward_key: str) -> list[str]:
    """The verifier's short scalar fields (expected vs extracted answer, ...), truncated."""
    if not answer:
        return []
    lines = []
    for key, value in answer.items():
        if key in _SKIP_FIELDS or key == reward_key or isinstance(value, (dict, list)):
            continue
        if value is None and key.startswith("failure"):
            continue
        text = repr(value)
        if len(text) > _MAX_VALUE:
            text = text[: _MAX_VALUE - 3] + "..."
        lines.append(f"  {key}: {text}")
        if len(lines) == _MAX_FIELDS:
            break
    return lines


def fault_message(outcome: TrialOutcome) -> str:
    return (
        f"Gym infrastructure fault ({outcome.error_class}) for task {outcome.task_hash[:12]} "
        f"({outcome.dataset}:{outcome.line}, repeat {outcome.repeat}): {outcome.error}"
    )


def failure_message(outcome: TrialOutcome, min_reward: float, reward_key: str) -> str:
    head = (
        f"reward {outcome.reward!r} < min_reward {float(min_reward)!r} for task {outcome.task_hash[:12]} "
        f"({outcome.dataset}:{outcome.line}, repeat {outcome.repeat})"
    )
    return "\n".join([head, *diagnostics(outcome.answer, reward_key)])
