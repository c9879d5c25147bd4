"""Exports at the end of a run: the built-in exporters run as an implementation of ``pytest_gym_export``.

Exporters are chosen and validated when pytest starts (a misconfigured export fails
before any rollout is paid for) and run once, on the process that owns the run,
after the JUnit file and the summary are final.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gym.exporters import (
    ExportConfigError,
    Exporter,
    ExportResult,
    ExportRun,
    available_exporters,
    configure_exporters,
    run_exports,
)
from pytest_gym.settings import GymSettings

ARTIFACTS = (
    "rollouts.jsonl",
    "rollouts_failures.jsonl",
    "rollouts_materialized_inputs.jsonl",
    "rollouts_aggregate_metrics.json",
    "pytest_gym_summary.json",
    "gym_env.log",
    "policy.log",
)


def configured_exporters(config: pytest.Config, settings: GymSettings) -> list[Exporter]:
    if not settings.export and not settings.export_opt:
        return []
    extra = [cls for group in config.hook.pytest_gym_exporters() for cls in group]
    try:
        return configure_exporters(settings.export, settings.export_opt, available_exporters(extra=extra))
    except ExportConfigError as exc:
        raise pytest.UsageError(f"pytest-gym: {exc}") from None


class BuiltinExports:
    """The configured exporters, run through the public ``pytest_gym_export`` hook."""

    def __init__(self, exporters: list[Exporter]) -> None:
        self.exporters = exporters

    def pytest_gym_export(self, run: ExportRun, config: pytest.Config) -> list[tuple[str, ExportResult]]:
        return run_exports(self.exporters, run)


def export_run(
    config: pytest.Config, run_dir: Path, settings: GymSettings, exit_status: int
) -> list[tuple[str, ExportResult]]:
    """Call every ``pytest_gym_export`` implementation; collect the (name, result) pairs they return."""
    artifacts = [run_dir / name for name in ARTIFACTS if (run_dir / name).is_file()]
    run = ExportRun.from_run_dir(run_dir, settings.model_dump(mode="json"), exit_status, artifacts)
    outcomes: list[tuple[str, ExportResult]] = []
    for returned in config.hook.pytest_gym_export(run=run, config=config):
        outcomes.extend(_pairs(returned))
    return outcomes


def _pairs(returned: Any) -> list[tuple[str, ExportResult]]:
    if isinstance(returned, ExportResult):
        return [("export", returned)]
    if isinstance(returned, list):
        return [(str(name), result) for name, result in returned if isinstance(result, ExportResult)]
    return []
