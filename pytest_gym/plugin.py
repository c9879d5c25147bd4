"""pytest-gym wiring: options, fixtures and hooks. The logic lives in the modules they call."""

from __future__ import annotations

import signal
import threading
from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_gym import hookspecs
from pytest_gym.deployment import GymError
from pytest_gym.errorbudget import parse_error_budget
from pytest_gym.exporters import ExportResult
from pytest_gym.gates import Gate
from pytest_gym.gymrun import GymRun, GymServer, check_run_dir_unused, new_run_dir
from pytest_gym.items import GymDatasetFile, GymSuiteFile, GymTrial
from pytest_gym.report.exports import BuiltinExports, configured_exporters, export_run
from pytest_gym.report.junit import postprocess_junit
from pytest_gym.report.progress import OwnerReporting, XdistTotal
from pytest_gym.report.summary import flat_properties, synthetic_reports, write_summary
from pytest_gym.report.terminal import summary_lines
from pytest_gym.results import TrialOutcome
from pytest_gym.settings import GymSettings, add_options, resolve
from pytest_gym.suitefile import is_suite_file, suite_settings
from pytest_gym.trial import TrialContext, trial_outcome
from pytest_gym.verdicts import RunResults, SuiteSettings, SuiteVerdict, parse_gates
from pytest_gym.xdist import session_plan, worker_slot

RUN_KEY = pytest.StashKey[GymRun]()
TRIALS_KEY = pytest.StashKey[TrialContext]()
RESULTS_KEY = pytest.StashKey[RunResults]()
VERDICTS_KEY = pytest.StashKey[list[SuiteVerdict]]()
EXPORTS_KEY = pytest.StashKey[list[tuple[str, ExportResult]]]()
WORKER_RUN_DIR = "pytest_gym_run_dir"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _settings(config: pytest.Config) -> GymSettings:
    return resolve(config.getoption, config.getini, cli_base=config.invocation_params.dir, ini_base=config.rootpath)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, a container stopped) ends the run like Ctrl-C: pytest reports what
    # finished and every sessionfinish runs, so Gym and the policy are stopped and the run folder is whole.
    raise KeyboardInterrupt(f"pytest-gym: stopped by signal {signum}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    settings = _settings(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_dir, owner = Path(workerinput[WORKER_RUN_DIR]), False
    else:
        run_dir = Path(settings.run_dir) if settings.run_dir else new_run_dir(config.rootpath)
        owner = True
        problem = check_run_dir_unused(run_dir)
        if problem:
            raise pytest.UsageError(f"pytest-gym: {problem}")
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    _add_dataset_args(config, settings)  # workers too: xdist gives them the invocation args
    gates = parse_gates(settings.gate, "--gym-gate / gym_gate")
    try:
        parse_error_budget(settings.max_errors)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-gym: --gym-max-errors: {exc}") from None
    if settings.resume and not Path(settings.resume).is_dir():
        raise pytest.UsageError(f"pytest-gym: --gym-resume {settings.resume} is not a run folder")
    if settings.update_baseline and not settings.baseline:
        raise pytest.UsageError("pytest-gym: --gym-update-baseline needs --gym-baseline PATH (where to write it)")
    config.stash[RUN_KEY] = GymRun(settings=settings, run_dir=run_dir, owner=owner, worker=worker_slot(workerinput))
    if owner:
        results = RunResults(settings, gates, settings_for=_suite_settings(config))
        results.narrowed = bool(
            config.getoption("keyword")
            or config.getoption("markexpr")
            or config.getoption("deselect", None)
            or config.getoption("lf", False)
        )
        config.stash[RESULTS_KEY] = results
        exporters = configured_exporters(config, settings)
        if exporters:
            config.pluginmanager.register(BuiltinExports(exporters), "pytest-gym-exports")
        reporting = OwnerReporting(config, results, interval_s=settings.progress_interval)
        config.pluginmanager.register(reporting, "pytest-gym-results")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(XdistTotal(reporting), "pytest-gym-xdist-total")
    if owner:  # registered first: among trylast implementations pluggy calls the latest registered first
        config.pluginmanager.register(_Exports(), "pytest-gym-export-runner")
    config.pluginmanager.register(_JunitAfterWrite(), "pytest-gym-junit")
    config.pluginmanager.register(_Finisher(), "pytest-gym-finisher")
    if config.pluginmanager.hasplugin("xdist"):
        from pytest_gym.xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(config), "pytest-gym-xdist")


