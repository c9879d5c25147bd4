"""Suite verdicts as reported outcomes, JUnit suite properties and the run's summary file."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_gym.atomic import write_atomically
from pytest_gym.verdicts import SuiteVerdict

if TYPE_CHECKING:
    from pytest_gym.gymrun import GymRun

SUMMARY_FILE = "pytest_gym_summary.json"


def _report(
    nodeid: str,
    name: str,
    suite: str,
    when: Literal["setup", "call", "teardown"],
    outcome: Literal["passed", "failed", "skipped"],
    longrepr: str | None,
    props: list[tuple[str, object]],
) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid=nodeid,
        location=(suite, None, name),
        keywords={name: 1},
        outcome=outcome,
        longrepr=longrepr,
        when=when,
        user_properties=props,
        duration=0.0,
    )


def _outcome_reports(
    nodeid: str, suite: str, passed: bool, reason: str, props: list[tuple[str, object]]
) -> list[pytest.TestReport]:
    name = nodeid.split("::", 1)[1]
    return [
        _report(nodeid, name, suite, "setup", "passed", None, []),
        _report(nodeid, name, suite, "call", "passed" if passed else "failed", None if passed else reason, props),
        _report(nodeid, name, suite, "teardown", "passed", None, []),
    ]


def synthetic_reports(verdict: SuiteVerdict) -> list[pytest.TestReport]:
    """One reported outcome per gate (``<suite>::gate[<expr>]``) and one for the baseline check,
    so CI dashboards reading JUnit see them like any test."""
    reports = []
    for gate in verdict.gates:
        nodeid = f"{verdict.suite}::gate[{gate.gate.label}]"
        props: list[tuple[str, object]] = [("gym_gate_value", gate.value if gate.value is not None else "n/a")]
        reports += _outcome_reports(
            nodeid, verdict.suite, gate.passed, f"gate {gate.gate.label} failed: {gate.reason}", props
        )
    c = verdict.comparison
    if c is not None:
        reason = (
            f"regression against the baseline: mean reward changed by {c.paired.mean_delta:+.3f} "
            f"(95% CI {c.paired.ci_low:+.3f}..{c.paired.ci_high:+.3f}) over {c.paired.n_shared} shared tasks; "
            f"new failures: {', '.join(h[:12] for h in c.new_failures[:5]) or 'none'}"
            + (f" and {len(c.new_failures) - 5} more" if len(c.new_failures) > 5 else "")
            if c.regressed
            and c.paired.mean_delta is not None
            and c.paired.ci_low is not None
            and c.paired.ci_high is not None
            else ""
        )
        reports += _outcome_reports(
            f"{verdict.suite}::baseline",
            verdict.suite,
            not c.regressed,
            reason,
            [("gym_baseline_delta", c.paired.mean_delta if c.paired.mean_delta is not None else "n/a")],
        )
    return reports


def flat_properties(verdict: SuiteVerdict) -> dict[str, str]:
    """Suite-level JUnit properties: name -> text."""
    s = verdict.stats
    props = {
        "tasks": str(s.tasks),
        "trials": str(s.trials + s.errors),
        "errors": str(s.errors),
        "mean_reward": str(s.mean_reward),
        "ci_low": str(s.ci_low),
        "ci_high": str(s.ci_high),
    }
    props.update({f"pass@{k}": str(v) for k, v in s.pass_at.items()})
    props.update({f"pass^{k}": str(v) for k, v in s.pass_hat.items()})
    for gate in verdict.gates:
        props[f"gate[{gate.gate.label}]"] = f"{'pass' if gate.passed else 'fail'}: {gate.reason}"
    if verdict.comparison is not None:
        props["baseline_delta"] = str(verdict.comparison.paired.mean_delta)
        props["baseline_new_failures"] = str(len(verdict.comparison.new_failures))
    return props


def write_summary(run: GymRun, verdicts: list[SuiteVerdict]) -> dict[str, Any]:
    """``pytest_gym_summary.json`` in the run folder (and at --gym-summary), written atomically."""
    data = {"run_dir": str(run.run_dir), "suites": {v.suite: v.metrics() for v in verdicts}}
    targets = [run.run_dir / SUMMARY_FILE]
    if run.settings.summary:
        from pathlib import Path

        targets.append(Path(run.settings.summary))
    text = json.dumps(data, indent=2, default=str).encode("utf-8")
    for target in targets:
        write_atomically(target, text, fsync=False)
    return data
