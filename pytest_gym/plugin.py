"""pytest-gym wiring: options, fixtures and hooks that delegate to the session object.

Importing this module is cheap: it registers options from a standard-library table.
Nothing else is imported or created until a gym option, ini setting or suite file
shows the plugin in use; then one ``GymSession`` (``pytest_gym.session``) holds the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from pytest_gym import hookspecs
from pytest_gym.core.options import SPECS, is_suite_file
from pytest_gym.current import SESSION_PLUGIN
from pytest_gym.xdist_hooks import XdistHooks

if TYPE_CHECKING:
    from pytest_gym.collect import GymDatasetFile
    from pytest_gym.runner.server import GymServer
    from pytest_gym.session import GymSession


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gym", "pytest-gym: NeMo Gym evaluations as tests")
    for spec in SPECS:
        cli_help = spec.help.replace("%", "%%")  # argparse %-formats option help ("N|P%" would break --help)
        ini_type: Literal["linelist", "string", "bool"] = "string"
        if spec.kind == "flag":
            group.addoption(spec.flag, dest=spec.dest, action="store_true", default=None, help=cli_help)
            ini_type = "bool"
        else:
            action = "append" if spec.kind == "list" else "store"
            group.addoption(
                spec.flag,
                dest=spec.dest,
                action=action,
                default=None,
                metavar=spec.metavar,
                choices=spec.choices,
                help=cli_help,
            )
            ini_type = "linelist" if spec.kind == "list" else "string"
        parser.addini(spec.ini, help=spec.help, type=ini_type, default=None)


def in_use(config: pytest.Config) -> bool:
    """Whether the command line or the ini file sets any pytest-gym option."""
    for spec in SPECS:
        if config.getoption(spec.dest) not in (None, []):
            return True
        if config.getini(spec.ini) not in (None, [], ""):
            return True
    return False


def active_session(config: pytest.Config) -> GymSession | None:
    session: GymSession | None = config.pluginmanager.get_plugin(SESSION_PLUGIN)
    return session


def install(config: pytest.Config, run_dir: Path | None = None) -> GymSession:
    from pytest_gym.one_run import guard_trials
    from pytest_gym.session import GymSession
    from pytest_gym.setup_errors import count_setup_errors
    from pytest_gym.timeout_plugin import watch_timeouts

    session = GymSession.install(config, run_dir)
    guard_trials(config, session.add_note)  # a trial is one sample: no rerun plugin reruns it
    count_setup_errors(config)  # a trial another plugin ended in its setup is an errored trial, not none
    watch_timeouts(config, session.run)  # a timeout's signal never lands inside a rollout
    return session


def _value_after_a_space(config: pytest.Config) -> bool:
    """Whether a pytest-gym option may have been given as ``--gym-x VALUE`` (checked further only then)."""
    args = config.invocation_params.args
    return any(arg.startswith("--gym-") and "=" not in arg for arg in args) or "--gym-" in os.environ.get(
        "PYTEST_ADDOPTS", ""
    )


def _gym_ini_keys(config: pytest.Config) -> list[str]:
    """The ``gym_`` keys of the ini file and of ``-o`` (checked further only when there are any): pytest >= 9 keeps
    both in ``_inicfg``, an older one the file's in ``inicfg`` (which pytest 9 deprecates) and ``-o`` apart."""
    found: Iterable[object] | None = getattr(config, "_inicfg", None)
    if found is None:
        found = getattr(config, "inicfg", None) or ()
    overrides = [str(item).split("=", 1)[0] for item in config.getoption("override_ini", None) or ()]
    return sorted({key for key in (*map(str, found), *overrides) if key.startswith("gym_")})


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        gym_keys = _gym_ini_keys(config)
        if gym_keys:
            from pytest_gym.ini_keys import check_ini_keys

            check_ini_keys(config, gym_keys)
        if _value_after_a_space(config):
            from pytest_gym.rootdir_check import check_rootdir

            check_rootdir(config)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(config, lambda run_dir: install(config, run_dir)), "pytest-gym-xdist")
    if in_use(config):
        install(config).add_dataset_args()  # workers too: xdist gives them the invocation args


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> GymDatasetFile | None:
    session = active_session(parent.config)
    if session is None:
        if not is_suite_file(file_path):
            return None
        session = install(parent.config)
    return session.collect_file(file_path, parent)


def _session(request: pytest.FixtureRequest) -> GymSession:
    session = active_session(request.config)
    return session if session is not None else install(request.config)


@pytest.fixture(scope="session")
def gym_server(request: pytest.FixtureRequest) -> GymServer:
    """The run's Gym deployment (started once, or attached with --gym-url)."""
    return _session(request).open_gym(request.session)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = active_session(config)
    if session is not None:
        session.unconfigure()
