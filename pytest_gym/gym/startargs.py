"""The ``gym env start`` command line: the gym CLI, config paths, Hydra overrides quoted so Gym reads them back.

Never holds a secret (settings refuse them); the key reaches Gym through an ``${oc.env:...}`` interpolation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any

from pytest_gym.core.endpoint import GymError
from pytest_gym.core.settings import ENV_REFERENCE, GymSettings
from pytest_gym.gym.trajectories import capture_dir

COMPONENT_DIRS = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")


def find_gym_cli(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise GymError(
            f"Gym is not installed here: {name!r} was not found on PATH. Gym lives in its own "
            "Python 3.13 environment: install it there (scripts/install-gym.sh does) and put its bin/ "
            "on PATH, or pass --gym-cli /path/to/gym, or attach to a running Gym with --gym-url."
        )
    return found


def gym_site(gym_cli: str) -> Path | None:
    """Gym's install root (the site-packages holding ``nemo_gym``), read off the gym CLI's environment: the
    interpreter its ``#!`` line names, else the venv it sits in. None when neither holds Gym (nothing imported)."""
    found = shutil.which(gym_cli)
    if found is None:
        return None
    path = Path(found).resolve()
    venvs = [path.parent.parent]
    try:
        with path.open("rb") as fh:
            first = fh.readline(4096)
    except OSError:
        first = b""
    if first.startswith(b"#!") and first[2:].split():
        venvs.insert(0, Path(first[2:].split()[0].decode(errors="replace")).parent.parent)
    for venv in venvs:
        for site in sorted(venv.glob("lib/python3*/site-packages")):
            if (site / "nemo_gym").is_dir():
                return site
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _hydra_override(item: str) -> str:
    if "=" not in item:
        raise GymError(f"--gym-set expects KEY=VALUE, got {item!r}")
    return item if item.startswith("+") else "+" + item


def _link_server_venvs(venv: Path, target: Path) -> None:
    """Point every Gym component at one venv, so Gym builds none (offline, and 10x faster)."""
    site = next(venv.glob("lib/python3*/site-packages"), None)
    if site is None:
        raise GymError(f"--gym-server-venv {venv} is not a Python venv with site-packages")
    for kind in COMPONENT_DIRS:
        for component in sorted((site / kind).glob("*/")):
            if not component.is_dir() or component.name.startswith("_"):
                continue
            link_dir = target / kind / component.name
            link_dir.mkdir(parents=True, exist_ok=True)
            link = link_dir / ".venv"
            if not link.exists():
                link.symlink_to(venv, target_is_directory=True)


#: A value Hydra reads as this very string unquoted (a name, a path, a plain URL): kept readable in the log.
_PLAIN_VALUE = re.compile(r"[A-Za-z/][A-Za-z0-9_./:-]*")


_HYDRA_WORDS = frozenset({"true", "false", "null", "nan", "inf"})


def hydra_quote(value: str) -> str:
    """``value`` as a Hydra override value that Gym reads back as exactly this string.

    Unquoted, a ``,`` makes a sweep, ``?``/``=``/quotes/brackets are grammar errors, ``${`` an
    interpolation and ``1``/``true`` are not strings. Hydra's quoted string: ``\\'`` is a quote and
    backslashes before a quote or at the end are doubled; OmegaConf's ``\\${`` is a literal ``${``.
    """
    if _PLAIN_VALUE.fullmatch(value) and value.lower() not in _HYDRA_WORDS:
        return value
    value = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    value = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    value = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, value)
    return f"'{value}'"


#: A config path Gym's ``--config`` can carry: it joins them unquoted into ``+config_paths=[a,b]``.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./~+@%:-]+")


def _config_arg(config: str, index: int, run_dir: Path) -> str:
    """``config`` as Gym's ``--config`` takes it: a path with a ``,``, quote, space... is linked by a plain name."""
    if _PLAIN_PATH.fullmatch(config) or not Path(config).is_absolute():
        return config  # relative: as written, Gym resolves it (a bad one is Gym's error to report)
    links = run_dir / "configs"
    links.mkdir(parents=True, exist_ok=True)
    link = links / f"{index}-{re.sub(r'[^A-Za-z0-9_.-]', '_', Path(config).name)}"
    link.unlink(missing_ok=True)
    link.symlink_to(config)
    return str(link)


