"""Start and stop one Gym deployment (with its policy stand-in), and its record in a folder.

The plugin never imports ``nemo_gym``: it runs the ``gym`` CLI in its own
environment and talks HTTP. Which deployment a run uses (attached, started, kept) is
``pytest_gym.gym.acquire``'s.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_gym.core.access import GymAccess, without_header_variables
from pytest_gym.core.atomic import write_atomically
from pytest_gym.core.endpoint import GymEndpoint, GymError, ServerInstance
from pytest_gym.core.masking import POLICY_KEY_ENV, mask_secrets
from pytest_gym.core.settings import RECORDER_POLICIES, GymSettings
from pytest_gym.gym.discovery import discover
from pytest_gym.runfolder.layout import GYM_LOG, STATE_FILE

#: Starts of Gym when one fails because a port it picked was taken meanwhile (a race, see start_deployment).
START_ATTEMPTS = 3
ENV_YAML = f"policy_api_key: ${{oc.env:{POLICY_KEY_ENV},pytest-gym-no-key}}\n"
#: The ``server_type`` of the model stand-in a run starts (the scripted policy, the recorder) among Gym's servers.
POLICY_SERVER_TYPE = "pytest_gym_policy"


def policy_process_name(policy: str) -> str:
    """The name the run's model stand-in has among Gym's servers (``scripted_policy``, ``model_recorder``...)."""
    return "scripted_policy" if policy == "scripted" else f"model_{policy}er"


@dataclass
class Started:
    """Processes this run started, recorded so any process can stop them."""

    gym_pid: int | None = None
    policy_pid: int | None = None
    #: The supervised processes (``Supervised`` as dicts): their supervisors stop them.
    supervised: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> Started:
        """The processes a state file records; ValueError when it is not what this plugin wrote (a hand edit)."""
        known = isinstance(data, dict) and set(data) <= {"gym_pid", "policy_pid", "supervised", "extra"}
        supervised, extra = (data.get("supervised", []), data.get("extra", {})) if known else (None, None)
        if not (isinstance(supervised, list) and isinstance(extra, dict)):
            raise ValueError("the started processes are not recorded as pytest-gym records them")
        return cls(data.get("gym_pid"), data.get("policy_pid"), list(supervised), dict(extra))


def gym_environment(settings: GymSettings | None = None) -> dict[str, str]:
    """Gym's environment: ours, with a wide console so its errors are not wrapped at 80 columns in the log.

    Plus ``--gym-env KEY=VALUE``; each ``--gym-secret-env NAME`` must be set here (it is passed by name).
    Without the ``--gym-header`` variables: the proxy's credential is for pytest-gym's own requests.
    """
    env = dict(os.environ)
    if not env.get("COLUMNS", "").isdigit() or int(env["COLUMNS"]) < 200:
        env["COLUMNS"] = "200"
    if settings is not None:
        env = without_header_variables(env, settings.header, keep=(POLICY_KEY_ENV, *settings.secret_env))
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


def log_size(log_path: Path) -> int:
    try:
        return log_path.stat().st_size
    except OSError:
        return 0


def _port_taken(log_path: Path, offset: int, max_bytes: int = 4 * 1024 * 1024) -> bool:
    """Whether the log written since ``offset`` says a server could not bind: address already in use."""
    try:
        with log_path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return False
    return "address already in use" in text.lower()


def wait_ready(
    head_url: str, proc: subprocess.Popen[bytes], timeout: float, log_path: Path, access: GymAccess | None = None
) -> None:
    from pytest_gym.gym.startfailure import start_failure
    from pytest_gym.rollout.http import FetchError, fetch

    access = access or GymAccess()
    deadline = time.monotonic() + timeout
    last = "no answer yet"

    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise GymError(start_failure(f"Gym exited with code {code} during start-up.", log_path))
        try:
            status, _ = fetch(
                "GET",
                f"{head_url}/readyz",
                timeout=2.0,
                headers=access.headers_for(head_url),
                ssl_context=access.ssl_context,
            )
            if status == 200:
                return
            last = f"HTTP {status}"
        except FetchError as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(0.25)
    raise GymError(
        start_failure(
            f"Gym did not become ready within {timeout:g} s (/readyz: {last}; raise --gym-startup-timeout if it "
            "is just slow).",
            log_path,
        )
    )


def start_deployment(
    settings: GymSettings,
    run_dir: Path,
    owner_pid: int | None = None,
    access: GymAccess | None = None,
    idle: tuple[float, Path] | None = None,
) -> tuple[GymEndpoint, Started]:
    """Start the policy (if scripted) and ``gym env start``; stop both again on any failure.

    Both run under supervisors that stop them when this process (or ``owner_pid``) is gone, or once unused for
    ``idle`` (a kept Gym: seconds, its folder).
    """
    # what starts Gym: only the process that starts it (workers and --gym-url runs attach)
    from pytest_gym.gym.startargs import find_gym_cli, free_port, gym_command
    from pytest_gym.process.groups import Supervised, spawn_supervised, stop_supervised, supervisor_popen
    from pytest_gym.standins.launch import start_model_recorder, start_policy

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
            policy, policy_url = start_policy(settings, run_dir, owner_pid=owner_pid, idle=idle)
            started.policy_pid = policy.pid
            started.supervised.append(asdict(policy))
        elif settings.policy in RECORDER_POLICIES:
            policy, policy_url = start_model_recorder(settings, run_dir, owner_pid=owner_pid, idle=idle)
            started.policy_pid = policy.pid
            started.supervised.append(asdict(policy))
        elif not settings.model_url:
            raise GymError(
                "no policy model: pass --gym-model-url URL (and --gym-model NAME; key in $GYM_POLICY_API_KEY) "
                "or --gym-policy scripted for the built-in deterministic policy"
            )
        (run_dir / "env.yaml").write_text(ENV_YAML, encoding="utf-8")
        log_path = run_dir / GYM_LOG
        gym_env = gym_environment(settings)
        for attempt in range(1, START_ATTEMPTS + 1):
            head_port = free_port()
            command = gym_command(settings, gym_cli, policy_url, head_port, run_dir)
            offset = log_size(log_path)
            with log_path.open("a", encoding="utf-8") as log:
                log.write("pytest-gym: " + shlex.join(command) + "\n")
                note = env_note(settings)
                if note:
                    log.write(note + "\n")
            try:
                gym = spawn_supervised(
                    "gym", command, run_dir, log_path, grace=settings.shutdown_grace, owner_pid=owner_pid, env=gym_env,
                    idle=idle,
                )  # fmt: skip
            except OSError as exc:
                raise GymError(f"Gym did not start: {exc}") from None
            started.gym_pid = gym.pid
            started.supervised.insert(0, asdict(gym))
            head_url = f"http://127.0.0.1:{head_port}"
            gym_proc = supervisor_popen(gym)
            assert gym_proc is not None
            try:
                # The supervisor exits with Gym's code when Gym exits by itself.
                wait_ready(head_url, gym_proc, settings.startup_timeout, log_path, access)
                break
            except GymError:
                if attempt == START_ATTEMPTS or gym_proc.poll() is None or not _port_taken(log_path, offset):
                    raise
            # Gym picks its servers' ports at random (10001-20000), where Ray's workers also bind: a port
            # taken between its pick and its bind is a race, not a fault of the setup. Start again.
            started.supervised.pop(0)
            stop_supervised([gym])
            started.gym_pid = None
            with log_path.open("a", encoding="utf-8") as log:
                log.write(
                    f"pytest-gym: a port Gym picked was taken before its server bound it; starting Gym again "
                    f"(attempt {attempt + 1} of {START_ATTEMPTS})\n"
                )
        endpoint = discover(head_url, access=access)
        endpoint.log_path = str(log_path)
        endpoint.policy_url = policy_url
        if policy is not None and policy_url is not None:
            # Watched like Gym's own servers: a dead policy fails the remaining trials at once.
            name = policy_process_name(settings.policy)
            endpoint.servers.append(ServerInstance(name, POLICY_SERVER_TYPE, settings.policy, policy_url, policy.pid))
        endpoint.mark_local()  # started here: its pids are this machine's; record their start times
        return endpoint, started
    except BaseException:
        stop_started(started, settings.shutdown_grace)
        raise


def stop_started(started: Started, grace: float) -> list[str]:
    """Stop what ``started`` records, all at once; not cut short by SIGINT/SIGTERM meanwhile (bounded)."""
    from pytest_gym.process.groups import Supervised, stop_supervised

    items, notes = [], []
    for recorded in started.supervised:
        try:
            items.append(Supervised.from_json(recorded))
        except ValueError as exc:  # signalled on no file's word: a pid of true or 0 would reach init or pytest
            notes.append(f"a process recorded in the run's state file was not stopped: {exc}")
    for item in items:
        if item.name == "gym":
            item.grace = grace
    return [*stop_supervised(items), *notes]


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(run_dir: Path, state: dict[str, Any]) -> None:
    write_atomically(run_dir / STATE_FILE, json.dumps(state).encode(), fsync=False)
