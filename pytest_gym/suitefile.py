"""Suite files (``*.gym.yaml``): a dataset plus the settings it is judged with, collected like tests.

Read with OmegaConf (so ``${oc.env:VAR}`` works) and validated by a pydantic model;
every error names the file and the key. Command-line options override the file,
the file overrides the ini file: the one lookup order of :mod:`pytest_gym.core.settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pytest_gym.core.settings import GymSettings, resolve
from pytest_gym.judge.gates import GateSyntaxError, parse_gate


class SuiteFileError(Exception):
    """A suite file that cannot be used; the message names the file, the key and the fix."""


class SuiteFile(BaseModel):
    """What a suite file may say (names as in the ini file, without the ``gym_`` prefix)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    dataset: str | None = Field(None, min_length=1)
    #: A Gym benchmark: its servers are started with the run's, its prepared data is the dataset.
    benchmark: str | None = Field(None, min_length=1)
    benchmark_data: str | None = Field(None, min_length=1)
    #: Nested Gym (Hydra) parameters for the run's ``gym env start``: flattened to ``++a.b.c=value``.
    hydra: dict[str, Any] = Field(default_factory=dict)
    agent: str | None = None
    repeats: int | None = Field(None, ge=1)
    min_reward: float | None = None
    gates: list[str] = Field(default_factory=list)
    baseline: str | None = None
    max_regression: float | None = Field(None, ge=0)
    reward_key: str | None = None
    verdict: str | None = None
    task_pass: str | None = None
    #: This suite's own budget (besides the run's --gym-max-cost/--gym-max-tokens).
    max_cost: float | None = Field(None, ge=0, allow_inf_nan=False)
    max_tokens: int | None = Field(None, ge=0)
    repeats_adaptive: bool | None = None
    sequential: bool | None = None

    @field_validator("repeats", "min_reward", "max_regression", "max_cost", "max_tokens", mode="before")
    @classmethod
    def _no_switch_as_number(cls, value: Any) -> Any:
        """``repeats: true`` is no count of 1 (pydantic reads a bool as a number)."""
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {str(value).lower()}")
        return value


def load_suite_file(path: Path) -> SuiteFile:
    import yaml  # imported when a suite file is read: pytest start-up is paid by every run
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OmegaConfBaseException, OSError, ValueError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())
        raise SuiteFileError(f"{path}: cannot read the suite file: {detail}") from None
    if not isinstance(raw, dict):
        raise SuiteFileError(f"{path}: a suite file is a mapping of settings, such as 'dataset: data/x.jsonl'")
    try:
        suite = SuiteFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"key {'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors()
        )
        known = ", ".join(SuiteFile.model_fields)
        raise SuiteFileError(f"{path}: {problems} (keys a suite file may hold: {known})") from None
    if (suite.dataset is None) == (suite.benchmark is None):
        raise SuiteFileError(f"{path}: a suite file names exactly one of 'dataset: PATH' and 'benchmark: NAME'")
    return suite


def suite_hydra(path: Path, suite: SuiteFile) -> tuple[str, ...]:
    """The suite file's ``hydra:`` mapping as ``DOTTED.KEY=VALUE`` items (values in Hydra's syntax)."""
    from pytest_gym.core.endpoint import GymError
    from pytest_gym.core.settings import set_credentials
    from pytest_gym.gym.startargs import flatten_hydra

    try:
        items = tuple(flatten_hydra(suite.hydra))
    except GymError as exc:
        raise SuiteFileError(f"{path}: key hydra: {exc}") from None
    for item in items:
        problem = set_credentials(item)
        if problem:
            raise SuiteFileError(
                f"{path}: key hydra holds a credential ({problem}); export it as NAME, pass --gym-secret-env NAME "
                "and write '${oc.env:NAME}' as its value instead"
            )
    return items


def benchmark_overrides(
    name: str,
    getoption: Callable[[str], Any],
    getini: Callable[[str], Any],
    cli_base: Path,
    ini_base: Path,
    overrides: dict[str, tuple[Any, str, Path]] | None = None,
) -> dict[str, tuple[Any, str, Path]]:
    """A benchmark's suite settings (below the command line): its agent, and its config's ``num_repeats``."""
    from pytest_gym.core.endpoint import GymError
    from pytest_gym.gym.benchmarks import find_benchmark

    try:
        bench = find_benchmark(name, resolve(getoption, getini, cli_base=cli_base, ini_base=ini_base))
    except GymError as exc:
        raise SuiteFileError(str(exc)) from None
    where = f"benchmark {name} (config.yaml)"
    found: dict[str, tuple[Any, str, Path]] = {}
    if bench.num_repeats and "repeats" not in (overrides or {}):
        found["repeats"] = (bench.num_repeats, where, cli_base)
    if bench.agent and "agent" not in (overrides or {}):
        found["agent"] = (bench.agent, where, cli_base)
    return found


def suite_settings(
    path: Path,
    getoption: Callable[[str], Any],
    getini: Callable[[str], Any],
    cli_base: Path,
    ini_base: Path,
) -> tuple[GymSettings, SuiteFile]:
    """The settings one suite runs with: command line, then this file, then ini, then defaults."""
    suite = load_suite_file(path)
    where = f"suite file {path}"
    base = path.parent
    overrides: dict[str, tuple[Any, str, Path]] = {}
    for key, name in (
        ("agent", "agent"),
        ("repeats", "repeats"),
        ("min_reward", "min_reward"),
        ("baseline", "baseline"),
        ("max_regression", "max_regression"),
        ("reward_key", "reward_key"),
        ("verdict", "verdict"),
        ("task_pass", "task_pass"),
        ("repeats_adaptive", "repeats_adaptive"),
        ("sequential", "sequential"),
    ):
        value = getattr(suite, key)
        if value is not None:
            overrides[name] = (value, f"{where} (key {key})", base)
    if suite.gates:
        overrides["gate"] = (suite.gates, f"{where} (key gates)", base)
    if suite.benchmark:
        overrides.update(benchmark_overrides(suite.benchmark, getoption, getini, cli_base, ini_base, overrides))
    try:
        settings = resolve(getoption, getini, cli_base=cli_base, ini_base=ini_base, overrides=overrides)
    except Exception as exc:  # a UsageError from resolve: same message, but about this file
        raise SuiteFileError(str(exc).removeprefix("pytest-gym: ")) from None
    for text in settings.gate:
        try:
            parse_gate(text)
        except GateSyntaxError as exc:
            raise SuiteFileError(f"{path}: bad gate from suite file {path} (key gates): {exc}") from None
    if suite.max_cost is not None and settings.price_in is None and settings.price_out is None:
        raise SuiteFileError(
            f"{path}: key max_cost needs the prices to count the cost: --gym-price-in and --gym-price-out"
        )
    if settings.repeats_adaptive:
        for text in settings.gate:
            gate = parse_gate(text)
            if (gate.metric in ("pass@", "pass^") and (gate.k or 1) > 1) or gate.metric == "flaky_rate":
                raise SuiteFileError(
                    f"{path}: gate {gate.label} needs every repeat of every task, and repeats_adaptive stops a "
                    "decided task's repeats early: drop the gate or repeats_adaptive"
                )
    if suite.benchmark:
        return settings, suite
    assert suite.dataset is not None
    dataset = Path(suite.dataset)
    if not dataset.is_absolute():
        dataset = base / dataset
    if not dataset.is_file():
        raise SuiteFileError(f"{path}: key dataset: {dataset} does not exist (relative paths are from the suite file)")
    return settings, suite.model_copy(update={"dataset": str(dataset)})
