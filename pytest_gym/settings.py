"""Every setting of the plugin: one declaration, one help text, one lookup order.

Lookup order for each setting: the command line, then a suite file (when the
setting may appear there), then the ini file (``gym_<name>``), then the default.
A bad value is reported with where it came from, so the fix is obvious.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

Kind = Literal["str", "int", "float", "list", "flag"]


@dataclass(frozen=True)
class Spec:
    """How one setting is spelled on the command line and in the ini file."""

    name: str
    help: str
    kind: Kind = "str"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    is_path: bool = False

    @property
    def flag(self) -> str:
        return "--gym-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "gym_" + self.name

    @property
    def dest(self) -> str:
        return "gym_" + self.name


SPECS: tuple[Spec, ...] = (
    Spec(
        "dataset",
        "jsonl dataset to run as tests; repeatable (ini: gym_dataset, one path a line, relative to rootdir)",
        "list",
        "PATH",
        is_path=True,
    ),
    Spec("repeats", "trials per task, reported as [r0], [r1], ... (default 1)", "int", "N"),
    Spec("url", "attach to a running Gym head server (e.g. http://127.0.0.1:11000); starts nothing", metavar="URL"),
    Spec("config", "Gym config file for `gym env start --config`; repeatable", "list", "PATH", is_path=True),
    Spec("resources_server", "resources server to start (`gym env start --resources-server`)", metavar="NAME"),
    Spec("model_type", "model server type to start (default openai_model)", metavar="TYPE"),
    Spec(
        "set",
        "extra Gym setting KEY=VALUE, passed as Hydra +KEY=VALUE (write ++KEY=VALUE to override); repeatable",
        "list",
        "KEY=VALUE",
    ),
    Spec(
        "model_url",
        "policy model base URL (OpenAI-compatible, e.g. http://host:8000/v1); key from $GYM_POLICY_API_KEY",
        metavar="URL",
    ),
    Spec("model", "policy model name", metavar="NAME"),
    Spec(
        "agent",
        "agent to route every row to (sets agent_ref); default: the row's own, else the only agent",
        metavar="NAME",
    ),
    Spec(
        "policy",
        "built-in policy: 'scripted' starts a deterministic local model server (default none)",
        choices=("none", "scripted"),
    ),
    Spec("policy_answer", "what the scripted policy answers (default \\boxed{A})", metavar="TEXT"),
    Spec("policy_latency_ms", "latency the scripted policy adds to each call, in ms (default 0)", "float", "MS"),
    Spec("cli", "the gym executable (default: `gym` on PATH)", metavar="PATH"),
    Spec(
        "server_venv",
        "run every Gym server in this venv instead of building one each ('auto': the gym CLI's own venv)",
        metavar="PATH|auto",
        is_path=True,
    ),
    Spec(
        "run_dir",
        "folder for this run's Gym log and artifacts (default: a new folder under .pytest_gym/runs)",
        metavar="PATH",
        is_path=True,
    ),
    Spec("startup_timeout", "seconds to wait for Gym to be ready (default 240)", "float", "S"),
    Spec("shutdown_grace", "seconds Gym gets to stop after SIGINT before SIGTERM/SIGKILL (default 30)", "float", "S"),
    Spec("trial_timeout", "seconds one rollout may take (default 600)", "float", "S"),
    Spec(
        "concurrency",
        "rollouts in flight for the whole run, across all xdist workers together (default 8)",
        "int",
        "C",
    ),
    Spec("reward_key", "field of Gym's answer that holds the reward (default reward)", metavar="KEY"),
    Spec("min_reward", "a trial passes when its reward is at least this (default 1.0)", "float", "X"),
    Spec(
        "retries",
        "attempts after an infrastructure fault, with jittered exponential backoff; never for a low reward (default 0)",
        "int",
        "N",
    ),
    Spec(
        "max_errors",
        "once more trials than N (or P% of the run's) errored, report the rest as errors at once",
        metavar="N|P%",
    ),
    Spec(
        "resume",
        "reuse the finished trials of an earlier run folder (same agent, model and environment)",
        metavar="RUN_DIR",
        is_path=True,
    ),
    Spec("progress_interval", "seconds between progress lines on long runs (default 10; -q hides them)", "float", "S"),
    Spec(
        "gate",
        "suite gate '<metric> <op> <number>'; metrics: mean_reward, pass@K, pass^K, error_rate, "
        "ci_low(mean_reward); repeatable",
        "list",
        "EXPR",
    ),
    Spec(
        "verdict",
        "'trial': every low-reward trial fails (default); "
        "'gate': low rewards are xfail, only gates, regressions and errors fail the run",
        choices=("trial", "gate"),
    ),
    Spec(
        "baseline",
        "baseline file to compare this run with (per-task results by content hash)",
        metavar="PATH",
        is_path=True,
    ),
    Spec("update_baseline", "write this run's results to --gym-baseline (atomically)", "flag"),
    Spec(
        "max_regression", "a significant drop of mean reward larger than this fails the run (default 0.0)", "float", "X"
    ),
    Spec("export", "exporter to run at the end (summary, mlflow, github, or a plugin's); repeatable", "list", "NAME"),
    Spec(
        "export_opt",
        "exporter setting NAME.KEY=VALUE (credentials come from the environment); repeatable",
        "list",
        "NAME.KEY=VALUE",
    ),
    Spec("export_soft", "a failed export is reported but does not fail the run", "flag"),
    Spec(
        "summary",
        "write the run summary (suite metrics, gates, baseline) as JSON here as well",
        metavar="PATH",
        is_path=True,
    ),
)

SPEC_BY_NAME: dict[str, Spec] = {spec.name: spec for spec in SPECS}


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
    export: tuple[str, ...] = ()
    export_opt: tuple[str, ...] = ()
    export_soft: bool = False

    @property
    def starts_gym(self) -> bool:
        return self.url is None


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("gym", "pytest-gym: NeMo Gym evaluations as tests")
    for spec in SPECS:
        cli_help = spec.help.replace("%", "%%")  # argparse %-formats option help ("N|P%" would break --help)
        ini_type: Literal["linelist", "string", "bool"] = "string"
        if spec.kind == "flag":
            group.addoption(spec.flag, dest=spec.dest, action="store_true", default=None, help=cli_help)
            ini_type = "bool"
        else:
            action = "append" if spec.kind == "list" else "store"
            group.addoption(
                spec.flag,
                dest=spec.dest,
                action=action,
                default=None,
                metavar=spec.metavar,
                choices=spec.choices,
                help=cli_help,
            )
            ini_type = "linelist" if spec.kind == "list" else "string"
        parser.addini(spec.ini, help=spec.help, type=ini_type, default=None)


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
    Raises ``pytest.UsageError`` naming the setting and where its bad value came from.
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
            raise pytest.UsageError(
                f"pytest-gym: invalid value {raw!r} for {spec.name} from {_where(source, spec)}: {reason}"
            ) from None
    return GymSettings(**values)


def resolve_path(value: str, base: Path) -> Path:
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    return Path(os.path.abspath(path if path.is_absolute() else base / path))
