"""Each Gym trial runs once per session, whatever plugin reruns failed tests.

pytest-rerunfailures (``--reruns``, ``--force-reruns``, the ``reruns`` ini setting, ``@pytest.mark.flaky``) and
flaky (``--force-flaky``) run a failed test again until it passes. A test of a deterministic program fails the same
way each time; a trial of a stochastic model is one sample. Rerun until it passes, it reports the best of several
samples: a task answered right 1 time in 2 shows 7 passes in 8 under ``--reruns 2``, the gates and the baseline judge
that, and every attempt is a rollout the run pays for. These plugins rerun through ``pytest_runtest_protocol``, so
pytest-gym runs its own items with pytest's own protocol first (``tryfirst``): once, with every other plugin's
wrappers (timeouts, warnings, capture) as usual, and the rest of a suite keeps its reruns. An errored rollout is
retried by ``--gym-retries``; more samples of a task come from ``--gym-repeats``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pytest

from pytest_gym.collect import GymTask, GymTrial
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


class OneRunPerTrial:
    """Registered beside the session: runs Gym items with pytest's own ``runner`` protocol, ahead of rerun
    plugins; other items are left to the plugins as usual. ``note`` hears once that a rerun was asked for (by an
    option, read at the first Gym item when every plugin is configured, or by a ``flaky`` marker on one)."""

    def __init__(self, runner: _Protocol, note: Callable[[str], None]) -> None:
        self._runner, self._note = runner, note
        self._options_read = self._told = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if not isinstance(item, (GymTrial, GymTask)):
            return None
        if not self._told:
            self._tell(item)
        return self._runner.pytest_runtest_protocol(item=item, nextitem=nextitem)

    def _tell(self, item: pytest.Item) -> None:
        request = None if self._options_read else rerun_request(item.config)
        self._options_read = True
        if request is None and item.get_closest_marker("flaky") is not None:
            request = "The flaky marker"
        if request is not None:
            self._told = True
            self._note(rerun_note(request))


#: The guard's name in the plugin manager.
PLUGIN_NAME = "pytest-gym-one-run-per-trial"


def guard_trials(config: pytest.Config, note: Callable[[str], None]) -> None:
    """Register the guard once (a no-op without pytest's ``runner`` plugin); ``note`` hears of a rerun request."""
    runner: _Protocol | None = config.pluginmanager.get_plugin("runner")
    if runner is not None and not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(OneRunPerTrial(runner, note), PLUGIN_NAME)
