"""A suite's rollout health: how many of its trials Gym's health checks found clean, and which checks fired.

A trial's evidence is *healthy* (every check Gym could run passed), *unhealthy* (a check found it broken: an
empty answer, a failed model call, ...) or *unobserved* (the checks had nothing to read: no trajectory, or a
trial that never produced an answer). ``health_clean_rate`` is healthy / (healthy + unhealthy), the share of the
checked trials whose evidence can be trusted; ``unhealthy_trials`` counts the others. Gym's planned release
gating treats a low clean rate as "insufficient evidence": a gate on it fails when nothing was checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

HEALTHY, UNHEALTHY, UNOBSERVED = "healthy", "unhealthy", "unobserved"


@dataclass(frozen=True)
class SuiteHealth:
    """Health verdicts of a suite's trials."""

    healthy: int = 0
    unhealthy: int = 0
    unobserved: int = 0
    #: check code -> trials it fired on.
    by_check: dict[str, int] = field(default_factory=dict)
    #: Why no trial was checked (Gym's checks did not run), for a gate's reason.
    note: str | None = None

    @property
    def checked(self) -> int:
        return self.healthy + self.unhealthy

    @property
    def clean_rate(self) -> float | None:
        """None when nothing was checked, or Gym's own checks did not run (only broken answers are known)."""
        return self.healthy / self.checked if self.checked and not self.note else None

    def why_unmeasured(self) -> str:
        """Why ``health_clean_rate`` has no value."""
        if self.note:
            return self.note
        return (
            f"no trial's evidence was checked ({self.unobserved} unobserved): Gym's health checks read the "
            "trajectories of a run whose Gym pytest-gym started (--gym-trajectories on)"
        )


def suite_health(verdicts: Iterable[tuple[str | None, tuple[str, ...]]], note: str | None = None) -> SuiteHealth:
    """The suite's health from each trial's (verdict, checks); a trial without a verdict is unobserved."""
    counts: Counter[str] = Counter()
    checks: Counter[str] = Counter()
    for verdict, codes in verdicts:
        counts[verdict if verdict in (HEALTHY, UNHEALTHY) else UNOBSERVED] += 1
        checks.update(set(codes))
    return SuiteHealth(counts[HEALTHY], counts[UNHEALTHY], counts[UNOBSERVED], dict(sorted(checks.items())), note)
