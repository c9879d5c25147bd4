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
    baseline_from,
    compare,
    load_baseline,
    write_baseline,
)
from pytest_gym.judge.gates import Gate, GateResult, GateSyntaxError, evaluate, parse_gate
from pytest_gym.judge.stats import SuiteStats, suite_stats


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


@dataclass
class SuiteVerdict:
    suite: str
    stats: SuiteStats
    gates: list[GateResult]
    comparison: Comparison | None = None
    baseline_note: str | None = None
    narrowed: bool = False

    @property
    def failed(self) -> bool:
        return any(not g.passed for g in self.gates) or bool(self.comparison and self.comparison.regressed)

    def metrics(self) -> dict[str, Any]:
        data = self.stats.to_dict(per_task=False)
        data["gates"] = {g.gate.label: {"value": g.value, "passed": g.passed, "reason": g.reason} for g in self.gates}
        if self.comparison is not None:
            c = self.comparison
            data["baseline"] = {
                "mean_delta": c.paired.mean_delta,
                "ci_low": c.paired.ci_low,
                "ci_high": c.paired.ci_high,
                "shared_tasks": c.paired.n_shared,
                "new_failures": c.new_failures,
                "fixed": c.fixed,
                "unused": c.unused,
                "new_tasks": c.new_tasks,
                "regressed": c.regressed,
                "settings_mismatch": c.settings_mismatch,
            }
        if self.baseline_note:
            data["baseline_note"] = self.baseline_note
        return data


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

    def add(self, outcome: TrialOutcome, errored: bool = False) -> None:
        """Record (or update) one trial; ``errored``: its setup failed (no reward counts)."""
        suite = outcome.nodeid.split("::", 1)[0]
        key = (suite, outcome.task_hash, outcome.repeat)
        record = self.trials.setdefault(key, TrialRecord(suite, outcome.task_hash, outcome.repeat, outcome.line))
        if errored or outcome.error is not None:
            record.error = True
        elif outcome.reward is not None:
            record.reward = outcome.reward

    def suites(self) -> dict[str, list[TrialRecord]]:
        grouped: dict[str, list[TrialRecord]] = defaultdict(list)
        for record in self.trials.values():
            grouped[record.suite].append(record)
        return dict(grouped)

    def judge(self, rootdir: Path) -> list[SuiteVerdict]:
        verdicts = []
        for suite, records in sorted(self.suites().items()):
            rewards: dict[str, list[float]] = defaultdict(list)
            errors: dict[str, int] = defaultdict(int)
            lines = {}
            for r in records:
                lines[r.task_hash] = r.line
                if r.reward is not None and not r.error:
                    rewards[r.task_hash].append(r.reward)
                else:
                    rewards.setdefault(r.task_hash, [])
                    errors[r.task_hash] += 1
            settings, gates = self.settings_for(suite) if self.settings_for else (self.settings, self.gates)
            stats = suite_stats(rewards, settings.min_reward, errors)
            verdict = SuiteVerdict(suite, stats, [evaluate(g, stats) for g in gates])
            verdict.narrowed = self.narrowed
            self._baseline(verdict, lines, settings)
            verdicts.append(verdict)
        return verdicts

    @staticmethod
    def _baseline_settings(s: GymSettings) -> dict[str, Any]:
        return {
            "repeats": s.repeats,
            "min_reward": s.min_reward,
            "agent": s.agent,
            "model": s.model,
            "reward_key": s.reward_key,
        }

    def _baseline(self, verdict: SuiteVerdict, lines: dict[str, int], settings: GymSettings) -> None:
        path = settings.baseline
        if not path:
            return
        if settings.update_baseline:
            write_baseline(path, baseline_from(verdict.stats, self._baseline_settings(settings), lines))
            verdict.baseline_note = f"baseline written to {path}"
            return
        try:
            stored: Baseline | None = load_baseline(path)
        except BaselineError as exc:
            verdict.baseline_note = f"baseline unreadable: {exc}"
            return
        if stored is None:
            verdict.baseline_note = f"no baseline at {path}: create it with --gym-update-baseline"
            return
        verdict.comparison = compare(stored, verdict.stats, settings.max_regression, self._baseline_settings(settings))
