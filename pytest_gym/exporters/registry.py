"""Which exporters exist (built-ins, entry points, conftest hooks), configuring them, and running them."""

from __future__ import annotations

import difflib
import importlib.metadata
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pytest_gym.core.masking import SECRET_NAME
from pytest_gym.exporters.api import (
    ENTRY_POINT_GROUP,
    ExportConfigError,
    Exporter,
    ExportResult,
    ExportRun,
    _env_var,
    mask_text,
)
from pytest_gym.exporters.github import GithubExporter
from pytest_gym.exporters.mlflow import MlflowExporter
from pytest_gym.exporters.summary import SummaryExporter
from pytest_gym.exporters.wandb import WandbExporter
from pytest_gym.runfolder.layout import EXPORTED_FILES


class ExporterRegistry(dict[str, type[Exporter]]):
    """Exporter classes by name, plus ``broken``: names whose class could not be loaded -> why.

    A broken third-party package is reported only when its exporter is selected,
    so it never breaks runs that do not use it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.broken: dict[str, str] = {}


def _builtin_exporters() -> list[type[Exporter]]:
    return [SummaryExporter, MlflowExporter, GithubExporter, WandbExporter]


def _class_problem(obj: Any) -> str | None:
    if not isinstance(obj, type):
        return f"{obj!r} is not a class"
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        return f"{obj.__qualname__} has no `name` string"
    settings = getattr(obj, "Settings", None)
    if not (isinstance(settings, type) and issubclass(settings, BaseModel)):
        return f"{obj.__qualname__}.Settings is not a pydantic model"
    if not callable(getattr(obj, "export", None)):
        return f"{obj.__qualname__} has no export(run) method"
    return None


def _origin(cls: type[Any]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def available_exporters(
    entry_point_group: str = ENTRY_POINT_GROUP, extra: Iterable[type[Exporter]] = ()
) -> ExporterRegistry:
    """Built-ins, then entry points of ``entry_point_group``, then ``extra`` (classes from a conftest hook).

    Two different classes claiming one name make that name broken rather than
    silently letting one win: which one runs must never depend on install order.
    """
    registry = ExporterRegistry()

    def add(obj: Any, where: str) -> None:
        problem = _class_problem(obj)
        if problem is not None:
            registry.broken[where] = f"{where}: {problem}"
            return
        name = obj.name
        if name in registry.broken:
            registry.broken[name] += f"; also defined by {_origin(obj)}"
        elif name in registry and registry[name] is not obj:
            registry.broken[name] = (
                f"exporter name {name!r} is defined twice, by {_origin(registry.pop(name))} and {_origin(obj)}; "
                "uninstall one of them or rename it"
            )
        else:
            registry[name] = obj

    for cls in _builtin_exporters():
        add(cls, cls.name)
    for ep in importlib.metadata.entry_points(group=entry_point_group):
        try:
            obj = ep.load()
        except Exception as exc:
            registry.broken[ep.name] = (
                f"exporter {ep.name!r} could not be loaded from entry point {ep.value!r}: "
                f"{type(exc).__name__}: {mask_text(str(exc))}; fix or uninstall the package that provides it"
            )
            continue
        if isinstance(obj, type) and getattr(obj, "name", ep.name) != ep.name:
            registry.broken[ep.name] = (
                f"entry point {ep.name!r} ({ep.value}) names a class whose name is {getattr(obj, 'name', None)!r}; "
                "they must match"
            )
            continue
        add(obj, ep.name)
    for cls in extra:
        add(cls, getattr(cls, "name", None) or repr(cls))
    return registry


def _describe_settings(exporter: str, model: type[BaseModel]) -> str:
    parts = []
    for key, info in model.model_fields.items():
        env = _env_var(info)
        how = f"from ${env}" if env else ("required" if info.is_required() else f"default {info.default!r}")
        parts.append(f"{key} ({how})")
    return f"{exporter} settings: {', '.join(parts)}" if parts else f"{exporter} takes no settings"


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def configure_exporters(
    names: Sequence[str], options: Sequence[str], available: Mapping[str, type[Exporter]]
) -> list[Exporter]:
    """Instantiate the selected exporters from ``NAME.KEY=VALUE`` options, or raise
    :class:`ExportConfigError` listing every problem (not just the first)."""
    broken: dict[str, str] = getattr(available, "broken", {})
    listing = ", ".join(sorted(available)) or "none"
    problems: list[str] = []
    selected: list[str] = []
    for name in names:
        if name in selected:
            continue
        if name in broken:
            problems.append(broken[name])
        elif name not in available:
            problems.append(f"--gym-export {name}: unknown exporter{_suggest(name, available)}; available: {listing}")
        else:
            selected.append(name)

    values: dict[str, dict[str, str]] = {}
    for option in options:
        head, sep, value = option.partition("=")
        name, dot, key = head.partition(".")
        shown = f"--gym-export-opt {head}=..." if sep else f"--gym-export-opt {option}"
        if not (sep and dot and name and key):
            problems.append(f"{shown}: expected NAME.KEY=VALUE, e.g. --gym-export-opt summary.dir=reports/gym")
            continue
        if name not in available and name not in broken:
            problems.append(f"{shown}: unknown exporter {name!r}{_suggest(name, available)}; available: {listing}")
            continue
        if name not in names:
            problems.append(f"{shown}: exporter {name!r} is not selected; add --gym-export {name} or drop the option")
            continue
        if name not in selected:  # broken: reported with its cause above
            continue
        model = available[name].Settings
        info = model.model_fields.get(key)
        if info is not None and _env_var(info):
            problems.append(
                f"{shown}: {name}.{key} holds a credential and is read only from ${_env_var(info)}; "
                "set that variable instead of passing it on the command line"
            )
            continue
        if info is None and SECRET_NAME.search(key):
            problems.append(
                f"{shown}: credentials are never taken from the command line; "
                "set them in the environment variable the exporter documents"
            )
            continue
        if info is None:
            problems.append(
                f"{shown}: {name} has no setting {key!r}{_suggest(key, model.model_fields)}; "
                f"{_describe_settings(name, model)}"
            )
            continue
        earlier = values.setdefault(name, {}).get(key)
        if earlier is not None and earlier != value:
            problems.append(f"{shown}: {name}.{key} is given twice with different values; keep one")
            continue
        values[name][key] = value

    exporters: list[Exporter] = []
    for name in selected:
        cls = available[name]
        data: dict[str, Any] = dict(values.get(name, {}))
        for key, info in cls.Settings.model_fields.items():
            env = _env_var(info)
            if env and os.environ.get(env):
                data[key] = os.environ[env]
        try:
            settings = cls.Settings.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                key = str(err["loc"][0]) if err["loc"] else ""
                info = cls.Settings.model_fields.get(key)
                env = _env_var(info) if info is not None else None
                if err["type"] == "missing":
                    fix = f"set ${env}" if env else f"add --gym-export-opt {name}.{key}=VALUE"
                    desc = f" ({info.description})" if info is not None and info.description else ""
                    problems.append(f"{name}.{key} is required{desc}: {fix}")
                elif env:
                    problems.append(f"{name}.{key} from ${env} is invalid: {err['msg']}")
                elif key:
                    problems.append(f"--gym-export-opt {name}.{key}=...: bad value {data.get(key)!r}: {err['msg']}")
                else:
                    problems.append(f"{name} settings: {err['msg']}")
            continue
        try:
            exporters.append(cls(settings))
        except Exception as exc:
            problems.append(f"exporter {name!r} could not start: {type(exc).__name__}: {exc}")
    if problems:
        raise ExportConfigError([mask_text(p) for p in problems])
    return exporters


def run_exports(exporters: Sequence[Exporter], run: ExportRun) -> list[tuple[str, ExportResult]]:
    """Run every exporter; an exception becomes a ``failed`` result, so one export never stops the others."""
    results: list[tuple[str, ExportResult]] = []
    for exporter in exporters:
        try:
            result = exporter.export(run)
            if not isinstance(result, ExportResult):
                result = ExportResult("failed", f"export() returned {type(result).__name__}, not an ExportResult")
        except Exception as exc:
            result = ExportResult("failed", f"{type(exc).__name__}: {exc}")
        result.message = mask_text(result.message)
        if result.location is not None:
            result.location = mask_text(result.location)
        results.append((exporter.name, result))
    return results


class BuiltinExports:
    """The configured exporters, run through the public ``pytest_gym_export`` hook like any plugin's."""

    def __init__(self, exporters: list[Exporter]) -> None:
        self.exporters = exporters

    def pytest_gym_export(self, run: ExportRun) -> list[tuple[str, ExportResult]]:
        return run_exports(self.exporters, run)


