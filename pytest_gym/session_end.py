"""The end of a run, in order: judge the suites, write JUnit, export, stop the deployment.

Plugin objects registered by ``plugin.py``; each runs where pytest's own
``pytest_sessionfinish`` implementations leave the data it needs.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_gym.report.exports import export_run
from pytest_gym.report.junit import postprocess_junit
from pytest_gym.report.summary import flat_properties, synthetic_reports, write_summary
from pytest_gym.stash import EXPORTS_KEY, RESULTS_KEY, RUN_KEY, VERDICTS_KEY


class SuiteJudge:
    """Judge the suites once, on the owner, before pytest's own reports (JUnit) are written."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        results = config.stash.get(RESULTS_KEY, None)
        if results is None or not results.trials:
            return
        run = config.stash[RUN_KEY]
        run.close()  # every rollout of this process is in the run folder now
        run.aggregate_metrics()
        verdicts = results.judge(config.rootpath)
        config.stash[VERDICTS_KEY] = verdicts
        write_summary(run, verdicts)
        failed = False
        session.testscollected += sum(len(v.gates) + (v.comparison is not None) for v in verdicts)
        for verdict in verdicts:
            config.hook.pytest_gym_suite_result(suite=verdict.suite, metrics=verdict.metrics())
            for report in synthetic_reports(verdict):
                config.hook.pytest_runtest_logreport(report=report)
                failed = failed or report.failed
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


class JunitAfterWrite:
    """Post-process the JUnit file after pytest wrote it (pytest writes it in a plain sessionfinish)."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        xmlpath = getattr(config.option, "xmlpath", None)
        verdicts = config.stash.get(VERDICTS_KEY, None)
        if not xmlpath or hasattr(config, "workerinput"):
            return
        path = Path(xmlpath)
        if not path.exists():
            return
        suites = {v.suite: flat_properties(v) for v in verdicts or []}
        postprocess_junit(path, suites, xsd_strict=True, keep_errors=True)


class Exports:
    """Run the exports last, when the JUnit file, the summary and the exit status are final."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        run = config.stash[RUN_KEY]
        if config.stash.get(VERDICTS_KEY, None) is None:
            return
        outcomes = export_run(config, run.run_dir, run.settings, int(session.exitstatus))
        config.stash[EXPORTS_KEY] = outcomes
        failed = any(result.status == "failed" for _, result in outcomes)
        if failed and not run.settings.export_soft and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


class Finisher:
    """Stop the deployment after every other sessionfinish implementation ran."""

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        if session.shouldstop or session.shouldfail or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            session.config.stash[RUN_KEY].stop_dispatch()  # -x, --maxfail, Ctrl-C: cancel, do not drain
        try:
            return (yield)
        finally:
            session.config.stash[RUN_KEY].finish()
