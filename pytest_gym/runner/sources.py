"""Where a trial's outcome comes from: rolled out now, reused from an earlier run, re-scored, or merged from shards.

The variant is chosen once per process, when the first trial asks (``make_source``), the way pytest-xdist
picks its scheduler: the session asks its source for every trial and never branches on the kind of run.
A source returns the trial's ``TrialOutcome`` (a reward, or a fault the session reports as an error) or
raises ``NotRun`` when the trial has no outcome at all; ``NotRun.fault`` is then what the trial's reports
carry, so the suite counts it as an errored trial.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pytest_gym.core.dataset import DatasetError
from pytest_gym.core.outcome import RUN_TIMEOUT, TrialOutcome, TrialSpec
from pytest_gym.rollout.admission import NotAdmitted
from pytest_gym.rollout.budget import ErrorBudget, SharedErrorCount
from pytest_gym.runfolder.records import NODEID_KEY, outcome_from_failure, outcome_from_rollout, with_task_index
from pytest_gym.runfolder.runinfo import Reusable
from pytest_gym.runner.run import GymRun

if TYPE_CHECKING:
    from pytest_gym.gym.rescore import RescoredTrials
    from pytest_gym.runfolder.merge import ShardRecords


class NotRun(Exception):
    """The trial has no outcome: why (one line for the report), and the fault its reports carry, if any.

    ``skipped``: the trial is reported as skipped (a budget ran out, its verdict was decided without it);
    ``fault`` then is the outcome whose properties name it (``TrialOutcome.skipped``)."""

    def __init__(self, message: str, fault: TrialOutcome | None = None, skipped: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.fault = fault
        self.skipped = skipped


class TrialSource(Protocol):
    """Answers every trial of one process."""

    def answered_here(self, planned: Sequence[TrialSpec]) -> frozenset[str]:
        """Node ids of ``planned`` this source answers without a rollout (the dispatcher skips them)."""

    def outcome(self, spec: TrialSpec) -> TrialOutcome:
        """The trial's outcome; ``NotRun`` when it has none."""

    def known(self, planned: Sequence[TrialSpec]) -> list[TrialOutcome]:
        """Outcomes of ``planned`` this source has before any rollout (reused ones): what admission starts from."""


@dataclass
class Fresh:
    """Every trial rolled out now, through the run's dispatcher."""

    run: GymRun
    #: Acquire the deployment and start dispatching (once; the session knows the plan and xdist's queue).
    open_gym: Callable[[], object]
    budget: ErrorBudget
    errors: SharedErrorCount
    total: int
    #: When --gym-run-timeout ends the run (epoch seconds); None without it.
    deadline: float | None = None

    def answered_here(self, planned: Sequence[TrialSpec]) -> frozenset[str]:
        return frozenset()

    def known(self, planned: Sequence[TrialSpec]) -> list[TrialOutcome]:
        return []

    def outcome(self, spec: TrialSpec) -> TrialOutcome:
        self._check_deadline(spec)
        self.open_gym()
        # Without --gym-max-errors nothing is counted: the shared count is a file (a stat per trial).
        limit = self.budget.limit(self.total)
        errors = self.errors.count() if limit is not None else 0
        if self.budget.exceeded(errors, self.total):
            self.run.stop_dispatch()
            raise NotRun(
                f"not run: {errors} trials errored, more than --gym-max-errors allows "
                f"({limit} of {self.total}); fix the cause (see the first errors) and rerun"
            )
        assert self.run.dispatcher is not None
        try:
            remaining = None if self.deadline is None else max(0.0, self.deadline - time.time())
            found: TrialOutcome | None = self.run.dispatcher.result(spec, remaining)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            found = None
        except NotAdmitted as refused:
            raise NotRun(refused.reason, TrialOutcome.for_spec(spec, skipped=refused.kind), skipped=True) from None
        if found is None:
            self._check_deadline(spec)
            raise NotRun("cancelled: the run was stopped before this rollout started")
        if not found.ok:
            self._check_deadline(spec)
            if self.run.settings.policy == "replay":
                found.error = f"{found.error}{replay_miss(self.run.run_dir, found, spec)}"
        return found

    def _check_deadline(self, spec: TrialSpec) -> None:
        """Past the run's deadline: start nothing more, cancel what runs, and error this trial saying why.

        The trial counts as an infrastructure fault of its suite (``error_class`` run_timeout)."""
        if self.deadline is None or time.time() < self.deadline:
            return
        self.run.stop_dispatch()
        message = (
            f"not finished: the run timeout (--gym-run-timeout {self.run.settings.run_timeout:g} s) was hit before "
            "this trial's rollout finished; raise the timeout, run fewer trials (-k, --gym-repeats) or more at once "
            "(--gym-concurrency)"
        )
        raise NotRun(message, TrialOutcome.for_spec(spec, error_class=RUN_TIMEOUT, error=message))


