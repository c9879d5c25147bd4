"""Exporters: send a finished run to a folder, MLflow, or the GitHub job summary.

The API (:mod:`.api`) is what third-party exporters build on; :mod:`.registry`
finds, configures and runs them.
"""

from pytest_gym.exporters.api import (
    ENTRY_POINT_GROUP,
    ExportConfigError,
    Exporter,
    ExportResult,
    ExportRun,
    ExportSettings,
    env_setting,
    mask_data,
    mask_text,
    masked_artifact,
    plugin_version,
)
from pytest_gym.exporters.registry import ExporterRegistry, available_exporters, configure_exporters, run_exports

__all__ = [
    "ENTRY_POINT_GROUP",
    "ExportConfigError",
    "ExportResult",
    "ExportRun",
    "ExportSettings",
    "Exporter",
    "ExporterRegistry",
    "available_exporters",
    "configure_exporters",
    "env_setting",
    "mask_data",
    "mask_text",
    "masked_artifact",
    "plugin_version",
    "run_exports",
]
