"""What one trial is and what came of it: plain data, no pytest, no I/O.

A trial's outcome crosses from an xdist worker to the controller only as
``report.user_properties`` (builtins, serialised by xdist). ``to_properties`` and
``from_properties`` are the one codec for that; ``is_trial`` recognises a trial
by its properties, ``is_trial_nodeid`` by its node id where only ids are known.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_gym.core.dataset import Task
from pytest_gym.core.numbers import is_finite_number, is_int
from pytest_gym.core.tracing import trace_link


@dataclass(frozen=True)
class TrialSpec:
    """One rollout to run: a task, a repeat index, and where to send it."""

    nodeid: str
    task: Task
    task_index: int
    repeat: int
    agent: str | None
    min_reward: float = 1.0
    reward_key: str = "reward"
    xfail_low: bool = False
    #: --gym-trace-url: the template of a link to the trial's trace (``{trace_id}``).
    trace_url: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.task.hash, self.repeat)

    @property
    def rollout_id(self) -> str:
        """Gym's ``_ng_rollout_id``, the key of the trial's captured model calls: Gym's default key
        (``<task index>-<rollout index>``) repeats across the datasets of one run, and their
        trajectories would mix."""
        where = hashlib.sha256(self.nodeid.encode()).hexdigest()[:8]
        return f"{self.task.short_hash}-r{self.repeat}-{where}"


#: ``TrialOutcome`` fields that stay in this process: caches of work already done, not part of the outcome.
TRANSIENT = frozenset({"answer_text", "request_bytes"})


@dataclass
class TrialOutcome:
    """A finished rollout: a reward, or an infrastructure fault (never both)."""

    nodeid: str
    task_hash: str
    repeat: int
    line: int
    dataset: str
    reward: float | None = None
    answer: dict[str, Any] | None = None
    request: dict[str, Any] | None = None
    latency_s: float = 0.0
    attempts: int = 1
    error: str | None = None
    error_class: str | None = None
    http_status: int | None = None
    agent: str | None = None
    #: Usage (``USAGE_NAMES``): Gym's token counts, and an agent's turns and tool calls.
    tokens: dict[str, int] = field(default_factory=dict)
    reused: bool = False
    #: --gym-rescore: the reward is the current verifier's verdict on an earlier run's saved answer.
    rescored: bool = False
    #: The W3C trace id every ``/run`` of this trial carried (its ``traceparent``).
    trace_id: str | None = None
    #: Gym's health checks that found this trial's evidence broken (codes such as ``agent_turn_hollow``).
    health: tuple[str, ...] = ()
    #: Not run, and reported as skipped: why (``budget``, ``decided``: its task's verdict was,
    #: ``sequential``: its suite's gates were).
    skipped: str | None = None
    #: This process only, never serialised (``TRANSIENT``): the JSON the answer and the request were already
    #: turned into (the masking check, the POST), each with the object it is of, so that the run folder's writer
    #: does not serialise a large answer or row again; valid while ``answer``/``request`` is still that object.
    answer_text: tuple[dict[str, Any], str] | None = field(default=None, repr=False, compare=False)
    request_bytes: tuple[dict[str, Any], bytes] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def for_spec(cls, spec: TrialSpec, **fields: Any) -> TrialOutcome:
        """An outcome naming ``spec``'s trial, with ``fields`` filled in."""
        return cls(
            nodeid=spec.nodeid,
            task_hash=spec.task.hash,
            repeat=spec.repeat,
            line=spec.task.line,
            dataset=str(spec.task.path),
            **{"agent": spec.agent, **fields},
        )

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_properties(self, trace_url: str | None = None) -> list[tuple[str, object]]:
        """Builtins-only ``user_properties``: they travel through xdist and into JUnit (``trace_url``: the
        template of a link to the trial's trace)."""
        props: list[tuple[str, object]] = [
            (TRIAL_MARK, self.task_hash),
            ("gym_repeat", self.repeat),
            ("gym_line", self.line),
            ("gym_latency_s", round(self.latency_s, 4)),
            ("gym_attempts", self.attempts),
        ]
        if self.reward is not None:
            props.append(("gym_reward", self.reward))
        for name in USAGE_NAMES:
            if name in self.tokens:
                props.append((f"gym_{name}", self.tokens[name]))
        if self.error_class:
            props.append(("gym_error_class", self.error_class))
        if self.reused:
            props.append(("gym_reused", True))
        if self.rescored:
            props.append(("gym_rescored", True))
        if self.trace_id:
            props.append(("gym_trace_id", self.trace_id))
            link = trace_link(trace_url, self.trace_id)
            if link:
                props.append(("gym_trace_url", link))
        if self.health:
            props.append(("gym_health", ",".join(self.health)))
        if self.skipped:
            props.append(("gym_skipped", self.skipped))
        return props

    def to_json(self) -> dict[str, Any]:
        """A shallow dict of the fields (``answer`` and ``request`` are shared, not copied): for ``json.dumps``."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name not in TRANSIENT}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialOutcome:
        """The outcome ``to_json`` described (unknown keys are ignored, so older files still read)."""
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data and name not in TRANSIENT}
        known["tokens"] = dict(known.get("tokens") or {})
        known["health"] = tuple(str(code) for code in known.get("health") or ())
        if wrong := _wrong_fields(known):
            raise ValueError(f"not an outcome this plugin wrote: {', '.join(wrong)}")
        return cls(**known)


#: The types ``to_json`` writes, field by field (``true`` is no reward): built once, checked per outcome read back.
_FIELD_CHECKS: dict[str, Callable[[Any], bool]] = {
    "nodeid": lambda v: isinstance(v, str),
    "task_hash": lambda v: isinstance(v, str),
    "dataset": lambda v: isinstance(v, str),
    "repeat": lambda v: is_int(v) and v >= 0,
    "line": is_int,
    "attempts": is_int,
    "reward": lambda v: v is None or is_finite_number(v),
    "latency_s": is_finite_number,
    "http_status": lambda v: v is None or is_int(v),
    "answer": lambda v: v is None or isinstance(v, dict),
    "request": lambda v: v is None or isinstance(v, dict),
    "tokens": lambda v: all(isinstance(k, str) and is_int(n) for k, n in v.items()),
}


def _wrong_fields(known: dict[str, Any]) -> list[str]:
    """The fields of an outcome read back that do not have the types ``to_json`` writes."""
    return [name for name, ok in _FIELD_CHECKS.items() if name in known and not ok(known[name])]


#: The first property of every trial's reports; its presence marks a report as a trial's.
TRIAL_MARK = "gym_task_hash"
#: --gym-verdict task: a task's reports carry each of its trials' properties as one list under this name.
TRIALS_PROPERTY = "gym_trials"
#: The ``error_class`` of a trial another plugin ended before it had an outcome (pytest-timeout's, a fixture's).
INTERRUPTED = "interrupted"
#: The ``error_class`` of a trial the run's deadline (--gym-run-timeout) ended.
RUN_TIMEOUT = "run_timeout"
_TRIAL_NODEID = re.compile(r"::[0-9a-f]{12}(?:-[0-9A-Za-z_.@+-]+)?\[r\d+\]$")  # core.dataset.task_name
#: A trial's usage counts as ``tokens`` holds them: Gym's token counts, and the agent's turns and tool calls.
USAGE_NAMES = ("input_tokens", "output_tokens", "total_tokens", "turns", "tool_calls")


def is_trial_nodeid(nodeid: str) -> bool:
    """Whether a node id names a trial (``<dataset>::<hash12>[rN]``, ``<dataset>::<hash12>-<label>[rN]``): for
    places that know only ids."""
    return _TRIAL_NODEID.search(nodeid) is not None


def is_trial(properties: Iterable[tuple[str, object]]) -> bool:
    """A trial's reports, or a task's (``--gym-verdict task``) carrying its trials'."""
    return any(name in (TRIAL_MARK, TRIALS_PROPERTY) for name, _ in properties)