def replay_miss(run_dir: Path, outcome: TrialOutcome, spec: TrialSpec) -> str:
    """Why a replayed trial had no recording (Gym reports only that its model call failed)."""
    from pytest_gym.standins.cassette import misses_for_row, read_misses

    try:
        row = outcome.request or spec.task.load_row()
        misses = misses_for_row(read_misses(run_dir), row)
    except (OSError, ValueError, DatasetError):
        return ""
    return f"\n{misses[0].message}" if misses else ""


@dataclass
class Resumed:
    """--gym-resume: a trial the earlier run finished is reported from its record; the rest roll out now."""

    reusable: Reusable
    run: GymRun
    fresh: Fresh

    def answered_here(self, planned: Sequence[TrialSpec]) -> frozenset[str]:
        return frozenset(s.nodeid for s in planned if self.reusable.take(s.task.hash, s.repeat) is not None)

    def known(self, planned: Sequence[TrialSpec]) -> list[TrialOutcome]:
        found = []
        for spec in planned:
            record = self.reusable.take(spec.task.hash, spec.repeat)
            outcome = outcome_from_rollout(spec, record, reused=True) if record is not None else None
            if outcome is not None:
                found.append(outcome)
        return found

    def outcome(self, spec: TrialSpec) -> TrialOutcome:
        record = self.reusable.take(spec.task.hash, spec.repeat)
        outcome = outcome_from_rollout(spec, record, reused=True) if record is not None else None
        if outcome is None or record is None:
            return self.fresh.outcome(spec)
        # This run's record now: its task index and node id (an earlier run may have placed or named it otherwise).
        self.run.open_writer().append_rollout({**with_task_index(record, spec.task_index), NODEID_KEY: spec.nodeid})
        return outcome


@dataclass
class Rescored:
    """--gym-rescore: the earlier run's saved answer, verified again by the current resources servers."""

    rescored: RescoredTrials
    run: GymRun

    def answered_here(self, planned: Sequence[TrialSpec]) -> frozenset[str]:
        return frozenset(s.nodeid for s in planned)

    def known(self, planned: Sequence[TrialSpec]) -> list[TrialOutcome]:
        return []  # nothing is dispatched: nothing to admit

    def outcome(self, spec: TrialSpec) -> TrialOutcome:
        outcome = self.rescored.outcome(spec)  # no rollout: the saved answer, verified again
        self.run.open_writer().record(outcome)
        return outcome


@dataclass
class Merged:
    """--gym-merge: this run's own trials, run by the shard jobs; nothing rolls out here."""

    records: ShardRecords

    def answered_here(self, planned: Sequence[TrialSpec]) -> frozenset[str]:
        return frozenset(s.nodeid for s in planned)

    def known(self, planned: Sequence[TrialSpec]) -> list[TrialOutcome]:
        return []  # nothing is dispatched: nothing to admit

    def outcome(self, spec: TrialSpec) -> TrialOutcome:
        from pytest_gym.runfolder.merge import MissingTrial, missing_message

        record = self.records.take(spec.task.hash, spec.repeat)
        outcome = outcome_from_rollout(spec, record, reused=False, keep_latency=True) if record else None
        if outcome is not None:
            return outcome  # its record is copied at the end (write_merged)
        failure = self.records.failure(spec.task.hash, spec.repeat)
        if failure is not None:
            return outcome_from_failure(spec, failure)
        raise NotRun(
            missing_message(
                [MissingTrial(spec.nodeid, spec.task.hash, spec.repeat)],
                self.records.folders,
                "Or pass --gym-merge-allow-missing to judge without it.",
            )
        )