def _add_dataset_args(config: pytest.Config, settings: GymSettings) -> None:
    """Make sure every dataset is collected; alone, when the command line named datasets but no paths."""
    datasets = list(settings.dataset)
    if not datasets:
        return
    for dataset in datasets:
        if not Path(dataset).is_file():
            raise pytest.UsageError(
                f"pytest-gym: dataset {dataset} does not exist (from --gym-dataset or gym_dataset); "
                "check the path (relative paths: command line from the current folder, ini from the rootdir)"
            )
    from_cli = bool(config.getoption("gym_dataset"))
    if from_cli and config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = datasets
        return
    known = {str(Path(arg).resolve()) for arg in config.args}
    config.args.extend(d for d in datasets if d not in known)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> GymDatasetFile | None:
    if is_suite_file(file_path):
        suite: GymSuiteFile = GymSuiteFile.from_parent(parent, path=file_path)
        return suite
    run = parent.config.stash[RUN_KEY]
    if str(file_path) not in run.settings.dataset:
        return None
    collector: GymDatasetFile = GymDatasetFile.from_parent(parent, path=file_path)
    collector.configure(run.settings)
    return collector


def _suite_settings(config: pytest.Config) -> SuiteSettings:
    """How the owner finds each suite's settings and gates (it may not have collected: xdist)."""
    run = config.stash[RUN_KEY]
    cli_gates = parse_gates(run.settings.gate, "--gym-gate / gym_gate")

    def settings_for(suite: str) -> tuple[GymSettings, list[Gate]]:
        path = config.rootpath / suite
        if not is_suite_file(path):
            return run.settings, cli_gates
        settings, _ = suite_settings(
            path, config.getoption, config.getini, config.invocation_params.dir, config.rootpath
        )
        return settings, parse_gates(settings.gate, f"suite file {path}")

    return settings_for


@pytest.fixture(scope="session")
def gym_server(request: pytest.FixtureRequest) -> GymServer:
    """The run's Gym deployment (started once, or attached with --gym-url)."""
    run = request.config.stash[RUN_KEY]
    # Every selected trial, in run order (identical on all xdist workers, which claim them from one another).
    planned, upcoming = session_plan(request.session)
    context = request.config.stash[TRIALS_KEY] = TrialContext.for_run(run.settings, planned)
    try:
        return run.open(planned, upcoming, skip=context.reused_nodeids(planned))
    except GymError as exc:
        pytest.fail(f"pytest-gym: {exc}", pytrace=False)


@pytest.fixture
def gym_rollout(request: pytest.FixtureRequest, gym_server: GymServer) -> TrialOutcome:
    """This trial's finished rollout. Runs in setup, so an infrastructure fault is an error."""
    node = request.node
    if not isinstance(node, GymTrial):
        pytest.fail("gym_rollout is only for trial items; use gym_server.run(row) in your own tests", pytrace=False)
    return trial_outcome(request.config.stash[RUN_KEY], node, node.spec, request.config.stash[TRIALS_KEY])


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    session = item.session
    if session.shouldstop or session.shouldfail:
        item.config.stash[RUN_KEY].stop_dispatch()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Judge the suites once, on the owner, before pytest's own reports are written."""
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


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
    result = yield
    config = terminalreporter.config
    verdicts = config.stash.get(VERDICTS_KEY, None)
    run = config.stash.get(RUN_KEY, None)
    if verdicts and run is not None and config.get_verbosity() >= 0:
        update = None
        if run.settings.baseline:
            update = f"pytest ... --gym-baseline {run.settings.baseline} --gym-update-baseline"
        terminalreporter.write_sep("=", "pytest-gym")
        for line in summary_lines(verdicts, update):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"run folder: {run.run_dir}")
        context = config.stash.get(TRIALS_KEY, None)
        for note in [*run.notes, *(context.notes if context else [])]:
            terminalreporter.write_line(f"note: {note}")
        for name, outcome in config.stash.get(EXPORTS_KEY, []):
            where = f" [{outcome.location}]" if outcome.location else ""
            terminalreporter.write_line(f"export {name}: {outcome.status} - {outcome.message}{where}")
    return result


class _JunitAfterWrite:
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


class _Exports:
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


class _Finisher:
    """Stop the deployment after every other sessionfinish implementation ran."""

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        if session.shouldstop or session.shouldfail or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            session.config.stash[RUN_KEY].stop_dispatch()  # -x, --maxfail, Ctrl-C: cancel, do not drain
        try:
            return (yield)
        finally:
            session.config.stash[RUN_KEY].finish()


def pytest_unconfigure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.finish()
