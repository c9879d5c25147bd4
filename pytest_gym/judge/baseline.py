"""Stored baselines, one per suite in one file, and how the current run compares to its suite's.

Tasks are keyed by the SHA-256 of their content, never by position, so reordering a dataset
or inserting rows leaves the comparison intact; ``line`` is kept only to point at the row.

A task passes by the run's rule (``--gym-task-pass``: all its trials reach min_reward, more than
half, or any); the baseline's tasks are judged again by the current rule from their counts, so a
new failure is a change of the task, not of the rule.

The file (``schema_version`` 2) holds each suite under its own key, so one ``--gym-baseline``
serves several suites and updating one leaves the others as they were. A version-1 file (one
suite, unnamed) still reads: it stands for the suite that shares tasks with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.locks import locked
from pytest_gym.judge.paired import ALPHA, PairedTest, Rule, flip, min_pairs, paired_test, passes_by_count
from pytest_gym.judge.stats import SuiteStats, suite_stats

SCHEMA_VERSION = 2
#: Versions this pytest-gym reads: 1 (one unnamed suite), 2 (suites by name).
READABLE_VERSIONS = (1, 2)
_HEX = frozenset("0123456789abcdef")
_SHOW = 5


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file and what is wrong."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"baseline {self.path}: {problem}")


class _Strict(BaseModel):
    # Unknown keys are rejected: in a hand-edited file they are typos, not data. Numbers and flags are strict
    # (``true`` is no count of 1 or reward of 1.0, "0.5" no reward): a regression gate must not judge against them.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)


class TaskRecord(_Strict):
    """One task as the baseline run measured it."""

    n: StrictInt = Field(ge=0)
    successes: StrictInt = Field(ge=0)
    mean_reward: StrictFloat | None
    passed: StrictBool
    errors: StrictInt = Field(default=0, ge=0)
    line: StrictInt | None = Field(default=None, ge=1)
    #: Each trial's reward in trial order (errored trials left out); None in files written before it was kept.
    rewards: list[StrictFloat] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TaskRecord:
        if self.successes > self.n:
            raise ValueError(f"successes ({self.successes}) exceeds n ({self.n})")
        if (self.mean_reward is None) != (self.n == 0):
            raise ValueError("mean_reward must be null exactly when n is 0")
        if self.rewards is not None and len(self.rewards) != self.n:
            raise ValueError(f"rewards holds {len(self.rewards)} values for n = {self.n} trials")
        return self


class SuiteRecord(_Strict):
    """Suite-level numbers of the baseline run (``SuiteStats.to_dict(per_task=False)``)."""

    tasks: StrictInt = Field(ge=0)
    trials: StrictInt = Field(ge=0)
    errors: StrictInt = Field(ge=0)
    error_rate: StrictFloat = Field(ge=0, le=1)
    mean_reward: StrictFloat | None
    ci_low: StrictFloat | None
    ci_high: StrictFloat | None
    min_reward: StrictFloat
    pass_at: dict[int, StrictFloat]
    pass_hat: dict[int, StrictFloat]
    flaky_rate: StrictFloat | None = Field(default=None, ge=0, le=1)
    #: What the trials cost (``judge.efficiency.figures``), for ``delta(...)`` gates; files written before lack it.
    efficiency: dict[str, StrictFloat | None] | None = None


class Baseline(_Strict):
    """One suite's stored run: everything needed to judge a later run of that suite against it."""

    created_at: datetime
    settings: dict[str, JsonValue]
    suite: SuiteRecord
    tasks: dict[str, TaskRecord]
    #: The run folder of the baseline run (``--gym-baseline-run`` when it was written; from the rootdir, or absolute):
    #: later runs compare their answers with it when they name no other.
    run: str | None = None

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


class BaselineFile(_Strict):
    """The version-2 file: every suite's baseline under the suite's name (the path part of its node ids)."""

    schema_version: int
    suites: dict[str, Baseline]


