"""Progress of a long run, on the process that owns it: trials done / total, errors, running mean.

Plain counting; ``pytest_gym.session`` feeds it every finished trial and prints
``line()`` now and then (``-q`` keeps it quiet).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_gym.core.outcome import TrialOutcome

if TYPE_CHECKING:
    import pytest


@dataclass
class Progress:
    interval_s: float = 10.0
    total: int | None = None
    done: int = 0
    errors: int = 0
    skipped: int = 0
    reward_sum: float = 0.0
    rewards: int = 0
    started: float = field(default_factory=time.monotonic)
    last_line: float = field(default_factory=time.monotonic)

    def add(self, outcome: TrialOutcome) -> None:
        self.done += 1
        if outcome.skipped:
            self.skipped += 1
        if outcome.reward is not None and outcome.error is None:
            self.rewards += 1
            self.reward_sum += outcome.reward
        if outcome.error is not None:
            self.errors += 1

    def print_if_due(self, config: pytest.Config) -> None:
        """The progress line when one is due (not under -q), on a line of its own: never run into pytest's dots
        (xdist's included)."""
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if config.get_verbosity() >= 0 and reporter is not None and self.due():
            from pytest_gym.report.synthetic import fresh_line

            fresh_line(config)
            reporter.write_line(self.line())

    def due(self) -> bool:
        """Whether a progress line is due now (at most one per interval)."""
        now = time.monotonic()
        if now - self.last_line < self.interval_s:
            return False
        self.last_line = now
        return True

    def line(self) -> str:
        total = f"/{self.total}" if self.total else ""
        mean = f"{self.reward_sum / self.rewards:.3f}" if self.rewards else "n/a"
        elapsed = time.monotonic() - self.started
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return (
            f"pytest-gym: {self.done}{total} trials done, {self.errors} errors{skipped}, mean reward {mean} "
            f"({elapsed:.0f} s)"
        )
