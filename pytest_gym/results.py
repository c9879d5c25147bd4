"""What one trial is and what came of it: plain data, no pytest, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_gym.dataset import Task


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

    def properties(self) -> list[tuple[str, object]]:
        """Builtins-only ``user_properties``: they travel through xdist and into JUnit."""
        props: list[tuple[str, object]] = [
            ("gym_task_hash", self.task_hash),
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
