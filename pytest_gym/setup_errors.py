"""A Gym item's setup that another plugin ended still counts its trials, as errors.

pytest reports such a trial as an error: pytest-timeout's signal raised into the wait for a slow rollout, a conftest
fixture or another plugin's ``pytest_runtest_setup`` that raised. The verdicts read a trial from its report's
properties, which pytest-gym writes only when the trial has an outcome; without them the trial was no trial at all
(6 trials with 5 timed out judged as 1 trial, 0 errors, PASS). This hook gives such a report the properties of an
errored trial, whatever route the exception took. pytest-gym's own failures carry their properties already.
"""

from __future__ import annotations

import pytest

from pytest_gym.collect import GymTask, GymTrial, errored_by_another, raised_by_another
from pytest_gym.core.outcome import TRIAL_MARK, TRIALS_PROPERTY, trials_property

#: The hook's name in the plugin manager.
PLUGIN_NAME = "pytest-gym-setup-errors"


class SetupErrors:
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
        """Before pytest makes the report (which copies the item's properties): the errored trials' properties."""
        if call.when != "setup" or call.excinfo is None or not raised_by_another(call.excinfo.value):
            return
        names = {name for name, _ in item.user_properties}
        if isinstance(item, GymTrial) and TRIAL_MARK not in names:
            item.user_properties.extend(errored_by_another(item.spec).to_properties())
        elif isinstance(item, GymTask) and TRIALS_PROPERTY not in names:  # none of its trials ran (a fixture's error)
            item.user_properties.append(trials_property(errored_by_another(spec) for spec in item.specs))


def count_setup_errors(config: pytest.Config) -> None:
    """Register the hook once."""
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(SetupErrors(), PLUGIN_NAME)
