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
from typing import Protocol

import pytest

from pytest_gym.collect import GymTask, GymTrial


def _number(value: object) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


def _config_method(config: pytest.Config) -> tuple[str, bool]:
    """pytest-timeout's method and ``func_only`` for the run (option, then ini; its default method)."""
    method = config.getoption("timeout_method", None) or config.getini("timeout_method")
    default = "signal" if hasattr(signal, "SIGALRM") else "thread"
    return str(method or default), bool(config.getini("timeout_func_only"))


def signal_timeout(config: pytest.Config) -> bool:
    """Whether pytest-timeout may raise into pytest's thread during a trial's setup: loaded, a timeout set (option,
    ``PYTEST_TIMEOUT`` or ini, in pytest-timeout's order), the ``signal`` method, setup not exempt (``func_only``).
    A ``timeout`` marker on a Gym item is seen at the end of collection (``TimeoutMarkers``)."""
    if not config.pluginmanager.hasplugin("timeout"):
        return False
    try:
        value: object = config.getoption("timeout", None)
        if value is None:
            value = os.environ.get("PYTEST_TIMEOUT") or config.getini("timeout")
        method, func_only = _config_method(config)
    except ValueError:  # a pytest-timeout without these settings
        return False
    seconds = _number(value)  # None for no value ("None", "": not numbers)
    return seconds is not None and seconds > 0 and method == "signal" and not func_only


def marked_signal_timeout(item: pytest.Item) -> bool:
    """Whether the item's ``timeout`` marker (``timeout(30)``, ``timeout(30, "signal")``, ``timeout(timeout=30,
    method=..., func_only=...)``, as pytest-timeout reads it) sets a signal timeout over its setup."""
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return False
    args, kwargs = marker.args, marker.kwargs
    seconds = _number(kwargs.get("timeout", args[0] if args else None))
    try:
        method, func_only = _config_method(item.config)
    except ValueError:
        return False
    method = str(kwargs.get("method", args[1] if len(args) > 1 else None) or method)
    return seconds is not None and seconds > 0 and method == "signal" and not kwargs.get("func_only", func_only)


class TimeoutMarkers:
    """At the end of collection, before any rollout: a Gym item a conftest gave a signal ``timeout`` marker moves the
    rollouts' loop to a thread of its own (``run.inline_loop``), as a run-wide timeout does at install."""

    def __init__(self, run: _Run) -> None:
        self._run = run

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        gym_items = (item for item in session.items if isinstance(item, (GymTrial, GymTask)))
        if self._run.inline_loop is None and any(marked_signal_timeout(item) for item in gym_items):
            self._run.inline_loop = False


class _Run(Protocol):
    inline_loop: bool | None


def watch_timeouts(config: pytest.Config, run: _Run) -> None:
    """With pytest-timeout loaded, a run-wide signal timeout moves the loop now, a marker on an item at collection."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    if signal_timeout(config):  # its signal must find pytest's thread waiting, never inside a rollout
        run.inline_loop = False
    elif not config.pluginmanager.has_plugin(_PLUGIN_NAME):
        config.pluginmanager.register(TimeoutMarkers(run), _PLUGIN_NAME)


_PLUGIN_NAME = "pytest-gym-timeout-markers"