@dataclass
class StoredBaselines:
    """What a baseline file holds; ``legacy`` is a version-1 file's one baseline (its suite unnamed)."""

    path: Path
    suites: dict[str, Baseline] = field(default_factory=dict)
    legacy: Baseline | None = None

    def for_suite(self, suite: str, task_hashes: set[str] | None = None) -> Baseline | None:
        """The suite's baseline; a version-1 one stands for a suite sharing a task with it (or any, without hashes)."""
        if suite in self.suites:
            return self.suites[suite]
        legacy = self.legacy
        if legacy is not None and (task_hashes is None or not task_hashes.isdisjoint(legacy.tasks)):
            return legacy
        return None


def baseline_from(
    stats: SuiteStats,
    settings: Mapping[str, Any],
    lines: Mapping[str, int],
    created_at: datetime | None = None,
    efficiency: Mapping[str, float | None] | None = None,
) -> Baseline:
    """Snapshot a finished run; ``lines`` maps task hash to its dataset line, for messages only;
    ``efficiency`` is what its trials cost (``judge.efficiency.figures``).

    Each task keeps its rewards in trial order (``stats.rewards``), so a later run with other repeats
    is compared on the trials both have.
    """
    tasks = {
        h: TaskRecord(
            n=ts.n,
            successes=ts.successes,
            mean_reward=ts.mean_reward,
            passed=ts.passed,
            errors=ts.errors,
            line=lines.get(h),
            rewards=list(stats.rewards.get(h, ())),
        )
        for h, ts in stats.per_task.items()
    }
    return Baseline(
        created_at=created_at or datetime.now(timezone.utc),
        settings=dict(settings),
        suite=SuiteRecord.model_validate(
            {**stats.to_dict(per_task=False), "efficiency": dict(efficiency) if efficiency is not None else None}
        ),
        tasks=tasks,
    )


def updated_baseline(
    stored: Baseline | None, fresh: Baseline, narrowed: bool, skipped: Mapping[str, int] | None = None
) -> tuple[Baseline | None, str]:
    """The suite's baseline after ``--gym-update-baseline``: ``fresh`` (the run's), over what ``stored`` keeps; None
    when nothing may be written. And what to say of it ("" when the run's replaced it all, as it ran).

    A task the run has no measurement of keeps its stored entry: every trial errored (Gym died halfway), or, in a
    ``narrowed`` run (one that judged part of the suite), only some of its repeats were selected (its ``skipped``
    trials, decided without running, count as run); a narrowed run also keeps
    the tasks it did not select. Written as it ran, the run would replace the whole suite's baseline with its part:
    a task picked with ``-k`` would leave the baseline with that one task, and every later run's comparison with it.
    The suite's numbers are then judged again over all the tasks (a narrowed run keeps the stored cost figures:
    they are the whole suite's). A narrowed run whose baseline was written with other settings, or before
    per-trial rewards were kept, cannot merge: it writes nothing.
    """
    if stored is None:
        return (
            fresh,
            f"the {len(fresh.tasks)} selected tasks only (the selection narrowed the suite)" if narrowed else "",
        )
    differ = sorted(k for k in {*stored.settings, *fresh.settings} if stored.settings.get(k) != fresh.settings.get(k))
    if differ and narrowed:
        return None, (
            f"not updated: the selection narrowed the suite, and its baseline was written with other settings "
            f"({', '.join(differ)} differ): run the whole suite to replace it"
        )
    repeats, skips = fresh.settings.get("repeats"), skipped or {}
    kept = [
        h
        for h, t in fresh.tasks.items()
        if h in stored.tasks
        and (t.n == 0 or (narrowed and isinstance(repeats, int) and t.n + t.errors + skips.get(h, 0) < repeats))
    ]
    if differ or not (narrowed or kept):
        return fresh, ""  # the whole suite, every task measured (or the settings changed): the run's, as it ran
    tasks = {**(stored.tasks if narrowed else {}), **fresh.tasks, **{h: stored.tasks[h] for h in kept}}
    if any(t.rewards is None for t in tasks.values()):
        if not narrowed:
            return fresh, ""
        return None, (
            "not updated: the selection narrowed the suite, and its baseline predates per-trial rewards (the other "
            "tasks' numbers cannot be judged again): run the whole suite to replace it"
        )
    stats = suite_stats(
        {h: t.rewards or [] for h, t in tasks.items()},
        fresh.suite.min_reward,
        {h: t.errors for h, t in tasks.items() if t.errors},
        str(fresh.settings.get("task_pass", "all")),
    )
    lines = {h: t.line for h, t in tasks.items() if t.line is not None}
    source = stored if narrowed else fresh  # a narrowed run's cost figures are not the whole suite's
    merged = baseline_from(stats, fresh.settings, lines, fresh.created_at, source.suite.efficiency)
    merged.run = source.run
    if not narrowed:
        return (
            merged,
            f"{len(kept)} task{'s' * (len(kept) != 1)} with no trial measured (all errored) kept as they were",
        )
    updated = sum(1 for h in fresh.tasks if h in stored.tasks and h not in kept)
    said = [f"{updated} task{'s' * (updated != 1)} updated", f"{len(fresh.tasks) - updated - len(kept)} added"]
    said += [f"{len(kept)} kept as they were (no trial measured, or only some repeats selected)"] if kept else []
    others = sum(1 for h in stored.tasks if h not in fresh.tasks)
    return merged, f"{', '.join(said)}, {others} not selected kept (the selection narrowed the suite)"


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        problems.append(f"{where}: {err['msg']}")
    shown = problems[:10]
    if len(problems) > len(shown):
        shown.append(f"... and {len(problems) - len(shown)} more")
    return "invalid content:\n  " + "\n  ".join(shown)


