"""Every setting of the plugin: one declaration, one help text, one lookup order.

Lookup order for each setting: the command line, then a suite file (when the
setting may appear there), then the ini file (``gym_<name>``), then the default.
A bad value is reported with where it came from, so the fix is obvious.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pytest_gym.core.access import HOW_TO_PASS_HEADERS, GymAccess, gym_access, header_problem, origin
from pytest_gym.core.masking import POLICY_KEY_ENV, mask_secrets
from pytest_gym.core.options import SPECS, Spec
from pytest_gym.core.taskrule import TaskRuleError, parse_task_rule
from pytest_gym.core.tracing import trace_url_problem, tracestate_problem

#: The ``policy`` values the model recorder serves (``pytest_gym.standins.recorder``), in place of the model.
RECORDER_POLICIES = ("record", "replay")


class GymSettings(BaseModel):
    """Resolved settings of one run. Values only: serialisable, so they can reach xdist workers."""

    #: No NaN or infinity: a minimum reward of nan fails every trial, a timeout of inf is no timeout.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

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
    policy: Literal["none", "scripted", "record", "replay"] = "none"
    cassette: str | None = None
    replay_miss: Literal["error", "passthrough"] = "error"
    policy_answer: str = "\\boxed{A}"
    policy_latency_ms: float = Field(0.0, ge=0.0)
    cli: str = "gym"
    server_venv: str | None = None
    run_dir: str | None = None
    trajectories: Literal["on", "off"] = "on"
    startup_timeout: float = Field(240.0, gt=0)
    shutdown_grace: float = Field(30.0, ge=0)
    reuse: str | None = None
    reuse_idle: float = Field(900.0, gt=0)
    trial_timeout: float = Field(600.0, gt=0)
    concurrency: int = Field(8, ge=1, le=100_000)
    reward_key: str = Field("reward", min_length=1)
    min_reward: float = 1.0
    retries: int = Field(0, ge=0, le=100)
    max_errors: str | None = Field(None, pattern=r"^\s*[0-9]+(\.[0-9]+)?\s*%?\s*$")
    resume: str | None = None
    rescore: str | None = None
    rescore_force: bool = False
    progress_interval: float = Field(10.0, gt=0)
    gate: tuple[str, ...] = ()
    verdict: Literal["trial", "gate", "task"] = "trial"
    baseline: str | None = None
    update_baseline: bool = False
    baseline_run: str | None = None
    known_failures: str | None = None
    known_failures_strict: bool = False
    max_regression: float = Field(0.0, ge=0.0)
    summary: str | None = None
    html: str | None = None
    export: tuple[str, ...] = ()
    export_opt: tuple[str, ...] = ()
    export_soft: bool = False
    # -- judging: task-pass rule, prices, row fields as keywords and markers
    task_pass: str = "all"
    price_in: float | None = Field(None, ge=0.0, allow_inf_nan=False)
    price_out: float | None = Field(None, ge=0.0, allow_inf_nan=False)
    keyword_field: tuple[str, ...] = ()
    marker_field: str | None = Field(None, min_length=1)
    # -- Gym fidelity: the gym process's environment, Hydra parameters, run timeout, benchmarks
    env: tuple[str, ...] = Field((), description="KEY=VALUE")
    secret_env: tuple[str, ...] = ()
    bind_resources_server: str = Field("auto", min_length=1)
    hydra: tuple[str, ...] = Field((), description="DOTTED.KEY=VALUE")
    run_timeout: float | None = Field(None, gt=0)
    benchmark: tuple[str, ...] = ()
    search_dir: tuple[str, ...] = ()
    benchmark_data: str | None = None
    # -- sharding across CI jobs (issue 15) --
    shard: str | None = Field(None, pattern=r"^\s*([0-9]+\s*/\s*[0-9]+|auto)\s*$")
    shard_verdicts: bool = False
    merge: tuple[str, ...] = ()
    merge_allow_missing: bool = False
    # -- a Gym on another host (issue 15): header values come from the environment (core.access)
    header: tuple[str, ...] = Field((), description="NAME=ENVVAR")
    header_origin: tuple[str, ...] = ()
    ca_file: str | None = None
    # -- Gym-native depth (issue 25)
    health_check: Literal["on", "off"] = "on"
    trace_url: str | None = None
    tracestate: str | None = None
    concurrency_adaptive: Literal["on", "off"] = "on"
    agent_type: str | None = Field(None, pattern=r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)?$")
    # -- affordable runs (issue 22): budgets, adaptive repeats, sequential gates
    max_cost: float | None = Field(None, ge=0.0, allow_inf_nan=False)
    max_tokens: int | None = Field(None, ge=0)
    repeats_adaptive: bool = False
    sequential: bool = False
    seed: int | None = Field(None, ge=0, le=2**63 - 1)

    @property
    def starts_gym(self) -> bool:
        return self.url is None

    def access(self) -> GymAccess:
        """The headers (values from the environment) and TLS trust for talking to Gym; ValueError if unusable."""
        return gym_access(self.header, self.ca_file, url=self.url, header_origin=self.header_origin)

    @field_validator("url")
    @classmethod
    def _head_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.query or parts.fragment or value.rstrip().endswith(("?", "#")):
                raise ValueError(
                    "holds a query string or fragment: pytest-gym appends Gym's routes (/server_instances, /run) "
                    "to the URL, so give scheme://host:port[/path] only (a proxy's credential goes in "
                    "--gym-header NAME=ENVVAR)"
                )
        return value

    @field_validator("header_origin")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if origin(item) is None:
                raise ValueError(f"{item!r} is not an http(s) URL (scheme://host[:port])")
        return value

    @field_validator("model_url")
    @classmethod
    def _no_credentials_in_url(cls, value: str | None) -> str | None:
        problem = value and url_credentials(value)
        if problem:
            raise ValueError(f"holds a credential ({problem}); {HOW_TO_PASS_KEYS}")
        return value

    @field_validator("trace_url")
    @classmethod
    def _trace_url(cls, value: str | None) -> str | None:
        problem = value and (trace_url_problem(value) or url_credentials(value))
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("tracestate")
    @classmethod
    def _tracestate(cls, value: str | None) -> str | None:
        problem = value and tracestate_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("task_pass")
    @classmethod
    def _task_rule(cls, value: str) -> str:
        try:
            return parse_task_rule(value).text
        except TaskRuleError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("env")
    @classmethod
    def _env_items(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not _ENV_NAME.fullmatch(item.partition("=")[0]) or "=" not in item:
                raise ValueError(f"expects KEY=VALUE with KEY an environment variable name, got {item.split('=')[0]!r}")
        return value

    @field_validator("secret_env")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @field_validator("hydra")
    @classmethod
    def _hydra_items(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            key = item.partition("=")[0]
            if "=" not in item or not _HYDRA_KEY.fullmatch(key):
                raise ValueError(f"expects DOTTED.KEY=VALUE (key of letters, digits, _ - and dots), got {key!r}")
            problem = set_credentials(item)
            if problem:
                raise ValueError(f"holds a credential ({problem}); {HOW_TO_PASS_KEYS}")
        return value

    @field_validator("set")
    @classmethod
    def _no_credentials_in_set(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            problem = set_credentials(item)
            if problem:
                raise ValueError(f"holds a credential ({problem}); {HOW_TO_PASS_KEYS}")
        return value


HOW_TO_PASS_KEYS = (
    "credentials are never taken from the command line or the ini file, where they would reach Gym's command "
    f"line, gym_env.log and pytest_gym_run.json: put the policy key in the environment variable {POLICY_KEY_ENV} "
    f"(Gym reads it through env.yaml's ${{oc.env:{POLICY_KEY_ENV}}}) and give the URL without it; for another "
    "Gym setting, write --gym-set KEY='${oc.env:VARIABLE}' so Gym reads it from the environment"
)
HOW_TO_PASS_ENV = (
    "a secret is never taken from the command line or the ini file, where it would reach pytest_gym_run.json "
    "and the logs: export it in pytest's environment and pass it to Gym by name with --gym-secret-env NAME "
    "(its value is masked everywhere and written nowhere)"
)
_SECRET_WORDS = frozenset(
    {"token", "secret", "secrets", "password", "passwd", "pwd", "authorization", "auth", "credential", "credentials",
     "apikey", "sig", "signature"}
)  # fmt: skip
_KEY_PREFIXES = frozenset({"api", "access", "secret", "private", "auth", "client"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HYDRA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*")
#: ``${oc.env:NAME}``: Gym reads the value from its environment (how secrets reach Gym without being written).
ENV_REFERENCE = re.compile(r"\$\{oc\.env:[A-Za-z_][A-Za-z0-9_]*\}")


def secret_name(name: str) -> bool:
    """A setting or query key that names a credential: ``api_key``, ``hf_token``, ``password``, ``key``, ...

    Word by word, so ``max_output_tokens`` and ``tokenizer`` are not secrets.
    """
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if not words:
        return False
    if words == ["key"] or any(w in _SECRET_WORDS for w in words):
        return True
    return any(w == "key" and prev in _KEY_PREFIXES for prev, w in itertools.pairwise(words))


def url_credentials(url: str) -> str | None:
    """What makes a URL carry a credential (user-info, a secret-looking query key); None when nothing does."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if "@" in parts.netloc:
        return "user-info before '@' in the URL"
    for key, _ in parse_qsl(parts.query, keep_blank_values=True):
        if secret_name(key):
            return f"query key {key!r}"
    return None


