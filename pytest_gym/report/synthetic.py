"""Suite verdicts as reported outcomes: gates and the baseline check appear in JUnit like any test."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import pytest

if TYPE_CHECKING:
    from pytest_gym.judge.suites import SuiteVerdict


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
    check = verdict.baseline_check()
    if check is not None:
        delta = c.paired.mean_delta if c is not None else None
        reports += _outcome_reports(
            f"{verdict.suite}::baseline",
            verdict.suite,
            check.passed,
            check.reason,
            [("gym_baseline_delta", delta if delta is not None else "n/a")],
        )
    return reports + expired_reports(verdict)


def expired_reports(verdict: SuiteVerdict) -> list[pytest.TestReport]:
    """A failing test per expired known-failure entry naming a task of the suite: ``<file>::expired[<task>]``."""
    reports: list[pytest.TestReport] = []
    seen = set()
    for task_hash, entry in (verdict.known.expired if verdict.known is not None else {}).items():
        if entry.where in seen:
            continue
        seen.add(entry.where)
        reason = (
            f"known failure expired on {entry.expires}: {entry.describe()}; its task {verdict.task_label(task_hash)} "
            "is judged as any other again: fix it, or extend 'expires:' (or remove the entry) in the file"
        )
        props: list[tuple[str, object]] = [("gym_known_failure", entry.where)]
        reports += _outcome_reports(f"{entry.file}::expired[{entry.task}]", verdict.suite, False, reason, props)
    return reports


def deferred_reports(suite: str, path: str, gates: list[str], baseline: bool, reason: str) -> list[pytest.TestReport]:
    """A shard's gates (and baseline check) as skipped tests: judged at the merge, never passed on part of a suite.

    Shaped like a test with a skip mark (skipped in setup): ``path`` is the suite's file (absolute), by which
    pytest folds the skips in its summary.
    """
    nodeids = [f"{suite}::gate[{label}]" for label in gates] + ([f"{suite}::baseline"] if baseline else [])
    reports = []
    for nodeid in nodeids:
        name = nodeid.split("::", 1)[1]
        skipped = _report(nodeid, name, suite, "setup", "skipped", None, [("gym_deferred", reason)])
        skipped.longrepr = (path, 0, f"Skipped: {reason}")
        skipped.keywords = {name: 1, "skip": 1}
        reports += [skipped, _report(nodeid, name, suite, "teardown", "passed", None, [])]
    return reports


def fresh_line(config: pytest.Config) -> bool:
    """End the terminal line pytest's dots are on, so what comes next starts a line of its own.

    ``ensure_newline`` knows only lines it started with a file name; under xdist the controller writes its
    dots without one, so the writer's own column decides too."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return False
    reporter.ensure_newline()
    writer = getattr(reporter, "_tw", None)
    if writer is not None and getattr(writer, "width_of_current_line", None):
        writer.line()
    return False


def end_line(config: pytest.Config) -> None:
    """After the gates: their line ends with the progress (100%), as pytest ends the trials' line."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    write = getattr(reporter, "_write_progress_information_filling_space", None)
    if write is not None and getattr(reporter, "_show_progress_info", False) and config.get_verbosity() <= 0:
        write()


def log_report(config: pytest.Config, report: pytest.TestReport) -> None:
    """Report one phase of a gate (or baseline check) as pytest reports a test's: its start before the setup,
    its end after the teardown, so the terminal writes its file's name and counts it in its percentages."""
    if report.when == "setup":
        config.hook.pytest_runtest_logstart(nodeid=report.nodeid, location=report.location)
    config.hook.pytest_runtest_logreport(report=report)
    if report.when == "teardown":
        config.hook.pytest_runtest_logfinish(nodeid=report.nodeid, location=report.location)
