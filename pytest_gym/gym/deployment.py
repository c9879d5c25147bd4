"""Start, attach to and stop one Gym deployment, and find out where its servers are.

The plugin never imports ``nemo_gym``: it runs the ``gym`` CLI in its own
environment and talks HTTP. One deployment serves the whole run, also under
xdist: the first process that needs it starts it under a file lock and records
it in the run folder; the others read the record; the process that owns the
run (the xdist controller, or the only process) stops it at the end.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytest_gym.core.access import GymAccess, access_hint
from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import AGENT_TYPE, ENVIRONMENT_TYPE, GymEndpoint, GymError, ServerInstance
from pytest_gym.core.masking import POLICY_KEY_ENV, clean_text, mask_secrets, strip_control
from pytest_gym.core.settings import ENV_REFERENCE, GymSettings
from pytest_gym.gym.processes import (
    Supervised,
    first_error,
    log_tail,
    spawn_supervised,
    stop_supervised,
    supervisor_popen,
)
from pytest_gym.gym.trajectories import attached_capture_dir, capture_dir

STATE_FILE = "deployment.json"
LOCK_FILE = ".deployment.lock"
GYM_LOG = "gym_env.log"
POLICY_LOG = "policy.log"
COMPONENT_DIRS = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")


def _environment_servers_by_agent(config: Any) -> dict[str, str]:
    """agent instance name -> environment server instance name, from Gym's resolved config."""
    routes: dict[str, str] = {}
    if not isinstance(config, dict):
        return routes
    for instance_name, instance in config.items():
        servers = instance.get(ENVIRONMENT_TYPE) if isinstance(instance, dict) else None
        if not isinstance(servers, dict):
            continue
        for server in servers.values():
            ref = server.get("agent_server") if isinstance(server, dict) else None
            if isinstance(ref, dict) and ref.get("name"):
                routes.setdefault(str(ref["name"]), str(instance_name))
    return routes


#: Bounds on Gym's /server_instances answer: far above any real deployment, far below harm.
_MAX_SERVERS = 1000
_MAX_NAME = 256
_MAX_URL = 2048


def parse_server_instances(instances: Any, head_url: str) -> list[ServerInstance]:
    """Gym's ``/server_instances`` answer as servers, checked; a GymError naming the first problem otherwise.

    A GymError (unlike the KeyError or TypeError a malformed answer raised before) is recorded with the
    deployment, so every xdist worker reports it instead of starting Gym again.
    """

    def bad(problem: str) -> GymError:
        return GymError(
            clean_text(f"Gym's {head_url}/server_instances answer is malformed: {problem}", 1000)
            + "; is this a NeMo Gym head server (same version as the plugin expects)?"
        )

    if not isinstance(instances, list):
        raise bad(f"a JSON {type(instances).__name__}, not a list of servers")
    if len(instances) > _MAX_SERVERS:
        raise bad(f"{len(instances)} servers, more than the {_MAX_SERVERS} pytest-gym reads")
    servers = []
    for index, entry in enumerate(instances):
        if not isinstance(entry, dict):
            raise bad(f"entry {index} is a JSON {type(entry).__name__}, not an object")
        fields: dict[str, str] = {}
        for key, required, limit in (
            ("process_name", True, _MAX_NAME),
            ("server_type", True, _MAX_NAME),
            ("name", False, _MAX_NAME),
            ("url", True, _MAX_URL),
        ):
            value = entry.get(key)
            if value is None and not required:
                value = ""
            if not isinstance(value, str) or (required and not value):
                raise bad(f"entry {index}: {key!r} is {type(value).__name__}, not a non-empty string")
            if len(value) > limit or value != strip_control(value):
                raise bad(f"entry {index}: {key!r} is longer than {limit} characters or holds control characters")
            fields[key] = value
        if not fields["url"].startswith(("http://", "https://")):
            raise bad(f"entry {index}: 'url' is not an http(s) URL")
        pid = entry.get("pid")
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 2**31):
            raise bad(f"entry {index}: 'pid' is {type(pid).__name__} {pid!r:.40}, not a process id")
        servers.append(
            ServerInstance(
                process_name=fields["process_name"],
                server_type=fields["server_type"],
                name=fields["name"],
                url=fields["url"].rstrip("/"),
                pid=pid,
            )
        )
    return servers