def set_credentials(item: str) -> str | None:
    """What makes a ``--gym-set KEY=VALUE`` carry a credential; None when nothing does."""
    key, _, value = item.partition("=")
    key = key.lstrip("+~")
    if ENV_REFERENCE.fullmatch(value.strip().strip("'\"")):
        return None  # Gym reads it from the environment: nothing secret on the command line
    if secret_name(key):
        return f"setting {key!r}"
    for match in re.finditer(r"[A-Za-z][A-Za-z0-9+.-]*://\S+", value):
        problem = url_credentials(match.group(0))
        if problem:
            return f"a URL in {key!r} with {problem}"
    return None


#: ``--gym-env`` values a secret-looking key may have: a switch or a number, nothing to hide.
_PLAIN_ENV = re.compile(r"|\d+|true|false|yes|no|on|off|none|null", re.IGNORECASE)


def env_credentials(item: str) -> str | None:
    """What makes a ``--gym-env KEY=VALUE`` carry a credential (a secret-looking KEY with a value that may
    be one); None when nothing does. A URL without credentials, a path, a number or a switch is fine."""
    key, _, value = item.partition("=")
    value = value.strip()
    if not secret_name(key) or _PLAIN_ENV.fullmatch(value) or value.startswith(("/", "~/", "./", "../")):
        return None
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value):
        problem = url_credentials(value)
        return f"a URL in {key!r} with {problem}" if problem else None
    return f"secret-looking key {key!r}"


