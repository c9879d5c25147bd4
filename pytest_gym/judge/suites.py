"""Suite-level verdicts: collect every trial's result, compute statistics, judge gates and baselines.

The process that owns the run (the only process, or the xdist controller) feeds
every trial's outcome, decoded from its reports' properties, into ``SuiteResults``:
one code path, so the numbers are the same with and without xdist. No pytest here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.core.settings import GymSettings
from pytest_gym.judge.baseline import (
    Baseline,
    BaselineError,
    Comparison,
    StoredBaselines,
    baseline_from,
    compare,
    load_baselines,
    task_label,
    update_baselines,
)
from pytest_gym.judge.gates import NO_BASELINE, Gate, GateResult, GateSyntaxError, Imputed, evaluate, parse_gate
from pytest_gym.judge.stats import SuiteStats, suite_stats
from pytest_gym.judge.summary import BaselineSummary, FlakyTask, GateSummary, SuiteSummary, TaskRef, TotalsSummary
from pytest_gym.judge.totals import SuiteTotals, TrialCost, suite_totals


class BadGate(ValueError):
    """A gate expression that does not parse, with where it came from (a usage error at the top)."""


def parse_gates(expressions: tuple[str, ...], where: str) -> list[Gate]:
    gates = []
    for text in expressions:
        try:
            gates.append(parse_gate(text))
        except GateSyntaxError as exc:
            raise BadGate(f"pytest-gym: bad gate from {where}: {exc}") from None
    return gates


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

    def cost(self) -> TrialCost:
        return TrialCost(
            latency_s=None if self.reused else self.latency_s,
            attempts=self.attempts,
            input_tokens=self.tokens.get("input_tokens"),
            output_tokens=self.tokens.get("output_tokens"),
            total_tokens=self.tokens.get("total_tokens"),
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
    #: the run with its errored trials counted as failures and as successes (None: nothing errored)
    imputed: Imputed | None = None

    @property
    def failed(self) -> bool:
        check = self.baseline_check()
        return any(not g.passed for g in self.gates) or (check is not None and not check.passed)

    def baseline_check(self) -> BaselineCheck | None:
        """The ``<suite>::baseline`` verdict; None without a comparison.

        It fails on a shown regression, on no evidence (too few shared tasks) and, when trials errored,
        unless it passes with them counted as failures and as successes alike (undecided otherwise).
        """
        c = self.comparison
        if c is None:
            return None
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

    def task_label(self, task_hash: str) -> str:
        return task_label(task_hash, self.lines.get(task_hash))

    def flaky_tasks(self) -> list[dict[str, Any]]:
        """Tasks whose trials disagree, with how many of their trials reached min_reward."""
        per_task = self.stats.per_task
        return [
            {"hash": h[:12], "line": self.lines.get(h), "successes": per_task[h].successes, "repeats": per_task[h].n}
            for h in self.stats.flaky
        ]

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
        )
        c = self.comparison
        check = self.baseline_check()
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
        return summary


def _describe_tasks(verdict: SuiteVerdict, hashes: list[str], limit: int = 5) -> str:
    shown = ", ".join(verdict.task_label(h) for h in hashes[:limit])
    return shown + (f" and {len(hashes) - limit} more" if len(hashes) > limit else "")


SuiteSettings = Callable[[str], tuple[GymSettings, list[Gate]]]
"""suite name (the path part of its node ids) -> the settings and gates it is judged with."""


@dataclass
class SuiteResults:
    """Every trial's result of the run, grouped into suites by the path part of the node id."""

    settings: GymSettings
    gates: list[Gate]
    settings_for: SuiteSettings | None = None
    trials: dict[tuple[str, str, int], TrialRecord] = field(default_factory=dict)
    narrowed: bool = False
    #: What creates a missing baseline: the run's own command with --gym-update-baseline, when known.
    update_hint: str = "--gym-update-baseline"

    def add(self, outcome: TrialOutcome, errored: bool = False) -> None:
        """Record (or update) one trial; ``errored``: its setup failed (no reward counts)."""
        suite = outcome.nodeid.split("::", 1)[0]
        key = (suite, outcome.task_hash, outcome.repeat)
        record = self.trials.setdefault(key, TrialRecord(suite, outcome.task_hash, outcome.repeat, outcome.line))
        if errored or outcome.error is not None:
            record.error = True
        elif outcome.reward is not None:
            record.reward = outcome.reward
        record.latency_s = outcome.latency_s
        record.attempts = outcome.attempts
        record.tokens = dict(outcome.tokens)
        record.reused = outcome.reused

    def suites(self) -> dict[str, list[TrialRecord]]:
        grouped: dict[str, list[TrialRecord]] = defaultdict(list)
        for record in self.trials.values():
            grouped[record.suite].append(record)
        return dict(grouped)

    def judge(self, rootdir: Path) -> list[SuiteVerdict]:
        """Every suite's verdict: statistics, its comparison with its baseline, then its gates.

        Baselines to update are written at the end, one write per file, each suite under its own key.
        """
        verdicts = []
        updates: dict[str, dict[str, Baseline]] = defaultdict(dict)
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
            no_comparison = self._baseline(verdict, settings, stored, updates)
            if errors:
                verdict.imputed = self._imputed(verdict, trials, settings, stored)
            verdict.gates = [evaluate(g, stats, verdict.comparison, no_comparison, verdict.imputed) for g in gates]
            verdicts.append(verdict)
        for path, baselines in updates.items():
            notes = update_baselines(path, baselines)
            for verdict in verdicts:
                if verdict.suite in baselines and notes:
                    verdict.baseline_note = "; ".join([verdict.baseline_note or "", *notes]).lstrip("; ")
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
        updates: dict[str, dict[str, Baseline]],
    ) -> str:
        """Compare with (or queue the update of) the suite's baseline; returns why there is no comparison."""
        path = settings.baseline
        if not path:
            return NO_BASELINE
        verdict.baseline_path = path
        suite = verdict.suite
        if settings.update_baseline:
            updates[path][suite] = baseline_from(verdict.stats, self._baseline_settings(settings), verdict.lines)
            verdict.baseline_note = f"baseline of {suite} written to {path}"
            return f"no baseline to compare with: this run writes {path}"
        if path not in stored:
            try:
                stored[path] = load_baselines(path)
            except BaselineError as exc:
                stored[path] = exc
        found = stored[path]
        if isinstance(found, BaselineError):
            verdict.baseline_note = f"baseline unreadable: {found}"
            return verdict.baseline_note
        if found is None:
            verdict.baseline_note = f"no baseline at {path}: create it with {self.update_hint}"
            return verdict.baseline_note
        baseline = found.for_suite(suite, set(verdict.stats.per_task))
        if baseline is None:
            verdict.baseline_note = f"no baseline for suite {suite} in {path}: create it with {self.update_hint}"
            return verdict.baseline_note
        verdict.comparison = self._compare(baseline, verdict.stats, verdict, settings)
        return ""

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
