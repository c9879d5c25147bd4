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
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import AGENT_TYPE, ENVIRONMENT_TYPE, GymEndpoint, GymError, ServerInstance
from pytest_gym.core.masking import POLICY_KEY_ENV
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.processes import log_tail, spawn_group, stop_group

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


def discover(head_url: str, timeout: float = 10.0) -> GymEndpoint:
    """Ask a running head server for its servers and how rows reach each agent."""
    import yaml  # imported when used: pytest start-up is paid by every run and every xdist worker

    from pytest_gym.rollout.http import FetchError, fetch

    head_url = head_url.rstrip("/")

    def get_json(route: str) -> Any:
        status, data = fetch("GET", f"{head_url}/{route}", timeout=timeout)
        if status >= 400:
            raise FetchError(f"HTTP {status} from {head_url}/{route}")
        return json.loads(data)

    try:
        instances = get_json("server_instances")
        config_text = get_json("global_config_dict_yaml")
    except (FetchError, ValueError) as exc:
        raise GymError(f"cannot read Gym's servers from {head_url}: {exc}") from None
    servers = [
        ServerInstance(
            process_name=str(s["process_name"]),
            server_type=str(s["server_type"]),
            name=str(s.get("name", "")),
            url=str(s["url"]).rstrip("/"),
            pid=s.get("pid"),
        )
        for s in instances
    ]
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
    return GymEndpoint(head_url=head_url, servers=servers, run_routes=routes)


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


def gym_command(
    settings: GymSettings, gym_cli: str, policy_url: str | None, head_port: int, run_dir: Path
) -> list[str]:
    """The ``gym env start`` command line; never holds a secret."""
    args = [gym_cli, "env", "start"]
    for config in settings.config:
        args += ["--config", config]
    if settings.resources_server:
        args += ["--resources-server", settings.resources_server]
    if settings.resources_server or settings.model_type != "openai_model" or not settings.config:
        args += ["--model-type", settings.model_type]
    base_url = policy_url or settings.model_url
    if base_url:
        args.append(f"++policy_base_url={base_url}")
    args.append(f"++policy_model_name={settings.model or 'pytest-gym-scripted'}")
    args.append(f"++head_server.port={head_port}")
    if settings.server_venv:
        venv = Path(gym_cli).resolve().parent.parent if settings.server_venv == "auto" else Path(settings.server_venv)
        links = run_dir / "server-venvs"
        _link_server_venvs(venv, links)
        args += ["++skip_venv_if_present=true", f"++uv_venv_dir={links}"]
    args += [_hydra_override(item) for item in settings.set]
    return args


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
    extra: dict[str, Any] = field(default_factory=dict)


def start_policy(settings: GymSettings, run_dir: Path, timeout: float = 20.0) -> tuple[subprocess.Popen[bytes], str]:
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
        "--answer",
        settings.policy_answer,
        "--latency-ms",
        str(settings.policy_latency_ms),
    ]
    if settings.model:
        args += ["--model", settings.model]
    proc = spawn_group(args, run_dir, run_dir / POLICY_LOG)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.exists():
            return proc, f"http://127.0.0.1:{port_file.read_text().strip()}/v1"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_group(proc.pid, 1.0, proc, first=signal.SIGTERM)
    raise GymError(f"the scripted policy did not start; log {run_dir / POLICY_LOG}:\n{log_tail(run_dir / POLICY_LOG)}")


def wait_ready(head_url: str, proc: subprocess.Popen[bytes], timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    from pytest_gym.rollout.http import FetchError, fetch

    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise GymError(
                f"Gym exited with code {code} during start-up; log {log_path}, last lines:\n{log_tail(log_path)}"
            )
        try:
            status, _ = fetch("GET", f"{head_url}/readyz", timeout=2.0)
            if status == 200:
                return
            last = f"HTTP {status}"
        except FetchError as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(0.25)
    raise GymError(
        f"Gym did not become ready within {timeout:g} s (/readyz: {last}; raise --gym-startup-timeout if it "
        f"is just slow); log {log_path}, last lines:\n{log_tail(log_path)}"
    )


def start_deployment(settings: GymSettings, run_dir: Path) -> tuple[GymEndpoint, Started]:
    """Start the policy (if scripted) and ``gym env start``; stop both again on any failure."""
    started = Started()
    run_dir.mkdir(parents=True, exist_ok=True)
    policy_proc: subprocess.Popen[bytes] | None = None
    gym_proc: subprocess.Popen[bytes] | None = None
    try:
        gym_cli = find_gym_cli(settings.cli)
        if not settings.config and not settings.resources_server:
            raise GymError(
                "nothing to start: pass --gym-resources-server NAME or --gym-config PATH, "
                "or attach to a running Gym with --gym-url"
            )
        policy_url = None
        if settings.policy == "scripted":
            policy_proc, policy_url = start_policy(settings, run_dir)
            started.policy_pid = policy_proc.pid
        elif not settings.model_url:
            raise GymError(
                "no policy model: pass --gym-model-url URL (and --gym-model NAME; key in $GYM_POLICY_API_KEY) "
                "or --gym-policy scripted for the built-in deterministic policy"
            )
        head_port = free_port()
        (run_dir / "env.yaml").write_text(ENV_YAML, encoding="utf-8")
        log_path = run_dir / GYM_LOG
        command = gym_command(settings, gym_cli, policy_url, head_port, run_dir)
        with log_path.open("a", encoding="utf-8") as log:
            log.write("pytest-gym: " + " ".join(command) + "\n")
        gym_proc = spawn_group(command, run_dir, log_path)
        started.gym_pid = gym_proc.pid
        head_url = f"http://127.0.0.1:{head_port}"
        wait_ready(head_url, gym_proc, settings.startup_timeout, log_path)
        endpoint = discover(head_url)
        endpoint.log_path = str(log_path)
        endpoint.policy_url = policy_url
        if policy_proc is not None and policy_url is not None:
            # Watched like Gym's own servers: a dead policy fails the remaining trials at once.
            endpoint.servers.append(
                ServerInstance("scripted_policy", "pytest_gym_policy", "scripted", policy_url, policy_proc.pid)
            )
        endpoint.mark_local()  # started here: its pids are this machine's; record their start times
        return endpoint, started
    except BaseException:
        stop_started(started, settings.shutdown_grace, gym_proc, policy_proc)
        raise


def stop_started(
    started: Started,
    grace: float,
    gym_proc: subprocess.Popen[bytes] | None = None,
    policy_proc: subprocess.Popen[bytes] | None = None,
) -> list[str]:
    notes = []
    if started.gym_pid is not None:
        notes.append("gym: " + stop_group(started.gym_pid, grace, gym_proc))
    if started.policy_pid is not None:
        notes.append("policy: " + stop_group(started.policy_pid, 5.0, policy_proc, first=signal.SIGTERM))
    return notes


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


def acquire(settings: GymSettings, run_dir: Path) -> GymEndpoint:
    """The run's deployment: attached, already started by another process, or started now.

    A failed start is recorded too, so every process reports the same error and
    nobody tries again.
    """
    if settings.url:
        endpoint = discover(settings.url)
        return endpoint
    with _locked(run_dir):
        state = read_state(run_dir)
        if state is not None:
            if state.get("error"):
                raise GymError(state["error"])
            return GymEndpoint.from_json(state["endpoint"])
        try:
            endpoint, started = start_deployment(settings, run_dir)
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
