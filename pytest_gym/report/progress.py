"""Results gathering and progress on the process that owns the run.

Every trial's reports reach the owner (xdist forwards workers' reports to the
controller), so one object there feeds the suite results, calls
``pytest_gym_trial_result`` once per trial, and prints a progress line now and
then on long runs: trials done / total, errors, running mean reward. ``-q``
keeps it quiet.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from pytest_gym.results import TrialOutcome
from pytest_gym.verdicts import RunResults

TRIAL_ID = re.compile(r"::[0-9a-f]{12}\[r\d+\]$")


def outcome_from_report(report: pytest.TestReport, props: dict[str, Any]) -> TrialOutcome:
    """The trial as the owner knows it: from the builtins-only properties (xdist-safe)."""
    error = str(props["gym_error_class"]) if props.get("gym_error_class") else None
    tokens = {k[4:]: int(v) for k, v in props.items() if k.endswith("_tokens") and k.startswith("gym_")}
    return TrialOutcome(
        nodeid=report.nodeid,
        task_hash=str(props["gym_task_hash"]),
        repeat=int(props.get("gym_repeat", 0)),
        line=int(props.get("gym_line", 0)),
        dataset=report.nodeid.split("::", 1)[0],
        reward=float(props["gym_reward"]) if "gym_reward" in props else None,
        latency_s=float(props.get("gym_latency_s", 0.0)),
        attempts=int(props.get("gym_attempts", 1)),
        error=error,
        error_class=props.get("gym_error_class"),
        tokens=tokens,
    )


class OwnerReporting:
    def __init__(self, config: pytest.Config, results: RunResults, interval_s: float = 10.0) -> None:
        self.config = config
        self.results = results
        self.interval_s = interval_s
        self.total: int | None = None
        self.done = 0
        self.errors = 0
        self.reward_sum = 0.0
        self.rewards = 0
        self.started = time.monotonic()
        self.last_line = self.started
        self._setup_errors: dict[str, str] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = sum(1 for item in session.items if TRIAL_ID.search(item.nodeid))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.results.add_report(report)
        props = dict(report.user_properties)
        if "gym_task_hash" not in props:
            return
        if report.when == "setup" and report.failed:
            self._setup_errors[report.nodeid] = report.longreprtext.strip() or "setup failed"
        if report.when != "teardown":
            return
        outcome = outcome_from_report(report, props)
        setup_error = self._setup_errors.pop(report.nodeid, None)
        if setup_error is not None:
            outcome.error, outcome.error_class = setup_error, outcome.error_class or "setup"
        self.done += 1
        if outcome.reward is not None:
            self.rewards += 1
            self.reward_sum += outcome.reward
        if outcome.error is not None:
            self.errors += 1
        self.config.hook.pytest_gym_trial_result(trial=outcome, result=outcome)
        self._maybe_print()

    def line(self) -> str:
        total = f"/{self.total}" if self.total else ""
        mean = f"{self.reward_sum / self.rewards:.3f}" if self.rewards else "n/a"
        elapsed = time.monotonic() - self.started
        return f"pytest-gym: {self.done}{total} trials done, {self.errors} errors, mean reward {mean} ({elapsed:.0f} s)"

    def _maybe_print(self) -> None:
        now = time.monotonic()
        if now - self.last_line < self.interval_s or self.config.get_verbosity() < 0:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        self.last_line = now
        reporter.ensure_newline()
        reporter.write_line(self.line())


class XdistTotal:
    """Under xdist the controller does not collect; it learns the trial count from a worker."""

    def __init__(self, reporting: OwnerReporting) -> None:
        self.reporting = reporting

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.reporting.total is None:
            self.reporting.total = sum(1 for nodeid in ids if TRIAL_ID.search(nodeid))
