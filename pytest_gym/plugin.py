"""pytest-gym wiring: options, fixtures and hooks. The logic lives in the modules they call."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Generator
from pathlib import Path

import pytest

from pytest_gym import hookspecs
from pytest_gym.deployment import GymError
from pytest_gym.gymrun import GymRun, GymServer, check_run_dir_unused, new_run_dir
from pytest_gym.items import GymDatasetFile, GymTrial
from pytest_gym.results import TrialOutcome
from pytest_gym.settings import GymSettings, add_options, resolve
from pytest_gym.verdict import raise_fault

RUN_KEY = pytest.StashKey[GymRun]()
WORKER_RUN_DIR = "pytest_gym_run_dir"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _settings(config: pytest.Config) -> GymSettings:
    return resolve(config.getoption, config.getini, cli_base=config.invocation_params.dir, ini_base=config.rootpath)


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
    _add_dataset_args(config, settings)  # workers too: xdist gives them the invocation args
    config.stash[RUN_KEY] = GymRun(settings=settings, run_dir=run_dir, owner=owner)
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
    run = parent.config.stash[RUN_KEY]
    if str(file_path) not in run.settings.dataset:
        return None
    collector: GymDatasetFile = GymDatasetFile.from_parent(parent, path=file_path)
    collector.repeats = run.settings.repeats
    collector.agent = run.settings.agent
    collector.min_reward = run.settings.min_reward
    collector.reward_key = run.settings.reward_key
    return collector


@pytest.fixture(scope="session")
def gym_server(request: pytest.FixtureRequest) -> GymServer:
    """The run's Gym deployment (started once, or attached with --gym-url)."""
    run = request.config.stash[RUN_KEY]
    # An xdist worker does not know which items it will be given: it runs each on demand.
    worker = hasattr(request.config, "workerinput")
    planned = [] if worker else [item.spec for item in request.session.items if isinstance(item, GymTrial)]
    try:
        return run.open(planned)
    except GymError as exc:
        pytest.fail(f"pytest-gym: {exc}", pytrace=False)


@pytest.fixture
def gym_rollout(request: pytest.FixtureRequest, gym_server: GymServer) -> TrialOutcome:
    """This trial's finished rollout. Runs in setup, so an infrastructure fault is an error."""
    node = request.node
    if not isinstance(node, GymTrial):
        pytest.fail("gym_rollout is only for trial items; use gym_server.run(row) in your own tests", pytrace=False)
    run = request.config.stash[RUN_KEY]
    assert run.dispatcher is not None
    try:
        outcome = run.dispatcher.result(node.spec)
    except concurrent.futures.CancelledError:
        pytest.fail("cancelled: the run was stopped before this rollout started", pytrace=False)
    node.user_properties.extend(outcome.properties())
    if not outcome.ok:
        raise_fault(outcome)
    return outcome


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    session = item.session
    if session.shouldstop or session.shouldfail:
        item.config.stash[RUN_KEY].stop_dispatch()


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        session.config.stash[RUN_KEY].finish()


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.finish()
