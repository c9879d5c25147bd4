"""Exporters: named plugins that send a finished run where people already look.

An exporter is a class with a ``name``, a pydantic ``Settings`` model and an
``export(run)`` method. Settings are validated when pytest starts
(``registry.configure_exporters``), so a misconfigured export fails before any
rollout is paid for; exports run once at the end (``registry.run_exports``) and
report their outcome instead of raising, so one broken tracking server never
hides the test results.

Third parties register an exporter class through the ``pytest_gym.exporters``
entry-point group, or return it from a ``conftest.py`` hook (``pytest_gym_exporters``).
This module is the API they build on: it imports no built-in exporter.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_gym.core.masking import known_secrets, mask_mapping, mask_secrets
from pytest_gym.judge.summary import (
    RunSummary,
    SpendSummary,
    SuiteSummary,
    SummaryError,
    UnjudgedSpend,
    parse_summary,
)
from pytest_gym.runfolder.layout import SUMMARY_FILE

ENTRY_POINT_GROUP = "pytest_gym.exporters"
_ENV_KEY = "pytest_gym_env"


def mask_text(text: str) -> str:
    """What an exporter sends, as text: every credential masked (known values, URL passwords, tokens) by the one
    masking owner, :func:`pytest_gym.core.masking.mask_secrets`."""
    return mask_secrets(text)


def mask_data(data: Any) -> Any:
    """What an exporter sends, as data (mappings, lists, strings): masked by the one masking owner."""
    return mask_mapping(data)


@dataclass(frozen=True)
class ExportRun:
    """Everything an exporter may send about one finished run.

    ``settings`` is already masked by the caller; exporters still pass what they
    write through :func:`pytest_gym.core.masking.mask_mapping`, because a leaked key
    cannot be taken back.
    """

    run_id: str
    run_dir: Path
    summary: dict[str, Any]
    settings: dict[str, Any]
    artifacts: list[Path] = field(default_factory=list)
    exit_status: int = 0

    @functools.cached_property
    def _typed(self) -> RunSummary | None:
        """The summary, typed (``pytest_gym.judge.summary``), parsed once; None when it is not one pytest-gym
        wrote."""
        try:
            return parse_summary(self.summary)
        except SummaryError:
            return None

    @property
    def suites(self) -> dict[str, SuiteSummary]:
        """The summary's suites, typed; none when the summary is not one pytest-gym wrote. The built-in exporters
        read these; ``summary`` is the same as JSON."""
        return self._typed.suites if self._typed is not None else {}

    @property
    def budget(self) -> SpendSummary | None:
        """The run's budget and spend (``--gym-max-cost``/``--gym-max-tokens``), when it had one."""
        return self._typed.budget if self._typed is not None else None

    @property
    def unjudged(self) -> UnjudgedSpend | None:
        """What rollouts the run paid for and judged nowhere spent (a stopped run's, ahead of pytest), when any."""
        return self._typed.unjudged if self._typed is not None else None

    @classmethod
    def from_run_dir(
        cls,
        run_dir: Path,
        settings: Mapping[str, Any],
        exit_status: int,
        artifacts: Sequence[Path] | None = None,
    ) -> ExportRun:
        """Build the run from its folder: the summary from ``pytest_gym_summary.json`` and,
        unless given, every file in the folder as an artifact (half-written ``*.tmp`` left out)."""
        summary_path = run_dir / SUMMARY_FILE
        summary: dict[str, Any] = (
            json.loads(summary_path.read_text(encoding="utf-8"))
            if summary_path.exists()
            else {"run_dir": str(run_dir), "suites": {}}
        )
        if artifacts is None:
            artifacts = sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))
        return cls(
            run_id=run_dir.name,
            run_dir=run_dir,
            summary=summary,
            settings=mask_data(dict(settings)),
            artifacts=list(artifacts),
            exit_status=int(exit_status),
        )


@dataclass
class ExportResult:
    """What one export did. ``skipped``: already exported (or nothing to export to);
    ``failed``: an expected failure, reported rather than raised."""

    status: Literal["succeeded", "skipped", "failed"]
    message: str
    location: str | None = None


class ExportSettings(BaseModel):
    """Base for exporter settings: unknown keys are errors, so a typo is never ignored."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class Exporter(ABC):
    """A named exporter. Subclasses set ``name`` and ``Settings`` and implement ``export``.

    ``export`` must not raise for expected failures (unreachable server, missing
    optional dependency): return a ``failed`` result with the fix instead.
    Exporting the same run twice must be harmless: return ``skipped``.
    """

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]] = ExportSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    @abstractmethod
    def export(self, run: ExportRun) -> ExportResult: ...


def env_setting(var: str, description: str, default: Any = None) -> Any:
    """A settings field read only from the environment variable ``var``.

    Use it for credentials: :func:`configure_exporters` fills it from ``$var``
    and refuses it on the command line, where it would land in shell history,
    CI logs and process listings.
    """
    return Field(
        default, description=f"{description} (from ${var}, never the command line)", json_schema_extra={_ENV_KEY: var}
    )


def _env_var(info: Any) -> str | None:
    extra = info.json_schema_extra
    return extra.get(_ENV_KEY) if isinstance(extra, dict) else None


class ExportConfigError(ValueError):
    """Every problem with the export options at once, each with its fix."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listing = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"pytest-gym exports are misconfigured ({len(self.problems)} problem(s)):\n{listing}")


def plugin_version() -> str:
    """The installed pytest-gym version, recorded with every export so readers know what wrote it."""
    try:
        return importlib.metadata.version("pytest-gym")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def masked_artifact(path: Path, staging: Path) -> Path:
    """``path`` itself, or a masked copy in ``staging`` when the file holds a known secret.

    Run-folder files come from Gym and policies that may echo a key back; an
    exporter that uploads files checks them here first.
    """
    secrets = [s.encode() for s in known_secrets()]
    if not secrets:
        return path
    data = path.read_bytes()
    if not any(s in data for s in secrets):
        return path
    for s in secrets:
        data = data.replace(s, b"***")
    copy = staging / path.name
    n = 1
    while copy.exists():
        copy = staging / f"{n}" / path.name
        n += 1
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(data)
    return copy
