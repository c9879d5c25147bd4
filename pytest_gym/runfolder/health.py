"""Rollout health in a run folder: which trials Gym's health checks found unhealthy, and with which checks.

Two sources, one meaning (Gym's check codes, ``nemo_gym/health/checks.py``):

- ``rollout_verdicts.jsonl``, written by Gym's own checks on the run folder at the end of the run (one row per
  record of ``rollouts.jsonl``: ``rollout_id``, ``verdict`` healthy/unhealthy/unobserved, ``findings``);
- the failure rows of trials whose answer alone showed broken evidence (``rollout.evidence``, applied as each
  trial finished: those trials are errors, so their rows are in ``rollouts_failures.jsonl``), stamped with the
  checks that found it (``_pytest_gym_health``).

Read back bounded, like every run-folder file (``records.read_records``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.runfolder.layout import FAILURES_FILE, HEALTH_VERDICTS_FILE
from pytest_gym.runfolder.records import HEALTH_KEY, ROLLOUT_ID_KEY, RecordError, read_records

_CODE = re.compile(r"[a-z][a-z0-9_]{0,80}")
_MAX_CODES = 32
VERDICTS = ("healthy", "unhealthy", "unobserved")


def codes_of(value: Any) -> tuple[str, ...]:
    """Check codes from a list (of codes or of Gym's findings with ``check``): identifiers only, bounded."""
    if not isinstance(value, list):
        return ()
    found: list[str] = []
    for item in value[:_MAX_CODES]:
        code = item.get("check") if isinstance(item, Mapping) else item
        if isinstance(code, str) and _CODE.fullmatch(code) and code not in found:
            found.append(code)
    return tuple(found)


@dataclass(frozen=True)
class TrialHealth:
    """One trial's health: Gym's verdict and the checks that found its evidence broken."""

    verdict: str
    checks: tuple[str, ...] = ()


@dataclass
class RunHealth:
    """Every trial's health in a run folder, by ``_ng_rollout_id`` (pytest-gym gives each trial its own)."""

    trials: dict[str, TrialHealth] = field(default_factory=dict)
    #: Whether Gym's own checks ran on the folder (its verdicts file is there).
    checked: bool = False

    def codes(self) -> dict[str, tuple[str, ...]]:
        return {rollout: health.checks for rollout, health in self.trials.items() if health.checks}


def read_run_health(run_dir: Path) -> RunHealth:
    """The folder's health verdicts (none when neither source is there); a file no run wrote is skipped."""
    health = RunHealth()
    try:
        rows = read_records(run_dir / HEALTH_VERDICTS_FILE)
        health.checked = (run_dir / HEALTH_VERDICTS_FILE).is_file()
        failures = read_records(run_dir / FAILURES_FILE)
    except (RecordError, OSError):
        return health
    for row in rows:
        rollout, verdict = row.get("rollout_id"), row.get("verdict")
        if isinstance(rollout, str) and verdict in VERDICTS:
            health.trials[rollout] = TrialHealth(str(verdict), codes_of(row.get("findings")))
    for row in failures:
        rollout, checks = row.get(ROLLOUT_ID_KEY), codes_of(row.get(HEALTH_KEY))
        if isinstance(rollout, str) and checks:
            health.trials[rollout] = TrialHealth("unhealthy", checks)
    return health


def trial_health(run_dir: Path) -> dict[str, tuple[str, ...]]:
    """``_ng_rollout_id`` -> the checks that found the trial unhealthy (the report's view)."""
    return read_run_health(run_dir).codes()
