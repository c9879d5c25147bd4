"""A stored baseline run, and how the current run compares to it.

Tasks are keyed by the SHA-256 of their content, never by position, so reordering a dataset
or inserting rows leaves the comparison intact; ``line`` is kept only to point at the row.

A task "passed" when its mean reward reached min_reward. For 0/1 rewards and min_reward 1
that means every trial succeeded; for continuous rewards it is the same rule a single trial
is judged by, applied to the task's average.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator, model_validator

from pytest_gym.core.atomic import write_atomically
from pytest_gym.judge.stats import PairedDiff, SuiteStats, paired_difference

SCHEMA_VERSION = 1
_HEX = frozenset("0123456789abcdef")


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file and what is wrong."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"baseline {self.path}: {problem}")


class _Strict(BaseModel):
    # Unknown keys are rejected: in a hand-edited file they are typos, not data.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TaskRecord(_Strict):
    """One task as the baseline run measured it."""

    n: int = Field(ge=0)
    successes: int = Field(ge=0)
    mean_reward: float | None
    passed: bool
    errors: int = Field(default=0, ge=0)
    line: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> TaskRecord:
        if self.successes > self.n:
            raise ValueError(f"successes ({self.successes}) exceeds n ({self.n})")
        if (self.mean_reward is None) != (self.n == 0):
            raise ValueError("mean_reward must be null exactly when n is 0")
        return self


class SuiteRecord(_Strict):
    """Suite-level numbers of the baseline run (``SuiteStats.to_dict(per_task=False)``)."""

    tasks: int = Field(ge=0)
    trials: int = Field(ge=0)
    errors: int = Field(ge=0)
    error_rate: float = Field(ge=0, le=1)
    mean_reward: float | None
    ci_low: float | None
    ci_high: float | None
    min_reward: float
    pass_at: dict[int, float]
    pass_hat: dict[int, float]


class Baseline(_Strict):
    """Everything needed to judge a later run against this one."""

    schema_version: int
    created_at: datetime
    settings: dict[str, JsonValue]
    suite: SuiteRecord
    tasks: dict[str, TaskRecord]

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != SCHEMA_VERSION:
            raise ValueError(f"schema_version {v} is not supported (this pytest-gym reads {SCHEMA_VERSION})")
        return v

    @field_validator("tasks")
    @classmethod
    def _full_hashes(cls, v: dict[str, TaskRecord]) -> dict[str, TaskRecord]:
        for key in v:
            if len(key) != 64 or not set(key) <= _HEX:
                raise ValueError(f"task key {key[:80]!r} is not a full lowercase SHA-256 hex digest")
        return v

    @property
    def min_reward(self) -> float:
        return self.suite.min_reward


def baseline_from(
    stats: SuiteStats,
    settings: Mapping[str, Any],
    lines: Mapping[str, int],
    created_at: datetime | None = None,
) -> Baseline:
    """Snapshot a finished run; ``lines`` maps task hash to its dataset line, for messages only."""
    tasks = {
        h: TaskRecord(
            n=ts.n,
            successes=ts.successes,
            mean_reward=ts.mean_reward,
            passed=ts.passed,
            errors=ts.errors,
            line=lines.get(h),
        )
        for h, ts in stats.per_task.items()
    }
    return Baseline(
        schema_version=SCHEMA_VERSION,
        created_at=created_at or datetime.now(timezone.utc),
        settings=dict(settings),
        suite=SuiteRecord.model_validate(stats.to_dict(per_task=False)),
        tasks=tasks,
    )


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        problems.append(f"{where}: {err['msg']}")
    shown = problems[:10]
    if len(problems) > len(shown):
        shown.append(f"... and {len(problems) - len(shown)} more")
    return "invalid content:\n  " + "\n  ".join(shown)


def load_baseline(path: Path | str) -> Baseline | None:
    """The stored baseline, or None when there is none yet; anything unusable raises BaselineError."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BaselineError(path, f"is not valid JSON ({exc}); delete it or record a new baseline") from None
    if not isinstance(data, dict):
        raise BaselineError(path, f"expected a JSON object, got {type(data).__name__}")
    try:
        return Baseline.model_validate(data)
    except ValidationError as exc:
        raise BaselineError(path, _describe(exc)) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def write_baseline(path: Path | str, baseline: Baseline) -> None:
    """Write atomically (temp file in the same directory, then os.replace).

    An interrupted run or two xdist workers racing must never leave a half-written baseline
    that fails the next run.
    """
    text = json.dumps(baseline.model_dump(mode="json"), indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_atomically(Path(path), text.encode("utf-8"))


@dataclass(frozen=True)
class Comparison:
    """How the current run differs from the baseline, task by task and on average.

    Task lists are ordered by the baseline's dataset line, then hash. A task whose current
    trials all errored has no verdict and is in neither ``new_failures`` nor ``fixed``.
    """

    new_failures: list[str]
    fixed: list[str]
    unused: list[str]
    new_tasks: list[str]
    paired: PairedDiff
    max_regression: float
    settings_mismatch: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """A drop that is both real (95% CI of the paired change below 0) and larger than allowed."""
        return (
            self.paired.significant_drop
            and self.paired.mean_delta is not None
            and -self.paired.mean_delta > self.max_regression
        )


def _json_normal(value: Any) -> Any:
    """Current settings as they would read back from the file (tuples become lists, ...)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return repr(value)


def _settings_mismatch(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Keys set differently, or set on one side only; values compared as JSON would store them."""

    def read(settings: Mapping[str, Any], key: str) -> tuple[bool, Any]:
        return (key in settings, _json_normal(settings[key]) if key in settings else None)

    return [k for k in sorted(set(stored) | set(current)) if read(stored, k) != read(current, k)]


def compare(
    baseline: Baseline,
    stats: SuiteStats,
    max_regression: float | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Comparison:
    """Compare the selected tasks of this run to the baseline.

    The caller passes only the tasks it selected, so ``-k`` narrowing shows up as ``unused``
    rather than as failures. ``settings`` are the current run's; keys whose values differ
    from the baseline's (or exist on one side only) land in ``settings_mismatch``, since a
    change of model or repeats explains a difference better than a regression does.
    """
    limit = 0.0 if max_regression is None else float(max_regression)
    if not math.isfinite(limit) or limit < 0:
        raise ValueError(f"max_regression must be a finite number >= 0, got {max_regression!r}")

    def order(h: str) -> tuple[int, str]:
        record = baseline.tasks.get(h)
        line = record.line if record is not None and record.line is not None else 2**63
        return (line, h)

    shared = [h for h in stats.per_task if h in baseline.tasks]
    measured = [h for h in shared if stats.per_task[h].n > 0 and baseline.tasks[h].n > 0]
    new_failures = [h for h in measured if baseline.tasks[h].passed and not stats.per_task[h].passed]
    fixed = [h for h in measured if not baseline.tasks[h].passed and stats.per_task[h].passed]
    unused = [h for h in baseline.tasks if h not in stats.per_task]
    new_tasks = [h for h in stats.per_task if h not in baseline.tasks]

    before = {h: baseline.tasks[h].mean_reward for h in measured}
    after = {h: stats.per_task[h].mean_reward for h in measured}
    paired = paired_difference(
        {h: v for h, v in before.items() if v is not None},
        {h: v for h, v in after.items() if v is not None},
    )
    return Comparison(
        new_failures=sorted(new_failures, key=order),
        fixed=sorted(fixed, key=order),
        unused=sorted(unused, key=order),
        new_tasks=sorted(new_tasks),
        paired=paired,
        max_regression=limit,
        settings_mismatch=[] if settings is None else _settings_mismatch(baseline.settings, settings),
    )
