"""Every setting of the plugin: one declaration, one help text, one lookup order.

Lookup order for each setting: the command line, then a suite file (when the
setting may appear there), then the ini file (``gym_<name>``), then the default.
A bad value is reported with where it came from, so the fix is obvious.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_gym.core.options import SPECS, Spec


class GymSettings(BaseModel):
    """Resolved settings of one run. Values only: serialisable, so they can reach xdist workers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: tuple[str, ...] = ()
    repeats: int = Field(1, ge=1, le=100_000)
    url: str | None = Field(None, pattern=r"^https?://[^\s/]+(/.*)?$")
    config: tuple[str, ...] = ()
    resources_server: str | None = None
    model_type: str = "openai_model"
    set: tuple[str, ...] = Field((), description="KEY=VALUE")
    model_url: str | None = Field(None, pattern=r"^https?://\S+$")
    model: str | None = None
    agent: str | None = None
    policy: Literal["none", "scripted"] = "none"
    policy_answer: str = "\\boxed{A}"
    policy_latency_ms: float = Field(0.0, ge=0.0)
    cli: str = "gym"
    server_venv: str | None = None
    run_dir: str | None = None
    startup_timeout: float = Field(240.0, gt=0)
    shutdown_grace: float = Field(30.0, ge=0)
    trial_timeout: float = Field(600.0, gt=0)
    concurrency: int = Field(8, ge=1, le=100_000)
    reward_key: str = Field("reward", min_length=1)
    min_reward: float = 1.0
    retries: int = Field(0, ge=0, le=100)
    max_errors: str | None = Field(None, pattern=r"^\s*\d+(\.\d+)?\s*%?\s*$")
    resume: str | None = None
    progress_interval: float = Field(10.0, gt=0)
    gate: tuple[str, ...] = ()
    verdict: Literal["trial", "gate"] = "trial"
    baseline: str | None = None
    update_baseline: bool = False
    max_regression: float = Field(0.0, ge=0.0)
    summary: str | None = None
    html: str | None = None
    export: tuple[str, ...] = ()
    export_opt: tuple[str, ...] = ()
    export_soft: bool = False
    # -- sharding across CI jobs (issue 15) --
    shard: str | None = Field(None, pattern=r"^\s*(\d+\s*/\s*\d+|auto)\s*$")
    shard_verdicts: bool = False
    merge: tuple[str, ...] = ()
    merge_allow_missing: bool = False

    @property
    def starts_gym(self) -> bool:
        return self.url is None


class SettingError(ValueError):
    """A bad setting value, naming the setting and where it came from."""


def _split_list(value: Any) -> tuple[str, ...]:
    items: Sequence[Any] = value if isinstance(value, (list, tuple)) else [value]
    return tuple(str(item) for item in items if str(item).strip())


def _validate_one(name: str, value: Any) -> Any:
    """Validate a single setting through the model, so each error names one source."""
    return GymSettings.model_validate({name: value}).__getattribute__(name)


def _where(source: str, spec: Spec) -> str:
    if source == "cli":
        return f"command line ({spec.flag})"
    if source == "ini":
        return f"ini file ({spec.ini})"
    return source


def resolve(
    getoption: Callable[[str], Any],
    getini: Callable[[str], Any],
    cli_base: Path,
    ini_base: Path,
    overrides: Mapping[str, tuple[Any, str, Path]] | None = None,
) -> GymSettings:
    """Build the settings: CLI, then ``overrides`` (value, where, base folder), then ini, then default.

    Relative paths are made absolute against the folder their source implies: the
    invocation folder for the command line, the rootdir for the ini file.
    Raises ``SettingError`` (a usage error at the top) naming the setting and where its bad value came from.
    """
    values: dict[str, Any] = {}
    for spec in SPECS:
        raw: Any = getoption(spec.dest)
        source, base = "cli", cli_base
        if raw is None and overrides and spec.name in overrides:
            raw, source, base = overrides[spec.name]
        if raw is None or raw == []:
            raw = getini(spec.ini)
            source, base = "ini", ini_base
        if raw is None or raw == [] or raw == "":
            continue
        if spec.kind == "list":
            raw = _split_list(raw)
        if spec.is_path and raw != "auto":
            raw = (
                tuple(str(resolve_path(v, base)) for v in raw) if spec.kind == "list" else str(resolve_path(raw, base))
            )
        try:
            values[spec.name] = _validate_one(spec.name, raw)
        except ValidationError as exc:
            reason = "; ".join(err["msg"] for err in exc.errors())
            raise SettingError(
                f"pytest-gym: invalid value {raw!r} for {spec.name} from {_where(source, spec)}: {reason}"
            ) from None
    return GymSettings(**values)


def resolve_path(value: str, base: Path) -> Path:
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    return Path(os.path.abspath(path if path.is_absolute() else base / path))