def export_run(hook: Callable[..., list[Any]], run: ExportRun, config: object) -> list[tuple[str, ExportResult]]:
    """Call every exporter through the ``pytest_gym_export`` hook; (name, result) of each."""
    results: list[tuple[str, ExportResult]] = []
    for returned in hook(run=run, config=config):
        if isinstance(returned, ExportResult):
            results.append(("export", returned))
        elif isinstance(returned, list):
            results.extend((str(name), result) for name, result in returned if isinstance(result, ExportResult))
    return results


def export_run_folder(
    hook: Callable[..., list[Any]], config: object, run_dir: Path, settings: dict[str, Any], exit_status: int
) -> list[tuple[str, ExportResult]]:
    """Export the run folder (its exported files that exist) through the ``pytest_gym_export`` hook."""
    artifacts = [run_dir / name for name in EXPORTED_FILES if (run_dir / name).is_file()]
    return export_run(hook, ExportRun.from_run_dir(run_dir, settings, exit_status, artifacts), config)


def configured_exporters(
    settings: Any, offered: Callable[[], list[list[type[Exporter]]]], plugins: Any
) -> list[Exporter]:
    """The exporters ``--gym-export`` asks for, configured and registered for the end of the run (none asked: [])."""
    if not settings.export and not settings.export_opt:
        return []
    extra = [cls for group in offered() for cls in group]
    exporters = configure_exporters(settings.export, settings.export_opt, available_exporters(extra=extra))
    if exporters:
        plugins.register(BuiltinExports(exporters), "pytest-gym-exports")
    return exporters