def trials_property(outcomes: Iterable[TrialOutcome]) -> tuple[str, list[list[list[object]]]]:
    """A task's report property carrying its trials (``--gym-verdict task``), as ``task_trials`` reads it back:
    builtins only, each trial's ``to_properties`` pairs as lists."""
    return TRIALS_PROPERTY, [[list(pair) for pair in outcome.to_properties()] for outcome in outcomes]


def task_trials(nodeid: str, properties: Iterable[tuple[str, object]]) -> list[TrialOutcome]:
    """The trials a task's reports carry (``--gym-verdict task``): each one's outcome, named ``<task>[rN]``."""
    found = []
    for name, value in properties:
        if name != TRIALS_PROPERTY or not isinstance(value, list):
            continue
        for entry in value:
            if not isinstance(entry, list):
                continue
            pairs = [(str(p[0]), p[1]) for p in entry if isinstance(p, (list, tuple)) and len(p) == 2]
            repeat = _int(dict(pairs).get("gym_repeat"), 0)
            outcome = from_properties(f"{nodeid}[r{repeat}]", pairs)
            if outcome is not None:
                found.append(outcome)
    return found


def _int(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def from_properties(nodeid: str, properties: Iterable[tuple[str, object]]) -> TrialOutcome | None:
    """The outcome ``to_properties`` described, or None when these are not a trial's properties.

    Values are checked, not trusted: properties may have been written by another version or by hand.
    """
    props = dict(properties)
    if TRIAL_MARK not in props:
        return None
    error_class = props.get("gym_error_class")
    tokens = {name: _int(props[f"gym_{name}"], 0) for name in USAGE_NAMES if f"gym_{name}" in props}
    return TrialOutcome(
        nodeid=nodeid,
        task_hash=str(props[TRIAL_MARK]),
        repeat=_int(props.get("gym_repeat"), 0),
        line=_int(props.get("gym_line"), 0),
        dataset=nodeid.split("::", 1)[0],
        reward=_float(props.get("gym_reward")),
        latency_s=_float(props.get("gym_latency_s")) or 0.0,
        attempts=_int(props.get("gym_attempts"), 1),
        error=str(error_class) if error_class else None,
        error_class=str(error_class) if error_class else None,
        tokens=tokens,
        reused=props.get("gym_reused") is True,
        rescored=props.get("gym_rescored") is True,
        trace_id=_trace_id(props.get("gym_trace_id")),
        health=_codes(props.get("gym_health")),
        skipped=str(props["gym_skipped"]) if props.get("gym_skipped") else None,
    )


def _trace_id(value: object) -> str | None:
    return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value) else None


