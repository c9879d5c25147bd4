"""Suite-level verdicts: collect every trial's result, compute statistics, judge gates and baselines.

The process that owns the run (the only process, or the xdist controller) feeds
every trial's outcome, decoded from its reports' properties, into ``SuiteResults``:
one code path, so the numbers are the same with and without xdist. No pytest here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_gym.core.outcome import INTERRUPTED, RUN_TIMEOUT, TrialOutcome
from pytest_gym.core.settings import GymSettings
from pytest_gym.judge.baseline import (
    Baseline,
    BaselineError,
    BaselineUpdate,
    Comparison,
    StoredBaselines,
    apply_updates,
    baseline_from,
    compare,
    load_baselines,
    task_label,
    updated_baseline,
)
from pytest_gym.judge.efficiency import evaluate_efficiency, figures
from pytest_gym.judge.gates import NO_BASELINE, Gate, GateResult, Imputed, evaluate
from pytest_gym.judge.gates import BadGate as BadGate  # it and parse_gates: moved, every process parses gates
from pytest_gym.judge.gates import parse_gates as parse_gates
from pytest_gym.judge.health import UNHEALTHY, SuiteHealth, suite_health
from pytest_gym.judge.known import KnownFailures, SuiteKnown, known_summary, quarantine
from pytest_gym.judge.savings import cut_short, skipped_text, spend, undecided
from pytest_gym.judge.sequential import decided_gate, replay, sequence_summary, shared_means, suite_sequence, task_order
from pytest_gym.judge.stats import SuiteStats, suite_stats
from pytest_gym.judge.summary import (
    BaselineSummary,
    FlakyTask,
    GateSummary,
    SequentialSummary,
    SpendSummary,
    SuiteSummary,
    TaskRef,
    TotalsSummary,
    UnjudgedSpend,
)
from pytest_gym.judge.totals import SuiteTotals, TrialCost, suite_totals
from pytest_gym.judge.verdict_word import annotate


@dataclass
class TrialRecord:
    """What the owner process learns of one trial from its reports."""

    suite: str
    task_hash: str
    repeat: int
    line: int
    reward: float | None = None
    error: bool = False
    latency_s: float = 0.0
    attempts: int = 1
    tokens: dict[str, int] = field(default_factory=dict)
    reused: bool = False
    #: Gym's health verdict of the trial's evidence (healthy, unhealthy, unobserved; None: not checked).
    health: str | None = None
    checks: tuple[str, ...] = ()
    #: The verdict came from Gym's checks at the end of the run (not from the trial's own answer).
    late: bool = False
    #: Another plugin ended the trial before its outcome (``INTERRUPTED``): its rollout may have finished since.
    interrupted: bool = False
    #: The run's deadline (--gym-run-timeout) ended the trial: the run was cut short.
    cut: bool = False

    def cost(self) -> TrialCost:
        return usage_cost(self.tokens, None if self.reused else self.latency_s, self.attempts)


def usage_cost(tokens: Mapping[str, int], latency_s: float | None = None, attempts: int = 1) -> TrialCost:
    """A trial's cost figures from its token usage (Gym's ``usage`` counts, turns and tool calls)."""
    return TrialCost(
        latency_s=latency_s,
        attempts=attempts,
        input_tokens=tokens.get("input_tokens"),
        output_tokens=tokens.get("output_tokens"),
        total_tokens=tokens.get("total_tokens"),
        turns=tokens.get("turns"),
        tool_calls=tokens.get("tool_calls"),
    )


@dataclass(frozen=True)
class BaselineCheck:
    """The verdict of ``<suite>::baseline``: passed, and why not."""

    passed: bool
    reason: str
    undecided: bool = False


def _regression(c: Comparison) -> str:
    return f"regression against the baseline: {c.summary()}; new failures: {c.describe(c.new_failures)}"


@dataclass
class SuiteVerdict:
    suite: str
    stats: SuiteStats
    gates: list[GateResult]
    comparison: Comparison | None = None
    baseline_note: str | None = None
    narrowed: bool = False
    totals: SuiteTotals | None = None
    #: task hash -> dataset line, to name tasks in messages
    lines: dict[str, int] = field(default_factory=dict)
    baseline_path: str | None = None
    #: Why the suite's baseline could not be compared with (no file, no entry for the suite, unreadable): the
    #: ``<suite>::baseline`` check fails with it, as a missing snapshot fails (a regression gate that quietly
    #: judged nothing passed CI with a mistyped or uncommitted baseline path).
    baseline_missing: str | None = None
    #: --gym-verdict (trial or gate) and --gym-known-failures-strict: how the verdict word reads the trials.
    mode: str = "trial"
    strict_known: bool = False
    #: --gym-known-failures: the suite's quarantined and expired tasks.
    known: SuiteKnown | None = None
    #: The run folder the suite's baseline remembers (``Baseline.run``), for the answer-level comparison.
    remembered_run: str | None = None
    #: the run with its errored trials counted as failures and as successes (None: nothing errored)
    imputed: Imputed | None = None
    #: Gym's health checks over the suite's trials (None: --gym-health-check off).
    health: SuiteHealth | None = None
    #: What the trials cost (``judge.efficiency``): this run's figures, and the baseline's when it stores them.
    figures: dict[str, float | None] = field(default_factory=dict)
    baseline_figures: dict[str, float | None] | None = None
    #: Trials not run, by why (``judge.savings``); why the verdicts are undecided when a budget cut it short.
    skipped: dict[str, int] = field(default_factory=dict)
    cut_short: str | None = None
    budget: SpendSummary | None = None
    #: --gym-sequential: the suite's checks; the baseline check's decision when the suite stopped early.
    sequential: SequentialSummary | None = None
    sequential_baseline: str | None = None

    @property
    def failed(self) -> bool:
        check = self.baseline_check()
        return any(not g.passed for g in self.gates) or (check is not None and not check.passed)

    def baseline_check(self) -> BaselineCheck | None:
        """The ``<suite>::baseline`` verdict; None without a comparison.

        It fails on a shown regression, on no evidence (too few shared tasks) and, when trials errored,
        unless it passes with them counted as failures and as successes alike (undecided otherwise). A suite
        a budget cut short is undecided; one a sequential run stopped early has the sequential decision.
        """
        c = self.comparison
        if c is None:
            return None if self.baseline_missing is None else BaselineCheck(False, self.baseline_missing)
        if self.cut_short:
            return BaselineCheck(False, f"baseline check undecided: {self.cut_short}", undecided=True)
        if self.sequential_baseline is not None:
            held = self.sequential_baseline.startswith("baseline: no regression")
            return BaselineCheck(held, "" if held else f"{self.sequential_baseline} (--gym-sequential)")
        if c.no_evidence is not None:
            return BaselineCheck(False, f"no evidence against the baseline: {c.no_evidence}")
        imputed = self.imputed
        if imputed is None or imputed.comparison_failed is None or imputed.comparison_passed is None:
            return BaselineCheck(c.passed, "" if c.passed else _regression(c))
        worst, best = imputed.comparison_failed, imputed.comparison_passed
        if worst.passed and best.passed:
            return BaselineCheck(True, "")
        count = imputed.trials
        errored = f"{count} errored trial{'s' * (count != 1)} ({imputed.describe(imputed.errored)})"
        if not best.passed:
            return BaselineCheck(False, f"{_regression(best)} (even with the {errored} counted as successes)")
        return BaselineCheck(
            False,
            f"undecided: a regression with the {errored} counted as failures ({worst.summary()}), none with them "
            "counted as successes; rerun the errored trials to decide",
            undecided=True,
        )

    @property
    def expired(self) -> int:
        """Expired known-failure entries naming this suite's tasks (each reported as a failing test)."""
        return len(self.known.expired) if self.known is not None else 0

    def task_label(self, task_hash: str) -> str:
        return task_label(task_hash, self.lines.get(task_hash))

    def flaky_tasks(self) -> list[dict[str, Any]]:
        """Tasks whose trials disagree, with how many of their trials reached min_reward."""
        per_task = self.stats.per_task
        return [
            {"hash": h[:12], "line": self.lines.get(h), "successes": per_task[h].successes, "repeats": per_task[h].n}
            for h in self.stats.flaky
        ]

    def savings_note(self) -> str | None:
        """What the numbers stand on when trials were skipped."""
        text = skipped_text(self.skipped)
        if not text:
            return None
        if self.skipped.get("decided"):
            text += (
                "; pass@k and the interval are over the trials that ran (a decided task stopped its repeats early, "
                "so tasks have unequal trials)"
            )
        return text

    def metrics(self) -> dict[str, Any]:
        """The summary's JSON form (what the summary file holds for this suite)."""
        return self.summary().to_json()

    def summary(self) -> SuiteSummary:
        """The suite's numbers as every reader gets them (the summary file, terminal, JUnit, report, exporters)."""
        s = self.stats
        gates = {
            g.gate.label: GateSummary(
                value=g.value,
                passed=g.passed,
                reason=g.reason,
                undecided=g.undecided,
                tasks_needed=g.tasks_needed,
                bounds=list(g.bounds) if g.bounds is not None else None,
                errored_tasks=[self.task_label(h) for h in g.errored_tasks],
            )
            for g in self.gates
        }
        summary = SuiteSummary(
            tasks=s.tasks,
            trials=s.trials,
            errors=s.errors,
            error_rate=s.error_rate,
            mean_reward=s.mean_reward,
            ci_low=s.ci_low,
            ci_high=s.ci_high,
            ci_note=s.ci_note,
            min_reward=s.min_reward,
            task_pass=next((ts.rule for ts in s.per_task.values()), "all"),
            pass_at={str(k): v for k, v in s.pass_at.items()},
            pass_hat={str(k): v for k, v in s.pass_hat.items()},
            flaky_rate=s.flaky_rate,
            gates=gates,
            flaky_tasks=[FlakyTask(**task) for task in self.flaky_tasks()],
            totals=TotalsSummary(**self.totals.to_dict()) if self.totals is not None else None,
            baseline_note=self.baseline_note,
            narrowed=self.narrowed,
            failed_trials=sum(ts.n - ts.successes for ts in s.per_task.values()),
            efficiency=dict(self.figures),
            skipped=dict(self.skipped),
            cut_short=self.cut_short,
            budget=self.budget,
            savings_note=self.savings_note(),
            sequential=self.sequential,
        )
        h = self.health
        if h is not None:
            summary.health_clean_rate = h.clean_rate
            summary.unhealthy_trials = h.unhealthy
            summary.health_unobserved = h.unobserved
            summary.health_checks = dict(h.by_check)
            summary.health_note = h.note
        if self.known is not None:
            summary.known_failures = known_summary(self.known, s, self.lines)
        c = self.comparison
        check = self.baseline_check()
        if c is None and check is not None:
            summary.baseline = BaselineSummary(
                file=self.baseline_path, text=check.reason, passed=False, reason=check.reason, missing=True
            )
        if c is not None and check is not None:
            used = list(c.trials_compared.values())
            summary.baseline = BaselineSummary(
                file=self.baseline_path,
                mean_delta=c.paired.mean_delta,
                ci_low=c.paired.ci_low,
                ci_high=c.paired.ci_high,
                bounds="one-sided 95%",
                p_drop=c.paired.p_drop,
                max_regression=c.max_regression,
                p_beyond=c.paired.p_beyond,
                method=c.paired.method,
                significant_drop=c.significant_drop,
                shared_tasks=c.paired.n_shared,
                compared=c.compared,
                trials_compared={"min": min(used), "max": max(used)} if used else None,
                no_evidence=c.no_evidence,
                text=c.summary(),
                new_failures=list(c.new_failures),
                fixed=list(c.fixed),
                new_failure_tasks=[TaskRef(**t) for t in c.named(c.new_failures)],
                fixed_tasks=[TaskRef(**t) for t in c.named(c.fixed)],
                flaky_failures=[TaskRef(**t) for t in c.named(c.flaky_failures)],
                flaky_fixes=[TaskRef(**t) for t in c.named(c.flaky_fixes)],
                notes=list(c.notes),
                unused=list(c.unused),
                new_tasks=list(c.new_tasks),
                regressed=c.regressed,
                passed=check.passed,
                undecided=check.undecided,
                reason=check.reason,
                settings_mismatch=list(c.settings_mismatch),
            )
            if self.known is not None:
                held = self.known.quarantined
                named = {key: [TaskRef(**t) for t in c.named(held.get(key, []))] for key in ("new_failures", "fixed")}
                summary.baseline.quarantined_new_failures = named["new_failures"]
                summary.baseline.quarantined_fixed = named["fixed"]
        return annotate(summary, self.mode, self.strict_known)