class SettingError(ValueError):
    """A bad setting value, naming the setting and where it came from."""


def _split_list(value: Any) -> tuple[str, ...]:
    items: Sequence[Any] = value if isinstance(value, (list, tuple)) else [value]
    return tuple(str(item) for item in items if str(item).strip())


#: ``--gym-gate="$GATE"`` with ``GATE`` unset once dropped the gate and the run passed ungated; an empty value
#: on the command line is refused (in the ini file, an empty value still means "not set").
_BLANK_ON_THE_COMMAND_LINE = (
    "pytest-gym: {flag} was given an empty value on the command line (an unset shell variable?); give it a "
    "value, or leave {flag} out to use {ini} from the ini file or the default"
)


def _blank(value: Any) -> bool:
    """Whether a command-line value (a string, or the list an appending option collects) holds an empty one."""
    items = value if isinstance(value, list) else [value]
    return any(isinstance(item, str) and not item.strip() for item in items)


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
    invocation folder for the command line, the rootdir for the ini file (Gym configs:
    only when found there, see ``gym_config_path``). Credentials are refused, never quoted.
    Raises ``SettingError`` (a usage error at the top) naming the setting and where its bad value came from.
    """
    values: dict[str, Any] = {}
    for spec in SPECS:
        raw: Any = getoption(spec.dest)
        source, base = "cli", cli_base
        if raw is not None and _blank(raw):
            raise SettingError(_BLANK_ON_THE_COMMAND_LINE.format(flag=spec.flag, ini=spec.ini))
        if raw is None and overrides and spec.name in overrides:
            raw, source, base = overrides[spec.name]
        if raw is None or raw == []:
            raw = getini(spec.ini)
            source, base = "ini", ini_base
        if raw is None or raw == [] or raw == "":
            continue
        if spec.kind == "list":
            raw = _split_list(raw)
        problem = _credentials(spec.name, raw)
        if problem:  # said without the value: it is a secret
            how = {"header": HOW_TO_PASS_HEADERS, "url": HOW_TO_PASS_HEADERS, "env": HOW_TO_PASS_ENV}.get(
                spec.name, HOW_TO_PASS_KEYS
            )
            raise SettingError(f"pytest-gym: {spec.flag} from {_where(source, spec)} holds a credential "
                               f"({problem}); {how}")  # fmt: skip
        if spec.name == "config":
            raw = tuple(gym_config_path(v, base) for v in raw)
        elif spec.name == "cli" and ("/" in raw or os.sep in raw):
            raw = str(resolve_path(raw, base))  # a path (not a name looked up on PATH): from where it was given
        elif spec.is_path and raw != "auto":
            raw = (
                tuple(str(resolve_path(v, base)) for v in raw) if spec.kind == "list" else str(resolve_path(raw, base))
            )
        if spec.name == "dataset":
            raw = tuple(dict.fromkeys(raw))  # once each: pytest < 8.1 would collect a path given twice twice
        if spec.is_path and spec.name != "config":
            for path in raw if isinstance(raw, tuple) else (raw,):
                if _too_long(path):
                    name = max(Path(path).parts, key=len)
                    raise SettingError(
                        f"pytest-gym: invalid value for {spec.name} from {_where(source, spec)}: a name of {len(name)} "
                        f"characters ({name[:20]!r}...) is too long for a path (the file system refuses to look it "
                        "up); give the path of a file or folder"
                    )
        try:
            values[spec.name] = _validate_one(spec.name, raw)
        except ValidationError as exc:
            reason = "; ".join(err["msg"] for err in exc.errors())
            shown = mask_secrets(repr(raw))  # a query string may hold what no name says is secret
            raise SettingError(
                f"pytest-gym: invalid value {shown} for {spec.name} from {_where(source, spec)}: {reason}"
            ) from None
    return GymSettings(**values)


def _too_long(path: str) -> bool:
    """Whether the file system refuses to look ``path`` up (ENAMETOOLONG): every later exists() would raise."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ENAMETOOLONG
    return False


