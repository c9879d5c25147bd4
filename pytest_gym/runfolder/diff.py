"""The answer-level comparison of a run folder with a baseline run folder (``--gym-baseline-run``).

Both folders are read through the run-folder record (``records``): every trial's reward, or its fault, and the
record itself, by (suite, task hash, repeat). A task both runs measured *flipped* when it passes by the current
run's rule (``--gym-task-pass``, ``--gym-min-reward``) on one side and not on the other, and *moved* when its mean
reward changed. The comparison names each such task with its rewards per repeat and both final answers (the
trial on each side that shows the change); the report reads the folders again for the whole records.

It works on any two folders a run leaves: a run's own, a merge of shards (``--gym-merge``, ``python -m
pytest_gym merge``), a replay or a re-score (their records hold the answers they judged).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.answers import final_text
from pytest_gym.core.masking import clean_text
from pytest_gym.judge.paired import Rule, passes_by_count
from pytest_gym.judge.summary import ChangesSummary, TaskChange
from pytest_gym.runfolder.layout import FAILURES_FILE, ROLLOUTS_FILE
from pytest_gym.runfolder.records import failure_of, gym_answer, read_records, reward_of, stamps
from pytest_gym.runfolder.runinfo import read_run_info

#: Changed tasks a summary lists (the rest are counted); the report shows as many.
MAX_LISTED = 500
#: A final answer in the summary (and so the terminal and the comment): one line, at most this long.
ANSWER_CHARS = 200
#: Two means closer than this did not move.
_EPSILON = 1e-9

KINDS = ("new_failure", "fixed", "moved")


@dataclass
class Side:
    """One task's trials in one run folder: each repeat's reward (None: it errored) and record."""

    rewards: dict[int, float | None] = field(default_factory=dict)
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    task_index: int | None = None

    @property
    def scored(self) -> list[float]:
        return [r for _, r in sorted(self.rewards.items()) if r is not None]

    @property
    def mean(self) -> float | None:
        values = self.scored
        return math.fsum(values) / len(values) if values else None

    def in_order(self) -> list[float | None]:
        return [self.rewards[r] for r in sorted(self.rewards)]


@dataclass
class TaskDiff:
    """A task that flipped or moved, with both sides."""

    suite: str
    task_hash: str
    kind: str
    before: Side
    after: Side
    #: The repeats that show the change on each side (their answers are the ones shown first).
    before_repeat: int | None = None
    after_repeat: int | None = None

    @property
    def delta(self) -> float:
        before, after = self.before.mean, self.after.mean
        return (after or 0.0) - (before or 0.0)


@dataclass
class SuiteDiff:
    suite: str
    shared_tasks: int = 0
    tasks: list[TaskDiff] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for t in self.tasks if t.kind == kind)


@dataclass
class RunDiff:
    baseline_run: Path
    suites: dict[str, SuiteDiff] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def reward_key_of(run_dir: Path) -> str:
    info = read_run_info(run_dir)
    basis = info.get("basis") if isinstance(info, dict) else None
    key = basis.get("reward_key") if isinstance(basis, dict) else None
    return key if isinstance(key, str) and key else "reward"


def read_sides(run_dir: Path) -> dict[tuple[str, str], Side]:
    """(suite, task hash) -> the task's trials in ``run_dir``; records without pytest-gym's stamps are left out."""
    reward_key = reward_key_of(run_dir)
    sides: dict[tuple[str, str], Side] = {}
    # Failures first: a trial that has a reward as well (a fault, then a retry that answered) shows its reward.
    for name, scored in ((FAILURES_FILE, False), (ROLLOUTS_FILE, True)):
        for record in read_records(run_dir / name):
            found = stamps(record)
            if found.suite is None or found.task_hash is None or found.repeat is None:
                continue
            side = sides.setdefault((found.suite, found.task_hash), Side())
            if found.task_index is not None:
                side.task_index = found.task_index
            reward = reward_of(record, reward_key) if scored else None
            if scored and reward is None:
                continue
            side.rewards[found.repeat] = reward
            side.records[found.repeat] = record
    return sides


def _first(side: Side, want: Callable[[float | None], bool]) -> int | None:
    return next((r for r in sorted(side.rewards) if want(side.rewards[r])), None)


def _showing(kind: str, before: Side, after: Side, min_reward: float) -> tuple[int | None, int | None]:
    """The repeats whose answers show the change: for a flip, a passing trial on the passing side and a failing
    one on the other; for a move, the repeat whose reward changed most."""

    def passing(reward: float | None) -> bool:
        return reward is not None and reward >= min_reward

    def failing(reward: float | None) -> bool:
        return not passing(reward)

    first = min(before.rewards, default=None), min(after.rewards, default=None)
    if kind == "new_failure":
        return _first(before, passing), _first(after, failing)
    if kind == "fixed":
        return _first(before, failing), _first(after, passing)
    both = [r for r in before.rewards if r in after.rewards]
    if not both:
        return first
    best = max(both, key=lambda r: (abs((after.rewards[r] or 0.0) - (before.rewards[r] or 0.0)), -r))
    return best, best


def diff_runs(
    current: Path,
    baseline_run: Path,
    judged_by: Callable[[str], tuple[float, Rule]],
    suites: set[str] | None = None,
) -> RunDiff:
    """Compare ``current`` with ``baseline_run``; ``judged_by(suite)`` is the suite's (min_reward, task-pass rule).

    ``suites``: only these (the run's judged suites). A task is matched by suite and hash, or (a suite the
    baseline run names otherwise, e.g. a moved dataset) by hash alone.
    """
    result = RunDiff(Path(baseline_run))
    after_sides = read_sides(current)
    before_sides = read_sides(baseline_run)
    if not before_sides:
        result.notes.append(f"the baseline run {baseline_run} has no trial of a pytest-gym run to compare with")
    by_hash: dict[str, Side] = {}
    for (_, task_hash), side in before_sides.items():
        by_hash.setdefault(task_hash, side)
    for (suite, task_hash), after in sorted(after_sides.items()):
        if suites is not None and suite not in suites:
            continue
        diff = result.suites.setdefault(suite, SuiteDiff(suite))
        before = before_sides.get((suite, task_hash)) or by_hash.get(task_hash)
        if before is None or before.mean is None or after.mean is None:
            continue
        diff.shared_tasks += 1
        min_reward, rule = judged_by(suite)
        was = passes_by_count(len(before.scored), sum(r >= min_reward for r in before.scored), rule)
        now = passes_by_count(len(after.scored), sum(r >= min_reward for r in after.scored), rule)
        if was != now:
            kind = "fixed" if now else "new_failure"
        elif abs(after.mean - before.mean) > _EPSILON:
            kind = "moved"
        else:
            continue
        shown = _showing(kind, before, after, min_reward)
        diff.tasks.append(TaskDiff(suite, task_hash, kind, before, after, *shown))
    for diff in result.suites.values():
        diff.tasks.sort(key=_order)
    return result


def _order(task: TaskDiff) -> tuple[int, float, int, str]:
    index = task.after.task_index if task.after.task_index is not None else 2**62
    return (KINDS.index(task.kind), -abs(task.delta) if task.kind == "moved" else 0.0, index, task.task_hash)


def answer_of(side: Side, repeat: int | None, limit: int = ANSWER_CHARS) -> str:
    """A trial's final answer on one line (masked, bounded); a fault's message for an errored trial."""
    record = side.records.get(repeat) if repeat is not None else None
    if record is None or repeat is None:
        return ""
    if side.rewards.get(repeat) is None:
        return clean_text(" ".join(f"(error: {failure_of(record).message})".split()), limit)
    text = " ".join(final_text(gym_answer(record)).split())
    return clean_text(text, limit) if text else "(no text)"


def changes_summary(diff: SuiteDiff, baseline_run: str, lines: Mapping[str, int] | None = None) -> ChangesSummary:
    """The summary's section for one suite: the counts, and the first ``MAX_LISTED`` changed tasks."""
    lines = lines or {}
    listed = []
    for task in diff.tasks[:MAX_LISTED]:
        index = task.after.task_index
        listed.append(
            TaskChange(
                hash=task.task_hash[:12],
                line=lines.get(task.task_hash, index + 1 if index is not None else None),
                kind=task.kind,
                before_mean=task.before.mean,
                after_mean=task.after.mean,
                before_rewards=task.before.in_order(),
                after_rewards=task.after.in_order(),
                before_answer=answer_of(task.before, task.before_repeat),
                after_answer=answer_of(task.after, task.after_repeat),
                before_repeat=task.before_repeat,
                after_repeat=task.after_repeat,
            )
        )
    return ChangesSummary(
        baseline_run=baseline_run,
        shared_tasks=diff.shared_tasks,
        new_failures=diff.count("new_failure"),
        fixed=diff.count("fixed"),
        moved=diff.count("moved"),
        tasks=listed,
        not_listed=max(0, len(diff.tasks) - MAX_LISTED),
    )
