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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_gym.core.dataset import Task
from pytest_gym.core.numbers import is_int


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
    tokens: dict[str, int] = field(default_factory=dict)
    reused: bool = False
    #: --gym-rescore: the reward is the current verifier's verdict on an earlier run's saved answer.
    rescored: bool = False

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

    def to_properties(self) -> list[tuple[str, object]]:
        """Builtins-only ``user_properties``: they travel through xdist and into JUnit."""
        props: list[tuple[str, object]] = [
            (TRIAL_MARK, self.task_hash),
            ("gym_repeat", self.repeat),
            ("gym_line", self.line),
            ("gym_latency_s", round(self.latency_s, 4)),
            ("gym_attempts", self.attempts),
        ]
        if self.reward is not None:
            props.append(("gym_reward", self.reward))
        for name in ("input_tokens", "output_tokens", "total_tokens"):
            if name in self.tokens:
                props.append((f"gym_{name}", self.tokens[name]))
        if self.error_class:
            props.append(("gym_error_class", self.error_class))
        if self.reused:
            props.append(("gym_reused", True))
        if self.rescored:
            props.append(("gym_rescored", True))
        return props

    def to_json(self) -> dict[str, Any]:
        """A shallow dict of the fields (``answer`` and ``request`` are shared, not copied): for ``json.dumps``."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialOutcome:
        """The outcome ``to_json`` described (unknown keys are ignored, so older files still read)."""
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        known["tokens"] = dict(known.get("tokens") or {})
        return cls(**known)


#: The first property of every trial's reports; its presence marks a report as a trial's.
TRIAL_MARK = "gym_task_hash"
_TRIAL_NODEID = re.compile(r"::[0-9a-f]{12}(?:-[0-9A-Za-z_.@+-]+)?\[r\d+\]$")  # core.dataset.task_name
_TOKENS = ("input_tokens", "output_tokens", "total_tokens")


def is_trial_nodeid(nodeid: str) -> bool:
    """Whether a node id names a trial (``<dataset>::<hash12>[rN]``, ``<dataset>::<hash12>-<label>[rN]``): for
    places that know only ids."""
    return _TRIAL_NODEID.search(nodeid) is not None


def is_trial(properties: Iterable[tuple[str, object]]) -> bool:
    return any(name == TRIAL_MARK for name, _ in properties)


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
    tokens = {name: _int(props[f"gym_{name}"], 0) for name in _TOKENS if f"gym_{name}" in props}
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
    )


def token_usage(answer: dict[str, Any]) -> dict[str, int]:
    """The token counts of a Gym answer's ``response.usage`` (a fresh one or one read back from a run folder)."""
    response = answer.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return {}
    return {k: int(v) for k, v in usage.items() if k.endswith("tokens") and is_int(v)}
