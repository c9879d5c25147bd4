"""Each Gym trial runs once per session, whatever plugin reruns failed tests.

pytest-rerunfailures (``--reruns``, ``--force-reruns``, the ``reruns`` ini setting, ``@pytest.mark.flaky``) and
flaky (``--force-flaky``) run a failed test again until it passes. A test of a deterministic program fails the same
way each time; a trial of a stochastic model is one sample. Rerun until it passes, it reports the best of several
samples: a task answered right 1 time in 2 shows 7 passes in 8 under ``--reruns 2``, the gates and the baseline judge
that, and every attempt is a rollout the run pays for. These plugins rerun through ``pytest_runtest_protocol``, so
pytest-gym runs its own items with pytest's own protocol first (``tryfirst``): once, with every other plugin's
wrappers (timeouts, warnings, capture) as usual, and the rest of a suite keeps its reruns. An errored rollout is
retried by ``--gym-retries``; more samples of a task come from ``--gym-repeats``.

pytest-repeat (``--count N``, ``@pytest.mark.repeat(N)``) repeats a test by parametrizing it in
``pytest_generate_tests``, which pytest calls for the functions of test modules; a Gym item is made from a dataset
row and never goes through it. A user who asked for N samples per task would get one per trial, silently: a note
says so too, naming ``--gym-repeats``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pytest

from pytest_gym.collect import GymDatasetFile, GymTask, GymTrial
from pytest_gym.core.numbers import is_int


class _Protocol(Protocol):
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool: ...


#: (plugin, option dest, how the option is spelt) of the rerun requests a run reports.
_RERUN_OPTIONS = (
    ("rerunfailures", "reruns", "--reruns"),
    ("rerunfailures", "force_reruns", "--force-reruns"),
    ("flaky", "force_flaky", "--force-flaky"),
)


def rerun_request(config: pytest.Config) -> str | None:
    """How this run asks for failed tests to be rerun (``--reruns 2``), or None."""
    for plugin, dest, flag in _RERUN_OPTIONS:
        if not config.pluginmanager.hasplugin(plugin):
            continue
        value = config.getoption(dest, None)
        if value is True:
            return flag
        if is_int(value) and value > 0:
            return f"{flag} {value}"
    # pytest-rerunfailures reads the ini setting only when --reruns is not given (--reruns 0 turns it off).
    if config.pluginmanager.hasplugin("rerunfailures") and config.getoption("reruns", None) is None:
        try:
            value = config.getini("reruns")
        except ValueError:  # an older pytest-rerunfailures, without the ini setting
            return None
        if str(value or "").strip() not in ("", "0"):
            return f"reruns = {value} (ini)"
    return None


def rerun_note(request: str) -> str:
    return (
        f"{request} does not rerun Gym trials: each runs once. A trial is one sample of a stochastic model; rerun "
        "until it passes it would report the best of several (pass rates and mean reward too high) and pay for "
        "every attempt. --gym-retries retries errored rollouts; --gym-repeats takes more samples per task."
    )


def repeat_request(config: pytest.Config) -> str | None:
    """How this run asks pytest-repeat to repeat every test (``--count 5``), or None (``--count 1`` is its default)."""
    if not config.pluginmanager.hasplugin("repeat"):
        return None
    value = config.getoption("count", None)
    return f"--count {value}" if is_int(value) and value > 1 else None


def repeat_marked(item: pytest.Item) -> bool:
    """Whether ``item`` carries a repeat marker that would repeat a test function (``repeat(n)``, n > 1)."""
    marker = item.get_closest_marker("repeat")
    if marker is None:
        return False
    try:
        return int(marker.args[0]) > 1
    except (IndexError, TypeError, ValueError):  # pytest-repeat would fail on it: it asks for nothing
        return False


def suite_repeats(items: list[pytest.Item]) -> list[int]:
    """The ``--gym-repeats`` of the suites of ``items`` (a suite file may set its own), each once."""
    return sorted({item.parent.repeats for item in items if isinstance(item.parent, GymDatasetFile)})


def repeat_note(request: str, repeats: list[int]) -> str:
    """``repeats``: the ``--gym-repeats`` this run's suites take (several: suite files set their own)."""
    said = ", ".join(map(str, repeats))
    this_run = f" (this run: {said})" if len(repeats) == 1 else f" (this run's suites: {said})" if repeats else ""
    return (
        f"{request} does not repeat Gym trials: pytest-repeat repeats test functions, and a Gym trial is not one. "
        f"--gym-repeats N takes N samples per task{this_run}."
    )


class OneRunPerTrial:
    """Registered beside the session: runs Gym items with pytest's own ``runner`` protocol, ahead of rerun
    plugins; other items are left to the plugins as usual. ``note`` hears once that a rerun was asked for, and
    once that pytest-repeat was (by an option, read at the first Gym item when every plugin is configured, or by
    a ``flaky`` or ``repeat`` marker on one)."""

    def __init__(self, runner: _Protocol, note: Callable[[str], None]) -> None:
        self._runner, self._note = runner, note
        self._options_read = self._rerun_done = self._repeat_done = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if not isinstance(item, (GymTrial, GymTask)):
            return None
        if not (self._rerun_done and self._repeat_done):
            self._tell(item)
        return self._runner.pytest_runtest_protocol(item=item, nextitem=nextitem)

    def _tell(self, item: pytest.Item) -> None:
        options, self._options_read = not self._options_read, True
        if options and not item.config.pluginmanager.hasplugin("repeat"):
            self._repeat_done = True  # without pytest-repeat nothing repeats: a repeat marker asks for nothing
        if not self._rerun_done:
            request = rerun_request(item.config) if options else None
            if request is None and item.get_closest_marker("flaky") is not None:
                request = "The flaky marker"
            if request is not None:
                self._rerun_done = True
                self._note(rerun_note(request))
        if not self._repeat_done:
            request = repeat_request(item.config) if options else None
            if request is None and repeat_marked(item):
                request = "The repeat marker"
            if request is not None:
                self._repeat_done = True
                self._note(repeat_note(request, suite_repeats(item.session.items)))


#: The guard's name in the plugin manager.
PLUGIN_NAME = "pytest-gym-one-run-per-trial"


def guard_trials(config: pytest.Config, note: Callable[[str], None]) -> None:
    """Register the guard once (a no-op without pytest's ``runner`` plugin); ``note`` hears of a rerun request."""
    runner: _Protocol | None = config.pluginmanager.get_plugin("runner")
    if runner is not None and not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(OneRunPerTrial(runner, note), PLUGIN_NAME)
