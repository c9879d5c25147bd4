"""Whether the dispatcher starts a trial now, holds it back, or never runs it: budgets, adaptive repeats,
sequential gates.

Asked for every trial before it is claimed (``Admission.decide``), by the feeder and by pytest's thread alike,
on every process of a run; each process decides from the run's ledger (``rollout.ledger``), so all decide the
same way within the time a line takes to be written:

* **budgets** (``--gym-max-cost``, ``--gym-max-tokens``; a suite file's ``max_cost``/``max_tokens``): once the
  trials rolled out in this run spent the budget, no trial of its scope starts (``skip``, kind ``budget``);
  the trials in flight finish, so the run ends within one concurrency window of the limit;
* **adaptive repeats** (``--gym-repeats-adaptive``): a repeat whose task is already decided under
  ``--gym-task-pass`` never starts (kind ``decided``); one that the task's unfinished earlier repeats could
  make useless waits for them (``wait``); the rest start (``core.taskrule.TaskRule.can_start``);
* **sequential gates** (``--gym-sequential``): once every gate of the suite is decided for the whole suite, no
  trial of it starts (kind ``sequential``): ``Stopper`` says so, from the ledger.

No pytest here; ``NotAdmitted`` carries a skip to the source, which reports the trial as skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pytest_gym.core.outcome import TrialSpec
from pytest_gym.core.taskrule import TaskRule
from pytest_gym.judge.sequential import SuiteSequence
from pytest_gym.rollout.ledger import Ledger, Spend, suite_of

Action = Literal["start", "wait", "skip"]
#: Why a trial was skipped: a budget ran out, its task was decided, or its suite's gates were.
SkipKind = Literal["budget", "decided", "sequential"]


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str = ""
    kind: SkipKind | None = None


START = Decision("start")
WAIT = Decision("wait")


class NotAdmitted(Exception):
    """A trial the admission will never start: reported as skipped, with ``reason``."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.reason)
        self.reason = decision.reason
        self.kind: SkipKind = decision.kind or "budget"


@dataclass(frozen=True)
class Budget:
    """A spending limit: at most ``max_cost`` (at the prices) and/or ``max_tokens``; ``scope`` names it."""

    scope: str
    max_cost: float | None = None
    max_tokens: int | None = None
    price_in: float | None = None
    price_out: float | None = None

    def exhausted(self, spend: Spend) -> str | None:
        """Why the budget is spent (``budget exhausted after N trials ($X of $Y)``), or None."""
        parts = []
        if self.max_cost is not None:
            cost = spend.cost(self.price_in, self.price_out)
            if cost >= self.max_cost:
                parts.append(f"${_money(cost)} of ${_money(self.max_cost)}")
        if self.max_tokens is not None and spend.total_tokens >= self.max_tokens:
            parts.append(f"{spend.total_tokens:,} of {self.max_tokens:,} tokens")
        if not parts:
            return None
        trials = f"{spend.trials} trial{'s' * (spend.trials != 1)}"
        return f"{self.scope} exhausted after {trials} ({'; '.join(parts)})"


def _money(value: float) -> str:
    return f"{value:.4g}"


class Stopper(Protocol):
    """A suite's sequential gates: why the rest of the suite need not run, once they are all decided."""

    def stopped(self, ledger: Ledger) -> str | None: ...


@dataclass
class SequentialStopper:
    """``--gym-sequential`` for one suite: takes the tasks of the seeded order from the ledger, in order, each once
    all its planned repeats finished, into the suite's sequential checks (``judge.sequential``)."""

    suite: str
    #: The suite's tasks in the seeded order, with how many repeats of each are planned.
    order: list[tuple[str, int]]
    sequence: SuiteSequence
    _next: int = 0

    def stopped(self, ledger: Ledger) -> str | None:
        sequence = self.sequence
        while not sequence.decided and self._next < len(self.order):
            task_hash, repeats = self.order[self._next]
            results = ledger.task(self.suite, task_hash)
            if len(results) < repeats:
                break  # the next task of the order is not finished: later ones must wait for it
            sequence.take(task_hash, [results[r].reward for r in sorted(results)])
            self._next += 1
        return sequence.message() if sequence.decided else None


@dataclass(frozen=True)
class SuitePolicy:
    """How one suite's trials are admitted."""

    repeats: int
    rule: TaskRule
    adaptive: bool = False
    budget: Budget | None = None
    stopper: Stopper | None = None

    @property
    def active(self) -> bool:
        return self.adaptive or self.budget is not None or self.stopper is not None


@dataclass
class Admission:
    """Decides every trial of a run in one process (see the module docstring)."""

    ledger: Ledger
    policies: Mapping[str, SuitePolicy]
    run_budget: Budget | None = None
    #: What was refused, by kind (this process's count).
    refused: dict[str, int] = field(default_factory=dict)
    #: The feeder (the dispatcher's loop) and pytest's thread both ask; a sequential stopper keeps state.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def decide(self, spec: TrialSpec) -> Decision:
        with self._lock:
            return self._decide(spec)

    def _decide(self, spec: TrialSpec) -> Decision:
        self.ledger.refresh()
        suite = suite_of(spec.nodeid)
        policy = self.policies.get(suite)
        if self.run_budget is not None:
            spent = self.run_budget.exhausted(self.ledger.total)
            if spent:
                return Decision("skip", spent, "budget")
        if policy is None:
            return START
        if policy.budget is not None:
            spent = policy.budget.exhausted(self.ledger.spend.get(suite, Spend()))
            if spent:
                return Decision("skip", spent, "budget")
        if policy.stopper is not None:
            stopped = policy.stopper.stopped(self.ledger)
            # A task some of whose repeats finished runs to its end: its trials stay a whole task.
            if stopped and not self.ledger.task(suite, spec.task.hash):
                return Decision("skip", stopped, "sequential")
        if policy.adaptive:
            return self._adaptive(spec, suite, policy)
        return START

    def _adaptive(self, spec: TrialSpec, suite: str, policy: SuitePolicy) -> Decision:
        results = self.ledger.task(suite, spec.task.hash)
        if spec.repeat in results:
            return START  # it ran already (a rerun asks again): whoever asks gets it run as usual
        rewards = [r.reward for r in results.values()]
        successes = sum(1 for r in rewards if r is not None and r >= spec.min_reward)
        failures = sum(1 for r in rewards if r is not None and r < spec.min_reward)
        k, rule = policy.repeats, policy.rule
        verdict = rule.decided(k, successes, failures)
        if verdict is not None:
            ran = len(results)
            return Decision(
                "skip",
                f"decided: the task {'passed' if verdict else 'failed'} --gym-task-pass {rule.text} after {ran} of "
                f"{k} repeats ({successes} reached --gym-min-reward); this repeat cannot change that",
                "decided",
            )
        unfinished = sum(1 for r in range(spec.repeat) if r not in results)
        return START if rule.can_start(k, successes, failures, unfinished) else WAIT

    def note(self, decision: Decision) -> None:
        if decision.kind is not None:
            self.refused[decision.kind] = self.refused.get(decision.kind, 0) + 1
