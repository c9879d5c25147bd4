"""``summary``: one JSON file per run in a folder, for tools that collect results from many runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from pytest_gym.core.atomic import write_atomically
from pytest_gym.exporters.api import Exporter, ExportResult, ExportRun, ExportSettings, mask_data, plugin_version

FORMAT_VERSION = 1


class SummarySettings(ExportSettings):
    dir: Path = Field(description="folder the summary goes to, as <dir>/<run id>.json")

    @field_validator("dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        """Resolved when pytest starts, so a test that changes the working folder cannot move it."""
        return value.expanduser().absolute()


def summary_document(run: ExportRun) -> dict[str, Any]:
    """The exported JSON: the run's suite metrics plus what identifies and explains the run."""
    document = {
        "format": FORMAT_VERSION,
        "pytest_gym_version": plugin_version(),
        "run_id": run.run_id,
        "run_dir": str(run.run_dir),
        "exit_status": run.exit_status,
        "suites": run.summary.get("suites", {}),
        "settings": run.settings,
    }
    extra = {k: v for k, v in run.summary.items() if k not in ("suites", "run_dir")}
    if extra:
        document["summary"] = extra
    masked: dict[str, Any] = mask_data(document)
    return masked


class SummaryExporter(Exporter):
    """Writes ``<dir>/<run_id>.json``; readers never see a half-written file (tmp + os.replace)."""

    name = "summary"
    Settings = SummarySettings
    settings: SummarySettings

    def export(self, run: ExportRun) -> ExportResult:
        target = self.settings.dir / f"{run.run_id}.json"
        if target.exists():
            return ExportResult("skipped", f"{target} already exists: run {run.run_id} was exported", str(target))
        text = json.dumps(summary_document(run), indent=2, sort_keys=True, default=str) + "\n"
        try:
            write_atomically(target, text.encode("utf-8"))
        except OSError as exc:
            return ExportResult("failed", f"cannot write {target}: {exc.strerror or exc}", str(target))
        return ExportResult("succeeded", f"wrote {target}", str(target))
