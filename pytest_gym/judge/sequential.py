"""``--gym-sequential``: a suite's gates decided for the whole suite before all of it ran, with a guarantee.

The tasks run in a seeded random order (``task_order``). After each task of that order whose trials all
finished (and every task before it), each gate's metric gets the task's value (``task_value``: its mean reward,
pass@K, pass^K, errored share, or its paired change against the baseline) and two one-sided anytime-valid tests
at the gate's threshold move (``judge.confseq``): one that can show the gate holds for the whole suite, one that
it fails. A gate is decided when either rejects; the suite when every gate is. The chance that a gate is decided
the wrong way (the full suite's value on the other side) is at most ``alpha / G`` for each of the suite's ``G``
gates, so the whole verdict equals the full run's with probability at least ``1 - alpha``, at every stopping time.

Errored trials settle nothing: the test that can show "holds" counts them as failures, the one for "fails" as
successes (the full run's verdict is decided on both, as its gates are). Gates no bounded per-task mean can
decide (flaky_rate, intervals, new_failures, fixed, what the trials cost) are never decided early: a suite with
one of them runs to the end. Pure, no I/O.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_gym.judge.confseq import Capital, certain_bounds, confidence_sequence
from pytest_gym.judge.gates import Gate, GateResult

if TYPE_CHECKING:
    from pytest_gym.judge.summary import SequentialSummary

#: The metrics a sequential run decides early (per-task bounded means); plus the baseline's drop.
DECIDABLE = ("mean_reward", "pass@", "pass^", "error_rate")
#: The paired check against the baseline, as a pseudo-gate label.
BASELINE = "baseline"
#: Checkpoints of a confidence sequence kept for the report's plot.
MAX_POINTS = 40

#: One task's trials in repeat order: a reward, or None for an errored trial.
Trials = Sequence[float | None]


def task_order(seed: int, suite: str, task_hashes: Sequence[str]) -> list[str]:
    """The suite's tasks in the seeded random order (the same on every process and run with this seed)."""

    def key(task_hash: str) -> bytes:
        return hashlib.sha256(f"{seed}\0{suite}\0{task_hash}".encode()).digest()

    return sorted(dict.fromkeys(task_hashes), key=key)


def seed_of(run_dir: str) -> int:
    """The default seed: from the run folder's name, so every process of a run agrees and each run differs."""
    return int.from_bytes(hashlib.sha256(run_dir.encode()).digest()[:6], "big")


def run_seed(seed: int | None, run_dir: str) -> int:
    """``--gym-seed``, or one from the run folder's name (every process of a run agrees; each run differs)."""
    return seed if seed is not None else seed_of(run_dir)


def shared_means(path: str | None, suite: str, task_hashes: set[str]) -> dict[str, float]:
    """The baseline's mean reward of each of ``task_hashes`` it holds (the paired check's population);
    empty without a usable baseline (the judge reports why)."""
    from pytest_gym.judge.baseline import BaselineError, load_baselines

    if not path:
        return {}
    try:
        stored = load_baselines(path)
    except BaselineError:
        return {}
    baseline = stored.for_suite(suite, task_hashes) if stored is not None else None
    if baseline is None:
        return {}
    return {
        h: float(record.mean_reward)
        for h, record in baseline.tasks.items()
        if h in task_hashes and record.mean_reward is not None and 0.0 <= record.mean_reward <= 1.0
    }


def decidable(gate: Gate) -> bool:
    return gate.metric in DECIDABLE and not gate.delta


def task_value(gate: Gate, trials: Trials, min_reward: float, errors_as: float) -> float:
    """The task's share of the gate's metric, errored trials counted as ``errors_as`` (0.0 or 1.0)."""
    from pytest_gym.judge.stats import pass_at_k, pass_hat_k

    n = len(trials)
    if gate.metric == "error_rate":
        return sum(1 for r in trials if r is None) / n
    if gate.metric == "mean_reward":
        return math.fsum(errors_as if r is None else min(1.0, max(0.0, r)) for r in trials) / n
    successes = sum(1 for r in trials if (r is None and errors_as >= 1.0) or (r is not None and r >= min_reward))
    assert gate.k is not None
    k = min(gate.k, n)
    return pass_at_k(n, successes, k) if gate.metric == "pass@" else pass_hat_k(n, successes, k)