def _credentials(name: str, raw: Any) -> str | None:
    if name in ("model_url", "url") and isinstance(raw, str):
        return url_credentials(raw)
    if name == "env":
        return next((p for p in (env_credentials(str(item)) for item in raw) if p), None)
    if name in ("set", "hydra"):
        return next((p for p in (set_credentials(str(item)) for item in raw) if p), None)
    if name == "header":
        return next((p for p in (header_problem(str(item)) for item in raw) if p), None)
    return None


def gym_config_path(value: str, base: Path) -> str:
    """A ``--gym-config`` path as Gym would find it from ``base`` (Gym itself runs in the run folder).

    Gym looks for a relative config under ``$NEMO_GYM_EXTRA_ROOTS`` (``--search-dir``), its working
    folder, then its install root: a path found under an extra root, or not found here, stays as written
    for Gym to resolve (``resources_servers/X/configs/Y.yaml``); one found under ``base`` becomes absolute.
    """
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    if path.is_absolute():
        return os.path.abspath(path)
    roots = [Path(d) for d in os.environ.get("NEMO_GYM_EXTRA_ROOTS", "").split(os.pathsep) if d]
    if any(path_exists(root / path) for root in roots):
        return value
    if path_exists(base / path):
        return os.path.abspath(base / path)
    return value


def path_exists(path: Path) -> bool:
    """Whether ``path`` exists; False for a name the file system refuses to look up (too long a name, a NUL): an
    option's value that cannot be a path is found nowhere, where ``Path.exists`` raises."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def resolve_path(value: str, base: Path) -> Path:
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    return Path(os.path.abspath(path if path.is_absolute() else base / path))