def _describe_tasks(verdict: SuiteVerdict, hashes: list[str], limit: int = 5) -> str:
    shown = ", ".join(verdict.task_label(h) for h in hashes[:limit])
    return shown + (f" and {len(hashes) - limit} more" if len(hashes) > limit else "")


SuiteSettings = Callable[[str], tuple[GymSettings, list[Gate]]]
"""suite name (the path part of its node ids) -> the settings and gates it is judged with."""

SuiteLimits = Callable[[str], "tuple[float | None, int | None, str] | None"]
"""suite name -> its own budget (max_cost, max_tokens, where), a suite file's; None: none."""


def _with_run(update: BaselineUpdate, run: str) -> BaselineUpdate:
    """``update`` remembering the run folder the baseline's answers are in (--gym-baseline-run)."""

    def with_run(now: StoredBaselines | None) -> tuple[Baseline | None, str]:
        written, said = update(now)
        return (written.model_copy(update={"run": run}) if written is not None else None), said

    return with_run


@dataclass
class SuiteResults:
    """Every trial's result of the run, grouped into suites by the path part of the node id."""

    settings: GymSettings
    gates: list[Gate]
    settings_for: SuiteSettings | None = None
    trials: dict[tuple[str, str, int], TrialRecord] = field(default_factory=dict)
    narrowed: bool = False
    #: Whether trials' health is judged (--gym-health-check on), and why Gym's own checks did not run, if so.
    health_on: bool = False
    health_note: str | None = None
    #: --gym-known-failures: listed tasks are quarantined (left out of the gates and the flip counts).
    known: KnownFailures | None = None
    limits_for: SuiteLimits | None = None
    #: --gym-sequential: the seed of the suites' task order (``judge.sequential.run_seed``).
    seed: int = 0
    #: Trials not run (budgets, adaptive repeats, sequential gates): suite -> (task, repeat) -> why.
    skips: dict[str, dict[tuple[str, int], str]] = field(default_factory=dict)
    #: What creates a missing baseline: the run's own command with --gym-update-baseline, when known.
    update_hint: str = "--gym-update-baseline"
    #: What finished rollouts spent that no suite counts (``apply_usage``); None: none, or not looked for.
    unjudged: UnjudgedSpend | None = None
    #: Dispatching stopped before the end (-x, --maxfail, Ctrl-C, --gym-max-errors; here or in a worker).
    stopped: bool = False
    #: Per suite: [its trials in the dataset, those selected to run] (``collect.suite_coverage``); empty: not known.
    coverage: dict[str, list[int]] = field(default_factory=dict)

    def add(self, outcome: TrialOutcome, errored: bool = False) -> None:
        """Record (or update) one trial; ``errored``: its setup failed (no reward counts)."""
        suite = outcome.nodeid.split("::", 1)[0]
        key = (suite, outcome.task_hash, outcome.repeat)
        if outcome.skipped and not errored:
            self.skips.setdefault(suite, {})[(outcome.task_hash, outcome.repeat)] = outcome.skipped
            return
        record = self.trials.setdefault(key, TrialRecord(suite, outcome.task_hash, outcome.repeat, outcome.line))
        if errored or outcome.error is not None:
            record.error = True
            record.interrupted = outcome.error_class == INTERRUPTED
            record.cut = outcome.error_class == RUN_TIMEOUT
        elif outcome.reward is not None:
            record.reward = outcome.reward
        record.latency_s = outcome.latency_s
        record.attempts = outcome.attempts
        record.tokens = dict(outcome.tokens)
        record.reused = outcome.reused
        if outcome.health:  # the answer alone showed broken evidence: the trial errored naming the checks
            record.health, record.checks = UNHEALTHY, tuple(outcome.health)

    def apply_health(self, verdicts: Mapping[tuple[str, str, int], tuple[str, tuple[str, ...]]]) -> None:
        """Gym's health verdicts at the end of the run, by (suite, task hash, repeat); an earlier one stays."""
        for key, (verdict, checks) in verdicts.items():
            record = self.trials.get(key)
            if record is not None and record.health is None:
                record.health, record.checks, record.late = verdict, checks, True

    def unpaid_errors(self) -> bool:
        """Whether a trial errored with no token usage: another plugin ended it, or it was not run
        (--gym-max-errors), and its rollout may have finished all the same, paid for."""
        return any(r.error and not r.tokens and not r.reused for r in self.trials.values())

    def apply_usage(self, usage: Mapping[tuple[str, str, int], dict[str, int]]) -> None:
        """The run folder's token usage by trial: interrupted trials that had none take theirs (their rollouts
        finished, and were paid for); what no suite counts is ``unjudged``."""
        for key, tokens in usage.items():
            record = self.trials.get(key)
            if record is not None and record.interrupted and not record.tokens and tokens:
                record.tokens = dict(tokens)
        self.unjudged = self.unjudged_spend(usage)

    def unjudged_spend(self, usage: Mapping[tuple[str, str, int], dict[str, int]]) -> UnjudgedSpend | None:
        """What the rollouts recorded in ``usage`` (by suite, task hash, repeat) spent that no suite counts: those
        of trials that never ran (pytest stopped first) or errored without their rollout (not run); None: none."""
        by_suite: dict[str, list[TrialCost]] = defaultdict(list)
        for key, tokens in usage.items():
            record = self.trials.get(key)
            if record is None or (record.error and not record.tokens and not record.reused):
                by_suite[key[0]].append(usage_cost(tokens))
        if not by_suite:
            return None
        cost, spent = self._priced(by_suite)
        return UnjudgedSpend(rollouts=sum(map(len, by_suite.values())), tokens=spent, cost=cost)

    def _priced(self, by_suite: Mapping[str, list[TrialCost]]) -> tuple[float | None, int | None]:
        """(cost, total tokens) of each suite's trials at the suite's own prices; None: no price, or no usage."""
        cost = tokens = None
        for suite, costs in by_suite.items():
            own = self.settings_for(suite)[0] if self.settings_for else self.settings
            totals = suite_totals(costs, own.price_in, own.price_out)
            if totals.cost is not None:
                cost = (cost or 0.0) + totals.cost
            if totals.total_tokens is not None:
                tokens = (tokens or 0) + totals.total_tokens
        return cost, tokens

    def health_properties(self) -> dict[str, list[tuple[str, str]]]:
        """node id -> the JUnit properties of Gym's end-of-run health verdict (the trial's reports are gone)."""
        found: dict[str, list[tuple[str, str]]] = {}
        for r in self.trials.values():
            if r.late and r.health is not None:
                props = [("gym_health_verdict", r.health)] + ([("gym_health", ",".join(r.checks))] if r.checks else [])
                found[f"{r.suite}::{r.task_hash[:12]}[r{r.repeat}]"] = props
        return found

    def suites(self) -> dict[str, list[TrialRecord]]:
        """Every suite's trials; a suite whose every trial was skipped has none (and is judged all the same)."""
        grouped: dict[str, list[TrialRecord]] = {suite: [] for suite in self.skips}
        for record in self.trials.values():
            grouped.setdefault(record.suite, []).append(record)
        return grouped

    def _savings(self, verdict: SuiteVerdict, records: list[TrialRecord], settings: GymSettings) -> None:
        """Skipped trials, the suite's own budget, and undecided verdicts when a budget cut the suite short."""
        kinds = Counter(self.skips.get(verdict.suite, {}).values())
        verdict.skipped = dict(sorted(kinds.items()))
        fresh = [r for r in records if not r.reused]
        fresh_totals = suite_totals([r.cost() for r in fresh], settings.price_in, settings.price_out)
        limits = self.limits_for(verdict.suite) if self.limits_for is not None else None
        if limits is not None:
            verdict.budget = spend(
                limits[0], limits[1], fresh_totals.cost, fresh_totals.total_tokens, len(fresh), kinds["budget"]
            )
        why = cut_short(len(records), kinds)
        if why is not None:
            verdict.cut_short = why
            verdict.gates = undecided(verdict.gates, why)

    def _sequential(self, verdict: SuiteVerdict, records: list[TrialRecord], settings: GymSettings) -> None:
        """--gym-sequential: the suite's checks replayed as the dispatcher ran them; when the suite stopped early,
        its gates (and baseline check) are their decisions for the whole suite."""
        gates = [g.gate for g in verdict.gates]
        ran: dict[str, dict[int, float | None]] = defaultdict(dict)
        for r in records:
            ran[r.task_hash][r.repeat] = None if r.error else r.reward
        skips = self.skips.get(verdict.suite, {})
        planned = Counter(h for h, _ in skips) + Counter({h: len(trials) for h, trials in ran.items()})
        order = task_order(self.seed, verdict.suite, sorted(planned))
        compares = settings.baseline if not settings.update_baseline else None
        sequence = suite_sequence(
            gates,
            len(order),
            settings.min_reward,
            baseline_means=shared_means(compares, verdict.suite, set(planned)),
            max_regression=settings.max_regression,
        )
        replay(sequence, order, planned, ran)
        early = sequence.decided and "sequential" in skips.values()
        verdict.sequential = sequence_summary(sequence, self.seed, early)
        if not early:
            return
        stats = verdict.stats  # a fixed-size interval does not hold at a time the data chose: the sequence's does
        if stats.ci_low is not None and all(0.0 <= r <= 1.0 for g in stats.rewards.values() for r in g):
            stats.ci_low, stats.ci_high = sequence.interval()
            stats.ci_note = (
                f"anytime-valid {sequence.confidence:.0%} confidence sequence for the whole suite's mean reward, "
                f"over the first {sequence.tasks} of its {sequence.population} tasks (--gym-sequential)"
            )
        checks = {seq.label: seq for _, seq in sequence.gates}
        verdict.gates = [
            decided_gate(g.gate, checks[g.gate.label], sequence.population, sequence.confidence)
            if g.gate.label in checks
            else g
            for g in verdict.gates
        ]
        if sequence.baseline is not None:
            verdict.sequential_baseline = sequence.baseline.statement(sequence.confidence)

    def run_budget(self) -> SpendSummary | None:
        """The run's budget and what the run's own trials spent (each suite at its prices)."""
        settings = self.settings
        cost, tokens = self._priced({s: [r.cost() for r in rs if not r.reused] for s, rs in self.suites().items()})
        fresh = sum(1 for r in self.trials.values() if not r.reused)
        stopped = sum(1 for skips in self.skips.values() for kind in skips.values() if kind == "budget")
        return spend(settings.max_cost, settings.max_tokens, cost or 0.0, tokens or 0, fresh, stopped)

    def judge(self, rootdir: Path) -> list[SuiteVerdict]:
        """Every suite's verdict: statistics, its comparison with its baseline, then its gates.

        Baselines to update are written at the end, one write per file (``apply_updates``), each suite under its
        own key: see ``_update`` for what of a suite a run writes.
        """
        verdicts = []
        updates: dict[str, dict[str, BaselineUpdate]] = defaultdict(dict)
        stored: dict[str, StoredBaselines | BaselineError | None] = {}
        for suite, records in sorted(self.suites().items()):
            trials: dict[str, list[float | None]] = defaultdict(list)  # in trial order, None: errored
            lines = {}
            for r in sorted(records, key=lambda r: (r.line, r.task_hash, r.repeat)):  # dataset order, any arrival
                lines[r.task_hash] = r.line
                trials[r.task_hash].append(r.reward if r.reward is not None and not r.error else None)
            rewards = {h: [x for x in values if x is not None] for h, values in trials.items()}
            errors = {h: n for h, values in trials.items() if (n := values.count(None))}
            settings, gates = self.settings_for(suite) if self.settings_for else (self.settings, self.gates)
            stats = suite_stats(rewards, settings.min_reward, errors, settings.task_pass)
            totals = suite_totals([r.cost() for r in records], settings.price_in, settings.price_out)
            verdict = SuiteVerdict(suite, stats, [], totals=totals, lines=lines, narrowed=self.narrowed)
            verdict.mode, verdict.strict_known = settings.verdict, settings.known_failures_strict
            verdict.figures = figures(totals)
            if self.health_on:
                verdict.health = suite_health(((r.health, r.checks) for r in records), self.health_note)
            no_comparison = self._baseline(verdict, settings, stored, updates, records)
            verdict.remembered_run = self._remember(verdict, settings, stored, updates, rootdir)
            judged, kept = stats, trials
            if self.known is not None:
                verdict.known = quarantine(self.known, suite, list(rewards))
                judged = self._quarantined(verdict, rewards, errors, settings)
                kept = {h: values for h, values in trials.items() if h not in verdict.known.listed}
            if any(None in values for values in kept.values()):
                verdict.imputed = self._imputed(verdict, kept, settings, stored)
            verdict.gates = [
                evaluate_efficiency(g, verdict.figures, verdict.baseline_figures, no_comparison)
                if g.efficiency
                else evaluate(g, judged, verdict.comparison, no_comparison, verdict.imputed, verdict.health)
                for g in gates
            ]
            if judged is not stats:
                count = len(verdict.known.listed) if verdict.known is not None else 0
                left_out = f" (judged without the {count} quarantined task{'s' * (count != 1)}: known failures)"
                verdict.gates = [replace(g, reason=g.reason + left_out) for g in verdict.gates]
            if settings.sequential:
                self._sequential(verdict, records, settings)
            self._savings(verdict, records, settings)
            verdicts.append(verdict)
        for path, queued in updates.items():
            notes, said = apply_updates(path, queued)
            for verdict in verdicts:
                if verdict.suite in said:
                    written, text = said[verdict.suite]
                    head = f"baseline of {verdict.suite} " + (
                        f"written to {path}" + ": " * bool(text) if written else ""
                    )
                    verdict.baseline_note = "; ".join([head + text, *notes])
        return verdicts

    def _imputed(
        self,
        verdict: SuiteVerdict,
        trials: dict[str, list[float | None]],
        settings: GymSettings,
        stored: dict[str, StoredBaselines | BaselineError | None],
    ) -> Imputed:
        """The suite again with every errored trial a failure, and a success (and compared with the baseline)."""
        seen = [x for values in trials.values() for x in values if x is not None]
        fail_value = min([0.0, *seen])
        pass_value = max([1.0, settings.min_reward, *seen])

        def imputed(value: float) -> tuple[SuiteStats, Comparison | None]:
            filled = {h: [value if x is None else x for x in values] for h, values in trials.items()}
            stats = suite_stats(filled, settings.min_reward, None, settings.task_pass)
            comparison = None
            baseline = self._stored_baseline(verdict, settings, stored)
            if verdict.comparison is not None and baseline is not None:
                comparison = self._compare(baseline, stats, verdict, settings)
            return stats, comparison

        (as_failed, compared_failed), (as_passed, compared_passed) = imputed(fail_value), imputed(pass_value)
        return Imputed(
            as_failed=as_failed,
            as_passed=as_passed,
            comparison_failed=compared_failed,
            comparison_passed=compared_passed,
            errored=[h for h, values in trials.items() if None in values],
            trials=sum(values.count(None) for values in trials.values()),
            describe=lambda hashes: _describe_tasks(verdict, hashes),
        )

    @staticmethod
    def _remember(
        verdict: SuiteVerdict,
        settings: GymSettings,
        stored: dict[str, StoredBaselines | BaselineError | None],
        updates: dict[str, dict[str, BaselineUpdate]],
        rootdir: Path,
    ) -> str | None:
        """The baseline run folder: written into an updated baseline (--gym-baseline-run), read from a stored one."""
        path, suite = settings.baseline, verdict.suite
        if not path:
            return None
        if suite in updates.get(path, {}):
            if settings.baseline_run:
                run = Path(settings.baseline_run)
                shown = str(run.relative_to(rootdir)) if run.is_relative_to(rootdir) else str(run)
                updates[path][suite] = _with_run(updates[path][suite], shown)
            return None
        found = stored.get(path)
        baseline = found.for_suite(suite, set(verdict.stats.per_task)) if isinstance(found, StoredBaselines) else None
        return baseline.run if baseline is not None else None

    @staticmethod
    def _quarantined(
        verdict: SuiteVerdict, rewards: dict[str, list[float]], errors: dict[str, int], settings: GymSettings
    ) -> SuiteStats:
        """The stats the gates judge: without the quarantined tasks; their flips leave the baseline's counts."""
        known = verdict.known
        if known is None or not known.listed:
            return verdict.stats
        c = verdict.comparison
        if c is not None:
            held = {key: [h for h in getattr(c, key) if h in known.listed] for key in ("new_failures", "fixed")}
            known.quarantined = held
            verdict.comparison = replace(
                c,
                new_failures=[h for h in c.new_failures if h not in known.listed],
                fixed=[h for h in c.fixed if h not in known.listed],
            )
        kept = {h: r for h, r in rewards.items() if h not in known.listed}
        return suite_stats(
            kept, settings.min_reward, {h: e for h, e in errors.items() if h in kept}, settings.task_pass
        )

    @staticmethod
    def _baseline_settings(s: GymSettings) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "repeats": s.repeats,
            "min_reward": s.min_reward,
            "agent": s.agent,
            "model": s.model,
            "reward_key": s.reward_key,
        }
        if s.task_pass != "all":  # only when set: baselines written before the setting existed still match
            settings["task_pass"] = s.task_pass
        return settings

    def _baseline(
        self,
        verdict: SuiteVerdict,
        settings: GymSettings,
        stored: dict[str, StoredBaselines | BaselineError | None],
        updates: dict[str, dict[str, BaselineUpdate]],
        records: list[TrialRecord],
    ) -> str:
        """Compare with (or queue the update of) the suite's baseline; returns why there is no comparison."""
        path = settings.baseline
        if not path:
            return NO_BASELINE
        verdict.baseline_path = path
        suite = verdict.suite
        if settings.update_baseline:
            return self._update(verdict, settings, stored, updates, records)
        found = self._stored(path, stored)
        if isinstance(found, BaselineError):
            verdict.baseline_note = verdict.baseline_missing = f"baseline unreadable: {found}"
            return verdict.baseline_note
        if found is None:
            verdict.baseline_note = verdict.baseline_missing = (
                f"no baseline at {path}: create it with {self.update_hint}"
            )
            return verdict.baseline_note
        baseline = found.for_suite(suite, set(verdict.stats.per_task))
        if baseline is None:
            verdict.baseline_note = verdict.baseline_missing = (
                f"no baseline for suite {suite} in {path}: create it with {self.update_hint}"
            )
            return verdict.baseline_note
        verdict.baseline_figures = dict(baseline.suite.efficiency or {})
        verdict.comparison = self._compare(baseline, verdict.stats, verdict, settings)
        return ""

    @staticmethod
    def _stored(
        path: str, stored: dict[str, StoredBaselines | BaselineError | None]
    ) -> StoredBaselines | BaselineError | None:
        """The baseline file at ``path``, read once per run."""
        if path not in stored:
            try:
                stored[path] = load_baselines(path)
            except BaselineError as exc:
                stored[path] = exc
        return stored[path]

    def _update(
        self,
        verdict: SuiteVerdict,
        settings: GymSettings,
        stored: dict[str, StoredBaselines | BaselineError | None],
        updates: dict[str, dict[str, BaselineUpdate]],
        records: list[TrialRecord],
    ) -> str:
        """Queue the suite's new baseline (``updated_baseline``): the run's, when it judged the whole suite; merged
        into the stored one, when it judged part of it (-k, a node id, --sw, a shard, skipped trials); none when
        it stopped before its selected trials ran (-x, --maxfail, Ctrl-C, --gym-max-errors) or a budget or a
        sequential decision left trials unrun: what ran is no baseline of the suite."""
        path, suite = str(settings.baseline), verdict.suite
        skips = self.skips.get(suite, {})
        whole, selected = self.coverage.get(suite) or (0, 0)
        ran = len(records) + len(skips)
        narrowed = ran < whole if whole else self.narrowed
        cut = sorted({kind for kind in skips.values() if kind in ("budget", "sequential")})
        cut += ["run timeout"] if any(r.cut for r in records) else []
        if (self.stopped and (ran < selected or not selected)) or cut:
            unrun = f" {selected - ran} of" if selected > ran else " some of"
            words = {"budget": "the budget", "sequential": "the sequential decision", "run timeout": "the run timeout"}
            why = (
                f"{words[cut[0]]} left trials unrun"
                if cut
                else f"the run stopped before{unrun} its selected trials ran (-x, --maxfail, Ctrl-C, --gym-max-errors)"
            )
            verdict.baseline_note = (
                f"baseline of {suite} not updated: {why}; what ran is no baseline of the suite: run it whole to "
                f"update {path}"
            )
            return f"no baseline to compare with: --gym-update-baseline, and {path} not updated"
        if narrowed and isinstance(found := self._stored(path, stored), BaselineError):
            verdict.baseline_note = f"baseline of {suite} not updated: the run judged part of the suite, and {found}"
            return f"no baseline to compare with: --gym-update-baseline, and {path} not updated (unreadable)"
        fresh = baseline_from(
            verdict.stats, self._baseline_settings(settings), verdict.lines, efficiency=verdict.figures
        )
        hashes, skipped = set(verdict.stats.per_task), Counter(task for task, _ in skips)
        updates[path][suite] = lambda now: updated_baseline(
            now.for_suite(suite, hashes) if now is not None else None, fresh, narrowed, skipped
        )
        return f"no baseline to compare with: this run writes {path}"

    def _compare(
        self, baseline: Baseline, stats: SuiteStats, verdict: SuiteVerdict, settings: GymSettings
    ) -> Comparison:
        return compare(
            baseline,
            stats,
            settings.max_regression,
            self._baseline_settings(settings),
            verdict.lines,
            settings.task_pass,
        )

    @staticmethod
    def _stored_baseline(
        verdict: SuiteVerdict, settings: GymSettings, stored: dict[str, StoredBaselines | BaselineError | None]
    ) -> Baseline | None:
        found = stored.get(settings.baseline or "")
        if not isinstance(found, StoredBaselines):
            return None
        return found.for_suite(verdict.suite, set(verdict.stats.per_task))