def load_baselines(path: Path | str) -> StoredBaselines | None:
    """Every suite's baseline in the file, or None when there is no file yet; anything unusable raises BaselineError."""
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
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        shown = "missing" if version is None else f"{version!r} is not supported"
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise BaselineError(path, f"schema_version {shown} (this pytest-gym reads {readable})")
    try:
        if version == 1:
            legacy = Baseline.model_validate({k: v for k, v in data.items() if k != "schema_version"})
            return StoredBaselines(path, legacy=legacy)
        return StoredBaselines(path, suites=dict(BaselineFile.model_validate(data).suites))
    except ValidationError as exc:
        raise BaselineError(path, _describe(exc)) from None


def load_baseline(path: Path | str, suite: str | None = None) -> Baseline | None:
    """One suite's baseline, or None when the file or the suite is missing.

    Without ``suite`` the file must hold a single suite (or be a version-1 file).
    """
    stored = load_baselines(path)
    if stored is None:
        return None
    if suite is not None:
        return stored.for_suite(suite)
    if stored.legacy is not None:
        return stored.legacy
    if len(stored.suites) > 1:
        names = ", ".join(sorted(stored.suites))
        raise BaselineError(path, f"holds {len(stored.suites)} suites ({names}): name the one to read")
    return next(iter(stored.suites.values()), None)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: A suite's queued update: given the file as read under its lock (None: none, or unusable), the suite's baseline to
#: write (None: nothing) and what to say of it.
BaselineUpdate = Callable[["StoredBaselines | None"], "tuple[Baseline | None, str]"]


def update_baselines(path: Path | str, baselines: Mapping[str, Baseline]) -> list[str]:
    """Write these suites' baselines into the file, keeping every other suite's; returns notes on what was dropped."""
    return apply_updates(path, {suite: _constant(b) for suite, b in baselines.items()})[0]


def _constant(baseline: Baseline) -> BaselineUpdate:
    return lambda _: (baseline, "")


