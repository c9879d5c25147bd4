"""The text of a trial's failure or error: what a reader needs to act, bounded and free of secrets.

Everything here comes from Gym (the verifier's fields, an error's text) and goes to a terminal and
a JUnit report, so every part is cleaned (:func:`~pytest_gym.core.masking.clean_text`: masked,
control characters dropped, bounded) and the whole message stays under ``MAX_MESSAGE``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pytest_gym.core.answers import final_text
from pytest_gym.core.masking import MAX_FIELD, MAX_MESSAGE, Masker, clean_text, json_depth_exceeds
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.core.tracing import trace_link

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


#: The trajectory view of a failed agentic trial: at most this many lines, each at most this long.
MAX_VIEW_LINES = 12
MAX_VIEW_LINE = 160


def _short(value: Any, limit: int = MAX_VIEW_LINE) -> str:
    """One line of text: masked in full, then whitespace folded and cut to ``limit``."""
    text = " ".join(clean_text(value if isinstance(value, str) else json.dumps(value, default=str)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else item.get("summary")
    if not isinstance(parts, list):
        return ""
    return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def trajectory_view(answer: dict[str, Any] | None, record: str | None = None) -> list[str]:
    """What the agent did, for a failure message: its turns, tool calls and final answer, bounded.

    Read from the answer's Responses object (``response.output``: every item of every turn) and, when
    Gym's ``ng_trajectory`` is there, its turn count. Empty for a trial without tool calls (one answer
    says all there is: the diagnostics show it). ``record`` says where the whole record is.
    """
    response = (answer or {}).get("response")
    output = response.get("output") if isinstance(response, dict) else None
    items = [item for item in output if isinstance(item, dict)] if isinstance(output, list) else []
    calls = [item for item in items if item.get("type") == "function_call"]
    if not calls:
        return []
    trajectory = (answer or {}).get("ng_trajectory")
    turns = trajectory.get("turns") if isinstance(trajectory, dict) else None
    turn_count = (
        len(turns) if isinstance(turns, list) else sum(1 for i in items if i.get("type") == "message") + len(calls)
    )
    lines = []
    text: Any
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            prefix, text = "    tool call ", f"{_short(item.get('name'), 60)}({_short(item.get('arguments'), 10_000)})"
        elif kind == "function_call_output":
            prefix, text = "    tool output: ", item.get("output")
        elif kind == "message":
            prefix, text = f"    {_short(item.get('role') or 'assistant', 20)}: ", _item_text(item)
        elif kind == "reasoning":
            prefix, text = "    reasoning: ", _item_text(item)
        else:
            continue
        lines.append(prefix + _short(text, MAX_VIEW_LINE - len(prefix)))
    if len(lines) > MAX_VIEW_LINES:  # the start and the end (the final answer) matter most
        keep = MAX_VIEW_LINES - 1
        lines = [
            *lines[: keep // 2],
            f"    ... {len(lines) - keep} more items ...",
            *lines[len(lines) - (keep - keep // 2) :],
        ]
    head = f"  trajectory: {turn_count} turn{'s' * (turn_count != 1)}, {len(calls)} tool call{'s' * (len(calls) != 1)}"
    tail = [f"  full record: {_short(record, 400)}"] if record else []
    return [head + ":", *lines, *tail]


#: Verifier fields that say what the model answered (mcqa's ``extracted_answer``, ``parsed_answer``, ...).
_ANSWER_FIELD = re.compile(r"extract|parsed|predict|model_answer|generated|model_output|response_text|final_answer")
#: The final answer in a failure message: at most this many characters.
MAX_ANSWER = 300


def answer_line(answer: dict[str, Any] | None) -> list[str]:
    """``final answer: '...'`` when the verifier's fields do not say what the model answered (a verifier that
    returns only a reward, as example_single_tool_call's): masked, on one line, bounded."""
    if not answer:
        return []
    for key, value in answer.items():
        if _ANSWER_FIELD.search(str(key).lower()) and value not in (None, "", [], {}):
            return []
    text = final_text(answer)
    if not text.strip():
        return ["  final answer: (no text: the model's answer had no message)"]
    return [f"  final answer: {_short(text, MAX_ANSWER)}"]


def _bounded(message: str) -> str:
    return clean_text(message, MAX_MESSAGE)


def _trace(outcome: TrialOutcome, trace_url: str | None) -> list[str]:
    link = trace_link(trace_url, outcome.trace_id)
    return [f"  trace: {link}"] if link else []


def fault_message(outcome: TrialOutcome, trace_url: str | None = None) -> str:
    """An infrastructure fault (``trace_url``: the template of a link to the trial's trace)."""
    head = (
        f"Gym infrastructure fault ({clean_text(str(outcome.error_class), 100)}) for task {outcome.task_hash[:12]} "
        f"({outcome.dataset}:{outcome.line}, repeat {outcome.repeat}): {clean_text(str(outcome.error), MAX_FIELD)}"
    )
    trace = _trace(outcome, trace_url)  # before the cut: the link survives a long error
    return _bounded("\n".join([head[: MAX_MESSAGE - 600], *trace]))


def failure_message(
    outcome: TrialOutcome, min_reward: float, reward_key: str, record: str | None = None, trace_url: str | None = None
) -> str:
    """Why a trial failed; with tool calls, also what the agent did and where its ``record`` is."""
    head = (
        f"reward {outcome.reward!r} < min_reward {float(min_reward)!r} for task {outcome.task_hash[:12]} "
        f"({outcome.dataset}:{outcome.line}, repeat {outcome.repeat})"
    )
    view = trajectory_view(outcome.answer, record)
    said = [] if view else answer_line(outcome.answer)  # the view ends with the final answer
    return _bounded(
        "\n".join([head, *_trace(outcome, trace_url), *diagnostics(outcome.answer, reward_key), *said, *view])
    )


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
            if text is not None:  # needed no masking: it is the answer's JSON, which the run folder's record reuses
                outcome.answer_text = (answer, text)
    if outcome.error is not None:
        outcome.error = clean_text(outcome.error, MAX_FIELD, masker)
    if outcome.error_class is not None:
        outcome.error_class = clean_text(outcome.error_class, 100, masker)
    if outcome.agent is not None:
        outcome.agent = clean_text(outcome.agent, 200, masker)
