"""Exporters: send a finished run to a folder, MLflow, or the GitHub job summary (see :mod:`.base`)."""

from pytest_gym.exporters.base import (
    ENTRY_POINT_GROUP,
    ExportConfigError,
    Exporter,
    ExporterRegistry,
    ExportResult,
    ExportRun,
    ExportSettings,
    available_exporters,
    configure_exporters,
    env_setting,
    mask_data,
    mask_text,
    masked_artifact,
    plugin_version,
    run_exports,
)

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