def gym_command(
    settings: GymSettings, gym_cli: str, policy_url: str | None, head_port: int, run_dir: Path
) -> list[str]:
    """The ``gym env start`` command line; never holds a secret (settings refuse them)."""
    args = [gym_cli, "env", "start"]
    for index, config in enumerate(settings.config):
        args += ["--config", _config_arg(config, index, run_dir)]
    if settings.resources_server:
        args += ["--resources-server", settings.resources_server]
    if (
        settings.resources_server
        or settings.model_type != "openai_model"
        or not settings.config
        or lacks_model(settings, gym_cli, run_dir)
    ):  # a config without a model server (resources_servers/X/configs/Y.yaml alone) gets --gym-model-type's
        args += ["--model-type", settings.model_type]
    base_url = policy_url or settings.model_url
    if base_url:
        args.append(f"++policy_base_url={hydra_quote(base_url)}")
    args.append(f"++policy_model_name={hydra_quote(settings.model or 'pytest-gym-scripted')}")
    # The plugin reaches the head server on 127.0.0.1: pin it there (a config's default_host or
    # use_absolute_ip would otherwise move it to the machine's address).
    args += ["++head_server.host=127.0.0.1", f"++head_server.port={head_port}"]
    if settings.server_venv:
        venv = Path(gym_cli).resolve().parent.parent if settings.server_venv == "auto" else Path(settings.server_venv)
        links = run_dir / "server-venvs"
        _link_server_venvs(venv, links)
        args += ["++skip_venv_if_present=true", f"++uv_venv_dir={hydra_quote(str(links))}"]
    if settings.trajectories == "on":
        # Before --gym-set, so a user's own setting wins; an absolute folder, as Gym requires.
        args += ["++observability_enabled=true", f"++model_call_capture_dir={hydra_quote(str(capture_dir(run_dir)))}"]
    args += [_hydra_override(item) for item in settings.set]
    args += fidelity_args(settings, gym_cli, run_dir)
    return args


def hydra_value(value: Any) -> str:
    """A YAML value as a Hydra override value Gym reads back as the same value (strings quoted as needed).

    A string that is exactly ``${oc.env:NAME}`` stays an interpolation, so Gym reads NAME from its environment
    (the way to give a secret, with --gym-secret-env NAME); any other ``${`` is kept literally."""
    if isinstance(value, str) and ENV_REFERENCE.fullmatch(value):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{hydra_key(str(k))}:{hydra_value(v)}" for k, v in value.items()) + "}"
    return hydra_quote(str(value))