def _codes(value: object) -> tuple[str, ...]:
    """Health-check codes of a ``gym_health`` property: identifiers only, a bounded number."""
    if not isinstance(value, str):
        return ()
    return tuple(code for code in value.split(",")[:32] if re.fullmatch(r"[a-z][a-z0-9_]{0,80}", code))


def token_usage(answer: dict[str, Any]) -> dict[str, int]:
    """The token counts of a Gym answer's ``response.usage`` (a fresh one or one read back from a run folder)."""
    response = answer.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return {}
    return {k: int(v) for k, v in usage.items() if k.endswith("tokens") and is_int(v)}


def agent_steps(answer: dict[str, Any]) -> dict[str, int]:
    """An agent's ``turns`` (model calls) and ``tool_calls``, from the answer's Responses ``output`` items.

    Gym's ``ng_trajectory`` turns when the answer has them; otherwise each run of model-made items (messages,
    tool calls, reasoning) between tool outputs is one turn. Empty when the answer has no output list.
    """
    response = answer.get("response")
    output = response.get("output") if isinstance(response, dict) else None
    if not isinstance(output, list):
        return {}
    kinds = [item.get("type") for item in output if isinstance(item, dict)]
    calls = sum(1 for kind in kinds if kind == "function_call")
    trajectory = answer.get("ng_trajectory")
    turns = trajectory.get("turns") if isinstance(trajectory, dict) else None
    if isinstance(turns, list):
        return {"turns": len(turns), "tool_calls": calls}
    count, in_turn = 0, False
    for kind in kinds:
        if kind == "function_call_output":
            in_turn = False
        elif not in_turn:
            count, in_turn = count + 1, True
    return {"turns": count, "tool_calls": calls}


def usage_of(answer: dict[str, Any]) -> dict[str, int]:
    """What ``TrialOutcome.tokens`` holds for an answer: its token counts and its agent steps."""
    return {**token_usage(answer), **agent_steps(answer)}
