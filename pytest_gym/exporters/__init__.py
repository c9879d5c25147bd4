"""Exporters: send a finished run to a folder, MLflow, or the GitHub job summary.

The API (:mod:`.api`) is what third-party exporters build on; :mod:`.registry`
finds, configures and runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from pytest_gym.exporters.registry import ExporterRegistry, available_exporters, configure_exporters, run_exports

_REGISTRY = ("ExporterRegistry", "available_exporters", "configure_exporters", "run_exports")


def __getattr__(name: str) -> Any:
    # the registry imports every built-in exporter: only the owner runs exports, workers never need it
    if name in _REGISTRY:
        from pytest_gym.exporters import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