def apply_updates(
    path: Path | str, updates: Mapping[str, BaselineUpdate]
) -> tuple[list[str], dict[str, tuple[bool, str]]]:
    """Each suite's update applied to the file as it is now; (notes on what was dropped, by suite: written, said).

    Read, change and replace happen under a lock on the folder, and the file is replaced atomically
    (temp file in the same folder, then os.replace): an interrupted run or two runs racing never
    leave a half-written baseline or lose a suite, and an update that merges with the stored suite (a narrowed
    run's) merges with what the other run wrote. A version-1 file is converted (its one unnamed suite is dropped
    unless it is replaced), an unreadable one replaced. Nothing to write leaves the file as it is.
    """
    path = Path(path)
    notes: list[str] = []
    said: dict[str, tuple[bool, str]] = {}
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent):  # two runs updating suites of one file lose neither
        try:
            stored = load_baselines(path)
        except BaselineError as exc:
            notes.append(f"replaced an unusable baseline file: {exc.problem}")
            stored = None
        suites = dict(stored.suites) if stored is not None else {}
        for suite, update in updates.items():
            written, text = update(stored)
            said[suite] = (written is not None, text)
            if written is not None:
                suites[suite] = written
        if not any(written for written, _ in said.values()):
            return [], said
        if stored is not None and stored.legacy is not None:
            notes.append(
                f"converted {path} from schema_version 1 (one unnamed suite) to {SCHEMA_VERSION} (suites by name)"
            )
        document = BaselineFile(schema_version=SCHEMA_VERSION, suites=dict(sorted(suites.items())))
        text = json.dumps(document.model_dump(mode="json"), indent=2, sort_keys=True, allow_nan=False) + "\n"
        write_atomically(path, text.encode("utf-8"))
    return notes, said


def write_baseline(path: Path | str, baseline: Baseline, suite: str) -> list[str]:
    """Write one suite's baseline into the file (see ``update_baselines``)."""
    return update_baselines(path, {suite: baseline})


def task_label(task_hash: str, line: int | None) -> str:
    """How a task is named in messages: its short hash and dataset line."""
    return f"{task_hash[:12]} (line {line})" if line is not None else task_hash[:12]


@dataclass(frozen=True)
class Comparison:
    """How the current run differs from the baseline, task by task and on average.

    Task lists are ordered by the baseline's dataset line, then hash. A task whose current
    trials all errored has no verdict and is in no list of flips. ``new_failures``/``fixed`` are
    *stable* flips (every baseline trial passed and every current one fails, or the reverse);
    ``flaky_failures``/``flaky_fixes`` are the other flips of the task-pass rule, not counted.
    ``lines`` is each task's dataset line (this run's, else the baseline's); ``deltas`` each
    compared task's change of mean reward over its compared trials (``trials_compared``: how many,
    the first min(baseline's, current's) of each). ``no_evidence`` says why the paired test could not
    show a drop (too few shared tasks), and then the check fails; ``notes`` qualify the flips.
    """

    new_failures: list[str]
    fixed: list[str]
    unused: list[str]
    new_tasks: list[str]
    paired: PairedTest
    max_regression: float
    settings_mismatch: list[str] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    deltas: dict[str, float] = field(default_factory=dict)
    alpha: float = ALPHA
    flaky_failures: list[str] = field(default_factory=list)
    flaky_fixes: list[str] = field(default_factory=list)
    trials_compared: dict[str, int] = field(default_factory=dict)
    compared: str = ""
    no_evidence: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def significant_drop(self) -> bool:
        """The one-sided paired test finds a drop: ``p_drop < alpha``."""
        return self.paired.significant_drop(self.alpha)

    @property
    def regressed(self) -> bool:
        """A drop larger than ``max_regression`` is shown: the test of "drop > max_regression" rejects
        (``p_beyond < alpha``, equivalently ``ci_high < -max_regression``)."""
        return self.no_evidence is None and self.paired.beyond_tolerance(self.alpha)

    @property
    def passed(self) -> bool:
        """The baseline check passes: the evidence suffices and shows no regression."""
        return self.no_evidence is None and not self.regressed

    def label(self, task_hash: str) -> str:
        return task_label(task_hash, self.lines.get(task_hash))

    def describe(self, hashes: list[str], limit: int = _SHOW) -> str:
        """``hash12 (line N), ...`` for the first ``limit``, then how many more."""
        shown = ", ".join(self.label(h) for h in hashes[:limit])
        more = f" and {len(hashes) - limit} more" if len(hashes) > limit else ""
        return (shown + more) or "none"

    def named(self, hashes: list[str]) -> list[dict[str, Any]]:
        """The tasks as JSON: short hash and dataset line."""
        return [{"hash": h[:12], "line": self.lines.get(h)} for h in hashes]

    def summary(self) -> str:
        """The test's result in one line: the change, its one-sided bounds, the p-values and what was compared."""
        p = self.paired
        if p.mean_delta is None:
            return f"no evidence: {self.no_evidence}" if self.no_evidence else "no shared tasks"
        beyond = f", p(drop > {self.max_regression:g}) {p.p_beyond:.3g}" if self.max_regression > 0 else ""
        text = (
            f"delta {p.mean_delta:+.3f} over {p.n_shared} shared tasks (one-sided 95% bounds "
            f"{p.ci_low:+.3f}..{p.ci_high:+.3f}, p(drop) {p.p_drop:.3g}{beyond}; {p.method}); {self.compared}"
        )
        return f"{text}; no evidence: {self.no_evidence}" if self.no_evidence else text


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