@dataclass
class SequentialGate:
    """The two tests of one gate (or of the baseline check) over a population of ``population`` tasks."""

    label: str
    op: str
    threshold: float
    population: int
    alpha: float
    holds_test: Capital = field(init=False)
    fails_test: Capital = field(init=False)
    decision: bool | None = None
    decided_at: int | None = None
    #: (tasks so far, lower, upper) at checkpoints, for the report.
    values_low: list[float] = field(default_factory=list, repr=False)
    values_high: list[float] = field(default_factory=list, repr=False)
    _sum_low: float = 0.0
    _sum_high: float = 0.0

    def __post_init__(self) -> None:
        above = self.op in (">=", ">")  # holds when the mean is high
        # The test that shows the gate holds bets the mean is above (>=) or below (<=) the threshold.
        self.holds_test = Capital(self.population, self.threshold, upper=above)
        self.fails_test = Capital(self.population, self.threshold, upper=not above)

    @property
    def t(self) -> int:
        return len(self.values_low)

    def update(self, low: float, high: float) -> None:
        """One more task: its value with errors as failures (``low``) and as successes (``high``)."""
        self.values_low.append(low)
        self.values_high.append(high)
        self._sum_low += low
        self._sum_high += high
        if self.decision is not None:
            return
        above = self.op in (">=", ">")
        # "holds" must hold with errors against the gate: failures for >=, successes for <=.
        self.holds_test.update(low if above else high)
        self.fails_test.update(high if above else low)
        decision = self._certain()
        if decision is None and self.holds_test.rejects(self.alpha):
            decision = True
        if decision is None and self.fails_test.rejects(self.alpha):
            decision = False
        if decision is not None:
            self.decision, self.decided_at = decision, self.t

    def _certain(self) -> bool | None:
        t, n, tau = self.t, self.population, self.threshold
        low, _ = certain_bounds(n, t, self._sum_low)
        _, high = certain_bounds(n, t, self._sum_high)
        if self.op == ">=":
            return True if low >= tau else False if high < tau else None
        if self.op == ">":
            return True if low > tau else False if high <= tau else None
        if self.op == "<=":
            return True if high <= tau else False if low > tau else None
        return True if high < tau else False if low >= tau else None

    def bounds(self, t: int | None = None) -> tuple[float, float]:
        """The confidence sequence of the gate's metric after ``t`` tasks (default: all taken), each end at this
        gate's level (the threshold leaves it when the gate is decided): the lower end from the errors-as-failures
        values, the upper from errors-as-successes."""
        t = self.t if t is None else t
        low, _ = confidence_sequence(self.values_low[:t], self.population, self.alpha, sides=1)
        _, high = confidence_sequence(self.values_high[:t], self.population, self.alpha, sides=1)
        return low, high

    def history(self, until: int | None = None, points: int = MAX_POINTS) -> list[tuple[int, float, float]]:
        """(tasks, lower, upper) at up to ``points`` checkpoints from 1 to ``until`` (default: the decision)."""
        end = until if until is not None else (self.decided_at or self.t)
        if end <= 0:
            return []
        steps = sorted({max(1, round(end ** (i / (points - 1)))) for i in range(points)} | {end})
        return [(t, *self.bounds(t)) for t in steps]

    def statement(self, confidence: float) -> str:
        """``mean_reward>=0.8 holds for the whole suite at 95%``."""
        if self.decision is None:
            return f"{self.label} undecided"
        verdict = "holds" if self.decision else "fails"
        if self.label == BASELINE:
            verdict = "no regression beyond the tolerance" if self.decision else "a regression beyond the tolerance"
            return f"baseline: {verdict} for the whole suite at {confidence:.0%}"
        return f"{self.label} {verdict} for the whole suite at {confidence:.0%}"


@dataclass
class SuiteSequence:
    """A suite's sequential gates: fed each task of the seeded order, decided when every gate is."""

    population: int
    gates: list[tuple[Gate, SequentialGate]]
    baseline: SequentialGate | None
    min_reward: float
    confidence: float
    #: Gates no bounded per-task mean decides: the suite runs to the end.
    undecidable: list[str]
    #: The baseline's per-task mean reward (shared tasks only), for the paired check.
    baseline_means: Mapping[str, float] = field(default_factory=dict)
    tasks: int = 0
    decided_at: int | None = None
    #: Each task's mean reward taken, errors as failures and as successes (the suite's interval when it stops).
    means_low: list[float] = field(default_factory=list, repr=False)
    means_high: list[float] = field(default_factory=list, repr=False)

    @property
    def checks(self) -> list[SequentialGate]:
        return [seq for _, seq in self.gates] + ([self.baseline] if self.baseline is not None else [])

    @property
    def decided(self) -> bool:
        return self.decided_at is not None

    def take(self, task_hash: str, trials: Trials) -> None:
        """The next task of the order, with all its trials."""
        self.tasks += 1
        for gate, seq in self.gates:
            seq.update(task_value(gate, trials, self.min_reward, 0.0), task_value(gate, trials, self.min_reward, 1.0))
        low = math.fsum(0.0 if r is None else min(1.0, max(0.0, r)) for r in trials) / len(trials)
        high = math.fsum(1.0 if r is None else min(1.0, max(0.0, r)) for r in trials) / len(trials)
        self.means_low.append(low)
        self.means_high.append(high)
        if self.baseline is not None and task_hash in self.baseline_means:
            before = self.baseline_means[task_hash]
            # The change now - before, in [-1, 1], as a value in [0, 1]: (change + 1) / 2.
            self.baseline.update((low - before + 1) / 2, (high - before + 1) / 2)
        if self.decided_at is None and not self.undecidable and all(c.decision is not None for c in self.checks):
            self.decided_at = self.tasks

    def interval(self) -> tuple[float, float]:
        """The whole suite's mean reward: a two-sided anytime-valid confidence sequence over the tasks taken."""
        alpha = 1.0 - self.confidence
        low, _ = confidence_sequence(self.means_low, self.population, alpha)
        _, high = confidence_sequence(self.means_high, self.population, alpha)
        return low, high

    def message(self) -> str:
        """``decided after 57 of 1000 tasks: mean_reward>=0.8 holds for the whole suite at 95%``."""
        statements = "; ".join(c.statement(self.confidence) for c in self.checks)
        return f"decided after {self.decided_at} of {self.population} tasks: {statements}"


