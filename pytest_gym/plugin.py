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
from pytest_gym.gates import Gate
from pytest_gym.gymrun import GymRun, GymServer, check_run_dir_unused, new_run_dir
from pytest_gym.items import GymDatasetFile, GymSuiteFile, GymTrial
from pytest_gym.report.exports import BuiltinExports, configured_exporters
from pytest_gym.report.progress import OwnerReporting, XdistTotal
from pytest_gym.report.terminal import write_section
from pytest_gym.results import TrialOutcome
from pytest_gym.session_end import Exports, Finisher, JunitAfterWrite, SuiteJudge
from pytest_gym.settings import GymSettings, add_options, resolve
from pytest_gym.stash import RESULTS_KEY, RUN_KEY, TRIALS_KEY, WORKER_RUN_DIR
from pytest_gym.suitefile import is_suite_file, suite_settings
from pytest_gym.trial import TrialContext, trial_outcome
from pytest_gym.verdicts import RunResults, SuiteSettings, parse_gates
from pytest_gym.xdist import session_plan, worker_slot


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
        config.pluginmanager.register(Exports(), "pytest-gym-export-runner")
        config.pluginmanager.register(SuiteJudge(), "pytest-gym-judge")
    config.pluginmanager.register(JunitAfterWrite(), "pytest-gym-junit")
    config.pluginmanager.register(Finisher(), "pytest-gym-finisher")
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


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
    result = yield
    write_section(terminalreporter)
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.finish()
