"""The run's admission, from its settings: budgets (run-wide and per suite), adaptive repeats, sequential gates.

One per process, made when the process opens Gym (``rollout.admission`` decides; this module only wires
the settings of each suite to it). None when no suite uses any of them: the dispatcher then starts every
trial as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.core.settings import GymSettings
from pytest_gym.core.taskrule import parse_task_rule
from pytest_gym.judge.gates import Gate
from pytest_gym.judge.sequential import shared_means, suite_sequence, task_order
from pytest_gym.rollout.admission import Admission, Budget, SequentialStopper, Stopper, SuitePolicy
from pytest_gym.rollout.ledger import Ledger, suite_of

#: suite -> (max_cost, max_tokens, where they were set): a suite's own budget (a suite file's keys).
SuiteLimits = Callable[[str], tuple[float | None, int | None, str] | None]


def run_budget(settings: GymSettings) -> Budget | None:
    """``--gym-max-cost``/``--gym-max-tokens`` (command line or ini): the whole run's budget."""
    if settings.max_cost is None and settings.max_tokens is None:
        return None
    return Budget(
        "budget",
        max_cost=settings.max_cost,
        max_tokens=settings.max_tokens,
        price_in=settings.price_in,
        price_out=settings.price_out,
    )


def sequential_stopper(
    suite: str, settings: GymSettings, gates: Sequence[Gate], planned: Sequence[TrialSpec], seed: int
) -> SequentialStopper:
    """``--gym-sequential`` for one suite: its planned tasks in the seeded order, its gates' sequential checks
    (and the paired one against its baseline, when it compares with one)."""
    repeats = Counter(spec.task.hash for spec in planned if suite_of(spec.nodeid) == suite)
    order = task_order(seed, suite, list(repeats))
    compares = settings.baseline if not settings.update_baseline else None
    sequence = suite_sequence(
        gates,
        len(order),
        settings.min_reward,
        baseline_means=shared_means(compares, suite, set(repeats)),
        max_regression=settings.max_regression,
    )
    return SequentialStopper(suite, [(h, repeats[h]) for h in order], sequence)


def build_admission(
    run_dir: Path,
    settings: GymSettings,
    planned: Sequence[TrialSpec],
    settings_for: Callable[[str], GymSettings],
    limits_for: SuiteLimits,
    known: Sequence[TrialOutcome] = (),
    stopper_for: Callable[[str, GymSettings], Stopper | None] | None = None,
) -> Admission | None:
    """The admission of this process's ``planned`` trials; ``known``: outcomes it has before any rollout."""
    policies: dict[str, SuitePolicy] = {}
    for suite in dict.fromkeys(suite_of(spec.nodeid) for spec in planned):
        own = settings_for(suite)
        limits = limits_for(suite)
        budget = None
        if limits is not None and (limits[0] is not None or limits[1] is not None):
            budget = Budget(
                f"suite budget ({limits[2]})",
                max_cost=limits[0],
                max_tokens=limits[1],
                price_in=own.price_in,
                price_out=own.price_out,
            )
        policy = SuitePolicy(
            repeats=own.repeats,
            rule=parse_task_rule(own.task_pass),
            adaptive=own.repeats_adaptive and own.repeats > 1,
            budget=budget,
            stopper=stopper_for(suite, own) if stopper_for is not None and own.sequential else None,
        )
        if policy.active:
            policies[suite] = policy
    budget = run_budget(settings)
    if not policies and budget is None:
        return None
    ledger = Ledger(run_dir)
    ledger.preload(known)
    return Admission(ledger, policies, budget)