def suite_sequence(
    gates: Sequence[Gate],
    population: int,
    min_reward: float,
    alpha: float = 0.05,
    baseline_means: Mapping[str, float] | None = None,
    max_regression: float = 0.0,
) -> SuiteSequence:
    """The sequential checks of a suite of ``population`` tasks; ``baseline_means`` (shared tasks) adds the
    paired check of a drop larger than ``max_regression``. ``alpha`` is split evenly over the checks."""
    sequential = [g for g in gates if decidable(g)]
    undecidable = [g.label for g in gates if not decidable(g)]
    shared = len(baseline_means or {})
    count = len(sequential) + (1 if shared else 0)
    each = alpha / max(1, count)
    checks = [(g, SequentialGate(g.label, g.op, g.threshold, population, each)) for g in sequential]
    baseline = None
    if shared:
        # No regression beyond t: mean change >= -t, i.e. mean of (change + 1) / 2 >= (1 - t) / 2.
        baseline = SequentialGate(BASELINE, ">=", (1.0 - max_regression) / 2, shared, each)
    if not checks and baseline is None:
        undecidable.append("(no gate)")
    return SuiteSequence(population, checks, baseline, min_reward, 1.0 - alpha, undecidable, dict(baseline_means or {}))


def replay(
    sequence: SuiteSequence,
    order: Sequence[str],
    planned: Mapping[str, int],
    ran: Mapping[str, Mapping[int, float | None]],
) -> SuiteSequence:
    """Feed ``sequence`` the tasks of ``order`` that ran whole, in order, up to the first that did not (or to the
    decision): what the dispatcher's checks saw when they decided (the judge's account of them)."""
    for task_hash in order:
        trials = ran.get(task_hash, {})
        if len(trials) < planned.get(task_hash, 0) or not trials:
            break
        sequence.take(task_hash, [trials[r] for r in sorted(trials)])
        if sequence.decided:
            break
    return sequence


def decided_gate(gate: Gate, seq: SequentialGate, population: int, confidence: float) -> GateResult:
    """A gate's verdict from its sequential check, for a suite that stopped once every gate was decided."""
    t = seq.decided_at or seq.t
    shown = math.fsum(seq.values_low[:t]) / t if t else float("nan")
    reason = (
        f"{seq.statement(confidence)} (--gym-sequential: decided after {t} of {population} tasks; "
        f"{gate.metric_label} = {shown:.4g} over them)"
    )
    return GateResult(gate, shown if t else None, bool(seq.decision), reason)


def sequence_summary(sequence: SuiteSequence, seed: int, stopped_early: bool) -> SequentialSummary:
    """The summary's account of a suite's sequential checks, with each one's confidence sequence over time."""
    from pytest_gym.judge.summary import SequentialCheck, SequentialSummary

    checks = {}
    for seq in sequence.checks:
        # The paired check runs on (change + 1) / 2: shown as the change of mean reward, in [-1, 1].
        paired = seq.label == BASELINE

        def unit(v: float, paired: bool = paired) -> float:
            return 2.0 * v - 1.0 if paired else v

        low, high = seq.bounds() if seq.t else (None, None)
        checks[seq.label] = SequentialCheck(
            op=seq.op,
            threshold=unit(seq.threshold),
            decision=None if seq.decision is None else "holds" if seq.decision else "fails",
            decided_at=seq.decided_at,
            low=None if low is None else unit(low),
            high=None if high is None else unit(high),
            history=[(t, unit(lo), unit(hi)) for t, lo, hi in seq.history()],
        )
    return SequentialSummary(
        seed=seed,
        tasks=sequence.population,
        decided_at=sequence.decided_at,
        message=sequence.message() if sequence.decided else None,
        confidence=sequence.confidence,
        checks=checks,
        undecidable=list(sequence.undecidable),
        stopped_early=stopped_early,
    )