def _describe_compared(base: list[int], now: list[int], used: list[int]) -> str:
    """What the paired test compared, e.g. "each task on its first 1 trial (the baseline has 1, this run 5)"."""

    def span(values: list[int]) -> str:
        low, high = min(values), max(values)
        return str(low) if low == high else f"{low}-{high}"

    if not used:
        return "no task compared"
    if span(base) == span(now) == span(used):
        return f"each task on its {span(used)} trial{'s' * (max(used) > 1)}"
    first = "its first" if min(used) == max(used) else "the first"
    return (
        f"each task on {first} {span(used)} trial{'s' * (max(used) > 1)} both runs have "
        f"(the baseline has {span(base)} per task, this run {span(now)})"
    )


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def compare(
    baseline: Baseline,
    stats: SuiteStats,
    max_regression: float | None = None,
    settings: Mapping[str, Any] | None = None,
    lines: Mapping[str, int] | None = None,
    rule: Rule = "all",
) -> Comparison:
    """Compare the selected tasks of this run to the baseline.

    The caller passes only the tasks it selected, so ``-k`` narrowing shows up as ``unused``
    rather than as failures. ``settings`` are the current run's; keys whose values differ
    from the baseline's (or exist on one side only) land in ``settings_mismatch``, since a
    change of model or repeats explains a difference better than a regression does.
    ``lines`` (task hash -> this run's dataset line) names the tasks in messages; ``rule``
    is the task-pass rule both runs' tasks are judged by.

    The change of mean reward is tested with ``paired.paired_test`` on each task's mean over the
    trials both runs have: its first min(baseline's, current's) trials, so that a run with more or
    fewer repeats than its baseline compares like with like (the mean of 1 trial and of 5 are not
    alike: that made 13-35% of unchanged runs "regress"). A file written before per-trial rewards
    were kept gives only its mean: compared to the current run's first as many trials when it has
    that many, else (noted) to all of them. The test is of "a drop larger than ``max_regression``".
    Rewards outside [0, 1] have no bounded test; then the tasks' pass/fail (by ``rule``) is
    compared instead, and ``method`` says so. Fewer shared tasks than ``paired.min_pairs`` is no evidence.
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
    flips: dict[str, list[str]] = {"new_failure": [], "fixed": [], "flaky_failure": [], "flaky_fix": []}
    for h in measured:
        record, now = baseline.tasks[h], stats.per_task[h]
        kind = flip((record.n, record.successes), (now.n, now.successes), rule)
        if kind is not None:
            flips[kind].append(h)
    unused = [h for h in baseline.tasks if h not in stats.per_task]
    new_tasks = [h for h in stats.per_task if h not in baseline.tasks]

    before: dict[str, float] = {}
    after: dict[str, float] = {}
    used: dict[str, int] = {}
    uneven = 0
    for h in measured:
        record, current = baseline.tasks[h], stats.rewards[h]
        m = min(record.n, len(current))
        if record.rewards is not None:
            before[h] = _mean(record.rewards[:m])
        else:  # an older file: its mean is over all of its trials
            before[h] = float(record.mean_reward or 0.0)
            if record.n > len(current):
                m, uneven = len(current), uneven + 1
        after[h] = _mean(current[:m])
        used[h] = m
    deltas = {h: after[h] - before[h] for h in measured}
    base_pass = {h: passes_by_count(baseline.tasks[h].n, baseline.tasks[h].successes, rule) for h in measured}
    if all(0.0 <= v <= 1.0 for v in (*before.values(), *after.values())):
        paired = paired_test(before, after, min_reward=stats.min_reward, tolerance=min(1.0, limit))
    else:
        as_pass = paired_test(
            {h: float(base_pass[h]) for h in measured},
            {h: float(stats.per_task[h].passed) for h in measured},
            tolerance=min(1.0, limit),
        )
        paired = replace(as_pass, method=f"{as_pass.method}, on task pass/fail (rewards outside [0, 1])")

    needed = min_pairs(min(1.0, limit))
    no_evidence = None
    if not measured:
        no_evidence = "the baseline and this run share no task with a reward (were the rows changed?)"
    elif needed is not None and len(measured) < needed:
        no_evidence = (
            f"{len(measured)} shared task{'s' * (len(measured) != 1)} with a reward, fewer than the {needed} a drop "
            f"{'' if limit == 0 else f'of more than {limit:g} '}needs to show at all (every one failing)"
        )
    notes = _flip_notes(baseline, stats, measured, flips, uneven)
    known_lines = {h: r.line for h, r in baseline.tasks.items() if r.line is not None}
    known_lines.update(lines or {})
    return Comparison(
        new_failures=sorted(flips["new_failure"], key=order),
        fixed=sorted(flips["fixed"], key=order),
        unused=sorted(unused, key=order),
        new_tasks=sorted(new_tasks),
        paired=paired,
        max_regression=limit,
        settings_mismatch=[] if settings is None else _settings_mismatch(baseline.settings, settings),
        lines=known_lines,
        deltas=deltas,
        flaky_failures=sorted(flips["flaky_failure"], key=order),
        flaky_fixes=sorted(flips["flaky_fix"], key=order),
        trials_compared=used,
        compared=_describe_compared(
            [baseline.tasks[h].n for h in measured], [stats.per_task[h].n for h in measured], list(used.values())
        ),
        no_evidence=no_evidence,
        notes=notes,
    )


def _flip_notes(
    baseline: Baseline, stats: SuiteStats, measured: list[str], flips: Mapping[str, list[str]], uneven: int
) -> list[str]:
    """When flips cannot be told from noise, or were not counted, and when the comparison is uneven."""
    notes = []
    sides = {
        "the baseline": [baseline.tasks[h].n for h in measured],
        "this run": [stats.per_task[h].n for h in measured],
    }
    one = [side for side, n in sides.items() if n and min(n) == 1]
    if one:
        notes.append(
            f"{' and '.join(one)} {'has' if len(one) == 1 else 'have'} tasks with one trial: a flip of such a "
            "task cannot be told from noise (more --gym-repeats can)"
        )
    flaky_before = sum(1 for h in measured if 0 < baseline.tasks[h].successes < baseline.tasks[h].n)
    flaky_now = sum(1 for h in measured if stats.per_task[h].flaky)
    unstable = len(flips["flaky_failure"]) + len(flips["flaky_fix"])
    if flaky_before or flaky_now:
        notes.append(
            f"flaky tasks (trials disagree): {flaky_before} in the baseline, {flaky_now} in this run; "
            f"{unstable} flip{'s' * (unstable != 1)} of such tasks listed as flaky, not counted"
        )
    if uneven:
        notes.append(
            f"{uneven} task{'s were' if uneven != 1 else ' was'} compared on fewer trials now than the baseline's mean "
            "covers (the file predates per-trial rewards): update it with --gym-update-baseline"
        )
    return notes
