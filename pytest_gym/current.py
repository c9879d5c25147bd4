"""The one way to the run's session from other modules of the top layer: a typed accessor.

``GymSession`` (``pytest_gym.session``) imports the collectors and the xdist hooks; they cannot import it
back. They see it through ``SessionView``, the part of it they use, stored under one stash key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_gym.core.outcome import TrialOutcome, TrialSpec

if TYPE_CHECKING:
    from pytest_gym.core.settings import GymSettings
    from pytest_gym.judge.known import KnownFailures
    from pytest_gym.suiteset import Suites

#: The name the session object is registered under as a plugin (its methods are hooks).
SESSION_PLUGIN = "pytest-gym-session"


class ProgressView(Protocol):
    total: int | None


class SessionView(Protocol):
    """What the collectors and the xdist hooks use of the session."""

    early_aggregate: bool
    settings: GymSettings
    known: KnownFailures | None

    @property
    def run_dir(self) -> Path: ...
    @property
    def progress(self) -> ProgressView: ...
    @property
    def suites(self) -> Suites: ...
    @property
    def resume(self) -> bool: ...

    def plan(self, session: pytest.Session) -> list[TrialSpec]: ...
    def trial_outcome(self, item: Any) -> TrialOutcome: ...
    def spec_outcome(self, session: pytest.Session, spec: TrialSpec) -> TrialOutcome: ...
    def open_gym(self, session: pytest.Session, early: bool = False) -> object: ...
    def add_worker_notes(self, notes: Sequence[object], state: Mapping[str, Any] | None = None) -> None: ...
    def worker_payload(self) -> dict[str, Any]: ...
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None: ...


SESSION_KEY = pytest.StashKey[SessionView]()


def current_session(config: pytest.Config) -> SessionView | None:
    """The run's session in this process, or None while pytest-gym is not in use."""
    return config.stash.get(SESSION_KEY, None)
