"""Collection: a jsonl dataset (or a suite file) becomes one trial item per (distinct row, repeat).

Trials are real ``pytest.Function`` items, so fixtures, ``--setup-plan``,
``-k``, ``--lf`` and ``record_property`` work on them as on any test. Their
function requests ``gym_rollout``, which runs the rollout in the setup phase
(an infrastructure fault is an *error*); the reward is judged in the call
phase (a low reward is a *failure*).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import DatasetError, Task, read_tasks
from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.core.settings import GymSettings
from pytest_gym.core.shard import Shard, parse_shard
from pytest_gym.judge.messages import failure_message, fault_message
from pytest_gym.suitefile import SuiteFileError, suite_settings


class GymDuplicateRowWarning(pytest.PytestWarning):
    """A dataset holds the same row more than once; the copies are one task."""


def raise_fault(outcome: TrialOutcome) -> None:
    """Fail the setup phase: the trial is reported as an error, not a failure."""
    pytest.fail(fault_message(outcome), pytrace=False)


def check_reward(outcome: TrialOutcome, min_reward: float, reward_key: str, xfail: bool = False) -> None:
    """Fail a low reward; with ``--gym-verdict gate`` report it as xfail (only gates decide)."""
    assert outcome.reward is not None, "check_reward needs a finished rollout"
    if outcome.reward < min_reward:
        message = failure_message(outcome, min_reward, reward_key)
        if xfail:
            pytest.xfail(message)
        pytest.fail(message, pytrace=False)


def gym_trial(gym_rollout: TrialOutcome, request: pytest.FixtureRequest) -> None:
    """Judge one trial's reward (the rollout already ran in setup)."""
    spec: TrialSpec = request.node.spec
    check_reward(gym_rollout, spec.min_reward, spec.reward_key, xfail=spec.xfail_low)


class GymTrial(pytest.Function):
    """One repeat of one task. ``spec`` carries the task, its hash, line and repeat index."""

    spec: TrialSpec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # pytest >= 9.2 keeps structured node ids. Without a callspec our "[rN]" would be part
        # of the name, and the id would not equal the same id read back from a string (--lf,
        # --deselect compare them). Re-parse it so "[rN]" is the params part, as for parametrize.
        structured = getattr(self, "_id", None)
        if structured is not None and getattr(structured, "params", "") is None and hasattr(structured, "parse"):
            self._id = type(structured).parse(str(structured))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.spec.task.line - 1, f"{self.path.name}:{self.spec.task.line} {self.name}"


class GymDatasetFile(pytest.File):
    """A jsonl dataset given with ``--gym-dataset`` (or the ``gym_dataset`` ini setting)."""

    repeats: int = 1
    agent: str | None = None
    min_reward: float = 1.0
    reward_key: str = "reward"
    xfail_low: bool = False
    #: --gym-shard: only the tasks of this shard are collected (the others are no items at all).
    shard: Shard | None = None
    dataset_path: Path

    def __init__(self, *args: Any, settings: GymSettings | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dataset_path = self.path
        if settings is not None:
            self.configure(settings)

    def configure(self, settings: GymSettings, dataset: Path | None = None) -> None:
        """Take this suite's settings (the run's, or a suite file's merged with them)."""
        self.dataset_path = dataset or self.path
        self.repeats = settings.repeats
        self.agent = settings.agent
        self.min_reward = settings.min_reward
        self.reward_key = settings.reward_key
        self.xfail_low = settings.verdict == "gate"
        self.shard = parse_shard(settings.shard, os.environ) if settings.shard else None  # checked at start-up

    def collect(self) -> Iterable[GymTrial]:
        tasks = read_tasks(self.dataset_path, self._row_hook())
        if not tasks:
            raise DatasetError(
                self.path,
                0,
                "dataset has no rows (empty, blank lines only, or every row dropped by a hook)",
                "add jsonl rows, or remove it from --gym-dataset / gym_dataset",
            )
        self._warn_duplicates(tasks)
        fixtureinfo = None
        for index, task in enumerate(tasks):
            if self.shard is not None and not self.shard.holds(task.hash):
                continue  # another job's task; its index stays the dataset's (Gym's _ng_task_index)
            for repeat in range(self.repeats):
                name = f"{task.short_hash}[r{repeat}]"
                item = GymTrial.from_parent(self, name=name, callobj=gym_trial, fixtureinfo=fixtureinfo)
                item.spec = TrialSpec(
                    nodeid=item.nodeid,
                    task=task,
                    task_index=index,
                    repeat=repeat,
                    agent=self.agent,
                    min_reward=self.min_reward,
                    reward_key=self.reward_key,
                    xfail_low=self.xfail_low,
                )
                fixtureinfo = item._fixtureinfo  # one resolution per file, as pytest does for parametrize
                yield item

    def _row_hook(self) -> Any:
        hook = self.ihook.pytest_gym_row
        if not hook.get_hookimpls():
            return None
        path = self.dataset_path

        def apply(row: dict[str, Any], line: int) -> dict[str, Any] | None:
            result = hook(row=row, dataset=path, line=line)
            if result is False:
                return None
            if isinstance(result, dict):
                return result
            if result not in (None, True):
                raise DatasetError(
                    path, line, f"pytest_gym_row returned {type(result).__name__}", "return a dict, False or None"
                )
            return row

        return apply

    def _warn_duplicates(self, tasks: list[Task]) -> None:
        dupes = [t for t in tasks if t.duplicate_lines]
        if not dupes:
            return

        def lines(task: Task) -> str:
            more = " ..." if len(task.duplicate_lines) > 5 else ""
            return ", ".join(map(str, task.duplicate_lines[:5])) + more

        shown = "; ".join(f"lines {lines(t)} repeat line {t.line}" for t in dupes[:5])
        more = f" (and {len(dupes) - 5} more tasks)" if len(dupes) > 5 else ""
        self.warn(
            GymDuplicateRowWarning(
                f"{self.dataset_path}: duplicate rows collapsed into one task each: {shown}{more}. "
                "Repeating a row is not how repeats are asked for: use --gym-repeats N."
            )
        )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, (DatasetError, SuiteFileError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class GymSuiteFile(GymDatasetFile):
    """A ``*.gym.yaml`` suite file: its dataset's trials, judged with the file's settings."""

    def collect(self) -> Iterable[GymTrial]:
        config = self.config
        settings, suite = suite_settings(
            self.path, config.getoption, config.getini, config.invocation_params.dir, config.rootpath
        )
        self.configure(settings, Path(suite.dataset))
        return super().collect()