def discover(head_url: str, timeout: float = 10.0, access: GymAccess | None = None) -> GymEndpoint:
    """Ask a running head server for its servers and how rows reach each agent (with ``access``'s headers/TLS)."""
    import yaml  # imported when used: pytest start-up is paid by every run and every xdist worker

    from pytest_gym.rollout.http import FetchError, fetch

    head_url = head_url.rstrip("/")
    access = access or GymAccess()

    def get_json(route: str) -> Any:
        status, data = fetch(
            "GET", f"{head_url}/{route}", timeout=timeout, headers=access.headers, ssl_context=access.ssl_context
        )
        if status >= 400:
            raise FetchError(f"HTTP {status} from {head_url}/{route}")
        return json.loads(data)

    try:
        instances = get_json("server_instances")
        config_text = get_json("global_config_dict_yaml")
    except (FetchError, ValueError, RecursionError) as exc:
        raise GymError(clean_text(f"cannot read Gym's servers from {head_url}: {exc}{access_hint(str(exc))}")) from None
    servers = parse_server_instances(instances, head_url)
    if not isinstance(config_text, str):
        raise GymError(
            f"Gym's {head_url}/global_config_dict_yaml is a JSON {type(config_text).__name__}, not the string of "
            "YAML a Gym head server returns; is this a NeMo Gym head server?"
        )
    # The config may hold the policy key unmasked: it is parsed here and never written out. Plain YAML:
    # interpolations such as ${oc.env:...} stay unresolved strings (only the servers' names are read).
    try:
        config = yaml.load(config_text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception as exc:
        raise GymError(
            f"cannot parse Gym's config from {head_url}/global_config_dict_yaml: {type(exc).__name__}"
        ) from None
    env_for_agent = _environment_servers_by_agent(config)
    by_name = {s.process_name: s for s in servers}
    routes: dict[str, str] = {}
    for server in servers:
        if server.server_type != AGENT_TYPE:
            continue
        env_name = env_for_agent.get(server.process_name)
        target = by_name.get(env_name) if env_name else None
        routes[server.process_name] = (target or server).url + "/run"
    return GymEndpoint(head_url=head_url, servers=servers, run_routes=routes, capture_dir=attached_capture_dir(config))


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
    if settings.resources_server or settings.model_type != "openai_model" or not settings.config:
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


# -- Gym fidelity: search dirs, benchmarks, Hydra parameters, binding a composable agent ------------------


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
    return roots


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


ENV_YAML = f"policy_api_key: ${{oc.env:{POLICY_KEY_ENV},pytest-gym-no-key}}\n"


def find_gym_cli(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise GymError(
            f"Gym is not installed here: {name!r} was not found on PATH. Gym lives in its own "
            "Python 3.13 environment: install it there (scripts/install-gym.sh does) and put its bin/ "
            "on PATH, or pass --gym-cli /path/to/gym, or attach to a running Gym with --gym-url."
        )
    return found


@dataclass
class Started:
    """Processes this run started, recorded so any process can stop them."""

    gym_pid: int | None = None
    policy_pid: int | None = None
    #: The supervised processes (``Supervised`` as dicts): their supervisors stop them.
    supervised: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def _run_owner() -> int | None:
    """The process whose end ends the run, when it is not this one: an xdist worker's controller.

    xdist starts its workers as children of the controller (execnet's popen gateway); the worker that
    starts Gym ends before the controller has finished with it (aggregate metrics, the stop). A worker
    is told apart from a pytest that merely inherited ``PYTEST_XDIST_WORKER`` (a subprocess run from a
    worker's test): xdist sets the variable in the worker itself, so it is not in the worker's initial
    environment (``/proc/self/environ``).
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    try:
        with open("/proc/self/environ", "rb") as fh:
            inherited = b"\0PYTEST_XDIST_WORKER=" in b"\0" + fh.read()
    except OSError:
        inherited = sys.argv[:1] != ["-c"]  # no procfs: execnet starts workers with ``python -c``
    return None if inherited else os.getppid()


def start_policy(
    settings: GymSettings, run_dir: Path, timeout: float = 20.0, owner_pid: int | None = None
) -> tuple[Supervised, str]:
    port_file = run_dir / "policy.port"
    port_file.unlink(missing_ok=True)
    args = [
        sys.executable,
        "-m",
        "pytest_gym.gym.policy",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        # One argv item each (--answer=VALUE): an answer such as "-x" must not read as an option.
        f"--answer={settings.policy_answer}",
        f"--latency-ms={settings.policy_latency_ms}",
    ]
    if settings.model:
        args.append(f"--model={settings.model}")
    try:
        policy = spawn_supervised(
            "policy", args, run_dir, run_dir / POLICY_LOG, first=signal.SIGTERM, grace=5.0, owner_pid=owner_pid
        )
    except OSError as exc:
        raise GymError(f"the scripted policy did not start: {exc}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.exists():
            return policy, f"http://127.0.0.1:{port_file.read_text().strip()}/v1"
        proc = supervisor_popen(policy)
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_supervised([policy])
    raise GymError(f"the scripted policy did not start; log {run_dir / POLICY_LOG}:\n{log_tail(run_dir / POLICY_LOG)}")


def start_model_recorder(settings: GymSettings, run_dir: Path, owner_pid: int | None = None) -> tuple[Supervised, str]:
    """``--gym-policy record|replay``: the recording proxy or the replay server, in place of the model."""
    from pytest_gym.gym.recorder import start_recorder

    if settings.policy == "record" and not settings.model_url:
        raise GymError("--gym-policy record needs --gym-model-url URL: the model whose answers are recorded")
    if settings.policy == "replay" and not settings.cassette:
        raise GymError(
            "--gym-policy replay needs --gym-cassette PATH: a cassette.jsonl, or the run folder of a recording"
        )
    if settings.policy == "replay" and settings.replay_miss == "passthrough" and not settings.model_url:
        raise GymError("--gym-replay-miss passthrough needs --gym-model-url URL: where unrecorded calls go")
    mode: Literal["record", "replay"] = "record" if settings.policy == "record" else "replay"
    return start_recorder(
        mode,
        run_dir,
        upstream=settings.model_url,
        cassette=settings.cassette,
        miss=settings.replay_miss,
        owner_pid=owner_pid,
    )


def gym_environment(settings: GymSettings | None = None) -> dict[str, str]:
    """Gym's environment: ours, with a wide console so its errors are not wrapped at 80 columns in the log.

    Plus ``--gym-env KEY=VALUE``; each ``--gym-secret-env NAME`` must be set here (it is passed by name).
    """
    env = dict(os.environ)
    if not env.get("COLUMNS", "").isdigit() or int(env["COLUMNS"]) < 200:
        env["COLUMNS"] = "200"
    if settings is not None:
        missing = [name for name in settings.secret_env if name not in env]
        if missing:
            raise GymError(
                f"--gym-secret-env {', '.join(missing)}: not set in pytest's environment; export it before "
                "running pytest (its value is passed to Gym by name and never written)"
            )
        for item in settings.env:
            key, _, value = item.partition("=")
            env[key] = value
    return env


def env_note(settings: GymSettings) -> str | None:
    """What the log says about Gym's environment: names, and values masked where they look secret."""
    if not settings.env and not settings.secret_env:
        return None
    parts = [mask_secrets(item) for item in settings.env] + [f"{name}=(passed through)" for name in settings.secret_env]
    return "pytest-gym: environment: " + " ".join(parts)


def _start_log(log_path: Path) -> str:
    """The tail of Gym's log, and the first error in it: the cause often scrolled out of the tail."""
    tail = log_tail(log_path)
    cause = first_error(log_path)
    return tail + (f"\nfirst error in the log: {cause}" if cause else "")


def wait_ready(
    head_url: str, proc: subprocess.Popen[bytes], timeout: float, log_path: Path, access: GymAccess | None = None
) -> None:
    access = access or GymAccess()
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    from pytest_gym.rollout.http import FetchError, fetch

    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise GymError(
                f"Gym exited with code {code} during start-up; log {log_path}, last lines:\n{_start_log(log_path)}"
            )
        try:
            status, _ = fetch(
                "GET", f"{head_url}/readyz", timeout=2.0, headers=access.headers, ssl_context=access.ssl_context
            )
            if status == 200:
                return
            last = f"HTTP {status}"
        except FetchError as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(0.25)
    raise GymError(
        f"Gym did not become ready within {timeout:g} s (/readyz: {last}; raise --gym-startup-timeout if it "
        f"is just slow); log {log_path}, last lines:\n{_start_log(log_path)}"
    )


def start_deployment(
    settings: GymSettings, run_dir: Path, owner_pid: int | None = None, access: GymAccess | None = None
) -> tuple[GymEndpoint, Started]:
    """Start the policy (if scripted) and ``gym env start``; stop both again on any failure.

    Both run under supervisors that stop them when this process (or ``owner_pid``) is gone.
    """
    started = Started()
    run_dir.mkdir(parents=True, exist_ok=True)
    policy: Supervised | None = None
    gym: Supervised | None = None
    try:
        gym_cli = find_gym_cli(settings.cli)
        if not settings.config and not settings.resources_server and not settings.benchmark:
            raise GymError(
                "nothing to start: pass --gym-resources-server NAME or --gym-config PATH, "
                "or attach to a running Gym with --gym-url"
            )
        policy_url = None
        if settings.policy == "scripted":
            policy, policy_url = start_policy(settings, run_dir, owner_pid=owner_pid)
            started.policy_pid = policy.pid
            started.supervised.append(asdict(policy))
        elif settings.policy in ("record", "replay"):
            policy, policy_url = start_model_recorder(settings, run_dir, owner_pid=owner_pid)
            started.policy_pid = policy.pid
            started.supervised.append(asdict(policy))
        elif not settings.model_url:
            raise GymError(
                "no policy model: pass --gym-model-url URL (and --gym-model NAME; key in $GYM_POLICY_API_KEY) "
                "or --gym-policy scripted for the built-in deterministic policy"
            )
        head_port = free_port()
        (run_dir / "env.yaml").write_text(ENV_YAML, encoding="utf-8")
        log_path = run_dir / GYM_LOG
        command = gym_command(settings, gym_cli, policy_url, head_port, run_dir)
        gym_env = gym_environment(settings)
        with log_path.open("a", encoding="utf-8") as log:
            log.write("pytest-gym: " + shlex.join(command) + "\n")
            note = env_note(settings)
            if note:
                log.write(note + "\n")
        try:
            gym = spawn_supervised(
                "gym", command, run_dir, log_path, grace=settings.shutdown_grace, owner_pid=owner_pid, env=gym_env
            )
        except OSError as exc:
            raise GymError(f"Gym did not start: {exc}") from None
        started.gym_pid = gym.pid
        started.supervised.insert(0, asdict(gym))
        head_url = f"http://127.0.0.1:{head_port}"
        gym_proc = supervisor_popen(gym)
        assert gym_proc is not None
        # The supervisor exits with Gym's code when Gym exits by itself.
        wait_ready(head_url, gym_proc, settings.startup_timeout, log_path, access)
        endpoint = discover(head_url, access=access)
        endpoint.log_path = str(log_path)
        endpoint.policy_url = policy_url
        if policy is not None and policy_url is not None:
            # Watched like Gym's own servers: a dead policy fails the remaining trials at once.
            name = "scripted_policy" if settings.policy == "scripted" else f"model_{settings.policy}er"
            endpoint.servers.append(ServerInstance(name, "pytest_gym_policy", settings.policy, policy_url, policy.pid))
        endpoint.mark_local()  # started here: its pids are this machine's; record their start times
        return endpoint, started
    except BaseException:
        stop_started(started, settings.shutdown_grace)
        raise


def stop_started(started: Started, grace: float) -> list[str]:
    """Stop what ``started`` records, all at once; not cut short by SIGINT/SIGTERM meanwhile (bounded)."""
    items = [Supervised(**item) for item in started.supervised]
    for item in items:
        if item.name == "gym":
            item.grace = grace
    return stop_supervised(items)


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / LOCK_FILE).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_state(run_dir: Path, state: dict[str, Any]) -> None:
    write_atomically(run_dir / STATE_FILE, json.dumps(state).encode(), fsync=False)


def acquire(settings: GymSettings, run_dir: Path, access: GymAccess | None = None) -> GymEndpoint:
    """The run's deployment: attached, already started by another process, or started now.

    A failed start is recorded too, so every process reports the same error and
    nobody tries again.
    """
    if settings.url:
        endpoint = discover(settings.url, access=access)
        return endpoint
    with _locked(run_dir):
        state = read_state(run_dir)
        if state is not None:
            if state.get("error"):
                raise GymError(state["error"])
            return GymEndpoint.from_json(state["endpoint"])
        try:
            endpoint, started = start_deployment(settings, run_dir, owner_pid=_run_owner(), access=access)
        except GymError as exc:
            _write_state(run_dir, {"error": str(exc)})
            raise
        _write_state(run_dir, {"endpoint": endpoint.to_json(), "started": asdict(started)})
        return endpoint


def release(settings: GymSettings, run_dir: Path) -> list[str]:
    """Stop what this run started (called once, by the process that owns the run)."""
    if settings.url:
        return []
    with _locked(run_dir):
        state = read_state(run_dir)
        if not state or "started" not in state:
            return []
        started = Started(**state["started"])
        notes = stop_started(started, settings.shutdown_grace)
        state["stopped"] = notes
        del state["started"]
        _write_state(run_dir, state)
        return notes
