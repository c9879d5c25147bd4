"""pytest-timeout's signal and the event loop that drives the rollouts.

Without xdist, pytest's thread runs that loop while a trial waits (fewer thread switches than a loop thread).
pytest-timeout's default method raises its timeout from a SIGALRM handler in pytest's thread, in whatever runs there:
landing in a rollout's step, it would end that rollout's task (its slot never given back, so every later trial waits
and times out too) and the trial whose time ran out would not see it. When such a timeout is set, the loop runs in a
thread of its own, and the signal only ever interrupts pytest's wait for a result.
"""

from __future__ import annotations

import os
import signal

import pytest


def _number(value: object) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


def signal_timeout(config: pytest.Config) -> bool:
    """Whether pytest-timeout may raise into pytest's thread during a trial's setup: loaded, a timeout set (option,
    ``PYTEST_TIMEOUT`` or ini, in pytest-timeout's order), the ``signal`` method, setup not exempt (``func_only``).
    A ``timeout`` marker a conftest puts on Gym items is not seen here."""
    if not config.pluginmanager.hasplugin("timeout"):
        return False
    try:
        value: object = config.getoption("timeout", None)
        if value is None:
            value = os.environ.get("PYTEST_TIMEOUT") or config.getini("timeout")
        method = config.getoption("timeout_method", None) or config.getini("timeout_method")
        func_only = config.getini("timeout_func_only")
    except ValueError:  # a pytest-timeout without these settings
        return False
    seconds = _number(value)  # None for no value ("None", "": not numbers)
    if seconds is None or seconds <= 0:
        return False
    default = "signal" if hasattr(signal, "SIGALRM") else "thread"
    return (method or default) == "signal" and not func_only
