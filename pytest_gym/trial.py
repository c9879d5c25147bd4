"""What one trial item's setup does: reuse a finished rollout, respect the error budget, or wait for its own.

Kept out of ``plugin.py`` so the fixture stays wiring. Every path ends with the
trial's properties recorded and either an outcome with a reward or a setup error.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.errorbudget import ErrorBudget, parse_error_budget
from pytest_gym.gymrun import GymRun
from pytest_gym.results import TrialOutcome, TrialSpec
from pytest_gym.resume import Reusable, load_reusable
from pytest_gym.settings import GymSettings
from pytest_gym.verdict import raise_fault

ERRORS_FILE = ".errors"


class SharedErrorCount:
    """Errored trials of the whole run, shared by xdist workers: one byte appended per error."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / ERRORS_FILE

    def add(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)

    def count(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0


def reused_outcome(spec: TrialSpec, record: dict[str, Any]) -> TrialOutcome | None:
    reward = record.get(spec.reward_key)
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return None
    ref = record.get("agent_ref")
    return TrialOutcome.for_spec(
        spec,
        reward=float(reward),
        answer=record,
        attempts=int(record.get("_pytest_gym_attempts", 1)),
        agent=ref.get("name") if isinstance(ref, dict) else spec.agent,
        reused=True,
    )


@dataclass
class TrialContext:
    """What every trial of this process needs besides its own spec."""

    budget: ErrorBudget
    total: int
    reusable: Reusable | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def for_run(cls, settings: GymSettings, planned: Sequence[TrialSpec]) -> TrialContext:
        reusable = load_reusable(Path(settings.resume), settings) if settings.resume else None
        context = cls(parse_error_budget(settings.max_errors), len(planned), reusable)
        if reusable is not None:
            context.notes.append(reusable.note)
        return context

    def reused_nodeids(self, planned: Sequence[TrialSpec]) -> frozenset[str]:
        if self.reusable is None:
            return frozenset()
        return frozenset(s.nodeid for s in planned if self.reusable.take(s.task.hash, s.repeat) is not None)


def trial_outcome(run: GymRun, node: pytest.Item, spec: TrialSpec, context: TrialContext) -> TrialOutcome:
    """The finished rollout of ``spec`` (raises a setup error for a fault)."""
    budget, total, reusable = context.budget, context.total, context.reusable
    errors = SharedErrorCount(run.run_dir)
    record = reusable.take(spec.task.hash, spec.repeat) if reusable else None
    outcome = reused_outcome(spec, record) if record else None
    if outcome is not None and record is not None:
        if run.writer is not None:
            run.writer.append_rollout(record)
    else:
        if budget.exceeded(errors.count(), total):
            run.stop_dispatch()
            pytest.fail(
                f"not run: {errors.count()} trials errored, more than --gym-max-errors allows "
                f"({budget.limit(total)} of {total}); fix the cause (see the first errors) and rerun",
                pytrace=False,
            )
        assert run.dispatcher is not None
        try:
            outcome = run.dispatcher.result(spec)
        except concurrent.futures.CancelledError:
            pytest.fail("cancelled: the run was stopped before this rollout started", pytrace=False)
    node.user_properties.extend(outcome.properties())
    if not outcome.ok:
        errors.add()
        raise_fault(outcome)
    return outcome