def hydra_key(key: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", key):
        raise GymError(f"Hydra parameter key {key!r}: use letters, digits, '_' and '-' only")
    return key


def flatten_hydra(mapping: dict[str, Any], prefix: str = "") -> list[str]:
    """A nested ``hydra:`` mapping as ``DOTTED.KEY=VALUE`` items (VALUE as JSON, which YAML reads back)."""
    items: list[str] = []
    for key, value in mapping.items():
        dotted = f"{prefix}{hydra_key(str(key))}"
        if isinstance(value, dict) and value:
            items += flatten_hydra(value, dotted + ".")
        else:
            items.append(f"{dotted}={json.dumps(value)}")
    return items


def hydra_item(item: str) -> str:
    """``--gym-hydra KEY=VALUE`` as Gym's override: VALUE read as YAML (``5``, ``true``, ``[a, b]``, ``"x, y"``),
    then written in Hydra's syntax so Gym reads back that very value (a string stays a string)."""
    import yaml

    key, _, text = item.partition("=")
    try:
        value = yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        value = text
    if isinstance(value, (str, int, float, bool, list, dict)) or value is None:
        return f"++{key}={hydra_value(value)}"
    return f"++{key}={hydra_quote(text)}"  # a YAML date or the like: the text as written


def fidelity_args(settings: GymSettings, gym_cli: str, run_dir: Path) -> list[str]:
    args: list[str] = []
    for folder in settings.search_dir:
        args += ["--search-dir", folder]
    for name in settings.benchmark:
        args += ["--benchmark", name]
    if settings.agent_type:  # the harness Gym composes for the benchmarks (and environments) it starts
        args += ["--agent-type", settings.agent_type]
    args += [hydra_item(item) for item in settings.hydra]
    bind = bind_override(settings, gym_cli, run_dir)
    if bind:
        args.append(bind)
    return args


def gym_roots(settings: GymSettings, gym_cli: str, cwd: Path) -> list[Path]:
    """Where Gym looks for a relative config: ``--search-dir`` and ``NEMO_GYM_EXTRA_ROOTS``, its cwd, its install."""
    roots = [Path(d) for d in settings.search_dir]
    roots += [Path(d) for d in os.environ.get("NEMO_GYM_EXTRA_ROOTS", "").split(os.pathsep) if d]
    roots.append(cwd)
    venv = Path(gym_cli).resolve().parent.parent
    roots += sorted(venv.glob("lib/python3*/site-packages"))
    site = gym_site(gym_cli)
    return [*roots, site] if site is not None and site not in roots else roots


def lacks_model(settings: GymSettings, gym_cli: str, run_dir: Path) -> bool:
    """Whether the ``--gym-config`` files (with their ``config_paths``) define no model server instance: False
    when one of them cannot be found here (then Gym gets the configs as given)."""
    roots = gym_roots(settings, gym_cli, run_dir)
    if not all(Path(c).is_file() or any((r / c).is_file() for r in roots) for c in settings.config):
        return False
    merged: dict[str, Any] = {}
    for config in settings.config:
        _load_config_chain(config, roots, merged)
    return not any(isinstance(v, dict) and isinstance(v.get("responses_api_models"), dict) for v in merged.values())


def _load_config_chain(path: str, roots: list[Path], merged: dict[str, Any], depth: int = 0) -> None:
    """Merge a Gym config file and its ``config_paths`` (as Gym would, roughly) into ``merged``."""
    import yaml

    found = Path(path) if Path(path).is_absolute() else next((r / path for r in roots if (r / path).is_file()), None)
    if found is None or depth > 10 or not found.is_file():
        return
    try:
        data = yaml.safe_load(found.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return
    if not isinstance(data, dict):
        return
    for child in data.get("config_paths") or []:
        _load_config_chain(str(child), roots, merged, depth + 1)
    _deep_merge(merged, data)


def _deep_merge(into: dict[str, Any], data: dict[str, Any]) -> None:
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value


def bind_override(settings: GymSettings, gym_cli: str, run_dir: Path) -> str | None:
    """The override that binds a composable agent (``resources_server.name: ???``) to a resources server.

    Gym 0.7.0 itself rehosts such an agent onto the config's other agents; with no other agent it stops
    ("leaves its 'resources_server' unset, but the merged config defines no other agent instance"). Then
    (``auto``) the config's only resources server is bound, or the one ``--gym-bind-resources-server`` names.
    """
    mode = settings.bind_resources_server
    if mode == "off":
        return None
    roots = gym_roots(settings, gym_cli, run_dir)
    merged: dict[str, Any] = {}
    for config in settings.config:
        _load_config_chain(config, roots, merged)
    for name in settings.benchmark:
        _load_config_chain(f"benchmarks/{name}/config.yaml", roots, merged)
    unbound: list[tuple[str, str]] = []
    bound = 0
    resources: list[str] = []
    for instance, body in merged.items():
        if not isinstance(body, dict):
            continue
        if isinstance(body.get("resources_servers"), dict):
            resources.append(str(instance))
        agents = body.get("responses_api_agents")
        for agent_type, agent in agents.items() if isinstance(agents, dict) else []:
            ref = agent.get("resources_server") if isinstance(agent, dict) else None
            if isinstance(ref, dict) and "name" in ref:
                if ref.get("name") in (None, "???"):
                    unbound.append((str(instance), str(agent_type)))
                else:
                    bound += 1
    if len(unbound) != 1:
        return None
    target = mode if mode != "auto" else (resources[0] if len(resources) == 1 and not bound else None)
    if target is None:
        return None
    instance, agent_type = unbound[0]
    return f"++{instance}.responses_api_agents.{agent_type}.resources_server.name={hydra_quote(target)}"
