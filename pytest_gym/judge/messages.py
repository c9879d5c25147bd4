"""The text of a trial's failure or error: what a reader needs to act, bounded and free of secrets.

Everything here comes from Gym (the verifier's fields, an error's text) and goes to a terminal and
a JUnit report, so every part is cleaned (:func:`~pytest_gym.core.masking.clean_text`: masked,
control characters dropped, bounded) and the whole message stays under ``MAX_MESSAGE``.
"""

from __future__ import annotations

from typing import Any

from pytest_gym.core.masking import MAX_FIELD, MAX_MESSAGE, Masker, clean_text, json_depth_exceeds
from pytest_gym.core.outcome import TrialOutcome

_SKIP_FIELDS = {"responses_create_params", "response", "mask_sample", "_ng_task_index", "_ng_rollout_index"}
_MAX_FIELDS = 8
_MAX_VALUE = 120
_MAX_NAME = 60


def diagnostics(answer: dict[str, Any] | None, reward_key: str) -> list[str]:
    """The verifier's short scalar fields (expected vs extracted answer, ...), truncated."""
    if not answer:
        return []
    lines = []
    for key, value in answer.items():
        if key in _SKIP_FIELDS or key == reward_key or isinstance(value, (dict, list)):
            continue
        if value is None and str(key).startswith("failure"):
            continue
        # Masked in full before it is cut: a key cut in half is no longer recognised.
        text = clean_text(repr(value), MAX_FIELD)
        if len(text) > _MAX_VALUE:
            text = text[: _MAX_VALUE - 3] + "..."
        lines.append(f"  {clean_text(str(key), _MAX_NAME)}: {text}")
        if len(lines) == _MAX_FIELDS:
            break
    return lines


def _bounded(message: str) -> str:
    return clean_text(message, MAX_MESSAGE)


def fault_message(outcome: TrialOutcome) -> str:
    return _bounded(
        f"Gym infrastructure fault ({clean_text(str(outcome.error_class), 100)}) for task {outcome.task_hash[:12]} "
        f"({outcome.dataset}:{outcome.line}, repeat {outcome.repeat}): {clean_text(str(outcome.error), MAX_FIELD)}"
    )


def failure_message(outcome: TrialOutcome, min_reward: float, reward_key: str) -> str:
    head = (
        f"reward {outcome.reward!r} < min_reward {float(min_reward)!r} for task {outcome.task_hash[:12]} "
        f"({outcome.dataset}:{outcome.line}, repeat {outcome.repeat})"
    )
    return _bounded("\n".join([head, *diagnostics(outcome.answer, reward_key)]))


def clean_outcome(outcome: TrialOutcome, masker: Masker | None = None) -> None:
    """Make a finished rollout safe to share, in place, before anything records or publishes it.

    The dispatcher hands every outcome to its listeners before it publishes it on the xdist claim board,
    so this, as the first listener, keeps secrets out of the claim files and the run folder alike: the
    answer is masked, the error masked and bounded, and an answer nested too deep to walk safely becomes
    a fault instead. ``masker`` is the run's (the known secrets read once); most answers cost one
    serialisation. The request (the user's own row) is masked by the run folder's writer, the only place
    it goes (the claim board publishes outcomes without it).
    """
    masker = masker or Masker()
    if outcome.answer is not None:
        answer, text = masker.record(outcome.answer)
        if json_depth_exceeds(outcome.answer, text=text):
            outcome.answer, outcome.reward = None, None
            outcome.error_class = "bad_body"
            outcome.error = "Gym's answer nests deeper than pytest-gym reads (64 levels); is the verifier sound?"
        else:
            outcome.answer = answer
    if outcome.error is not None:
        outcome.error = clean_text(outcome.error, MAX_FIELD, masker)
    if outcome.error_class is not None:
        outcome.error_class = clean_text(outcome.error_class, 100, masker)
    if outcome.agent is not None:
        outcome.agent = clean_text(outcome.agent, 200, masker)
