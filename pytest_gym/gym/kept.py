"""Gyms kept between runs (``--gym-reuse DIR``): a later run with the same start settings attaches to one.

A Gym start costs about 25 s and as much CPU (its servers' imports); a developer or a CI job running pytest
again and again with the same settings pays it once. The anchor is pytest-django's ``--reuse-db``; what
testcontainers' reuse users complained of (kept containers that never stop, one run disturbing another) is
designed out:

- **Identity**: a kept Gym is found by a fingerprint of everything its start depends on (the start settings,
  the contents of local config files, the Gym CLI, the values of the variables Gym and the policy read,
  hashed: no secret is written). Anything else differs: another Gym starts. What the scripted policy answers
  (``--gym-policy-answer``, its latency, ``PYTEST_GYM_POLICY_SCRIPT``) is not part of it: each lease scripts
  the policy anew, so a run that only changes the answer attaches instead of paying a start.
- **One run at a time**: a run holds a kept Gym's lease from its start to its end; a run that finds every slot
  of its fingerprint leased starts another (up to ``SLOTS``), else one for itself only.
- **Per-run captures**: Gym writes model-call captures into ``DIR/<entry>/model_calls``, a link switched to the
  leasing run's own folder, and at the end the run gets the part of Gym's and the policy's logs written
  while it held the lease. A kept scripted policy is reset to its start script, as if just started.
- **Bounded lifetime**: kept processes stop once unused for ``--gym-reuse-idle`` seconds (their supervisors
  check, ``pytest_gym.process.keep``), when their owner ends, however it ends: the leader of pytest's session
  (your terminal's shell, the CI job; the pid in ``DIR/owner`` when that file names a live process), or with
  ``python -m pytest_gym stop-kept DIR``. A kept Gym found dead is cleared and started again.

``--gym-policy record|replay`` and ``--gym-rescore`` runs keep theirs too: the recorder in place of the model is
leased with the Gym (``PUT /_lease``: this run's mode, folder, upstream and cassette), so a recording, its replays
and rescores of one environment share one Gym; at the end the run's recorder stats go into its own log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pytest_gym.core.access import GymAccess
from pytest_gym.core.endpoint import GymEndpoint, GymError
from pytest_gym.core.locks import locked
from pytest_gym.core.masking import POLICY_KEY_ENV
from pytest_gym.core.numbers import is_int
from pytest_gym.core.pids import parent_pid, pid_alive
from pytest_gym.core.settings import RECORDER_POLICIES, GymSettings
from pytest_gym.gym.deployment import (
    POLICY_SERVER_TYPE,
    Started,
    log_size,
    policy_process_name,
    read_state,
    start_deployment,
    stop_started,
    write_state,
)
from pytest_gym.gym.discovery import discover
from pytest_gym.gym.startargs import find_gym_cli
from pytest_gym.gym.trajectories import capture_dir
from pytest_gym.process.keep import give_back, lease_holder, lock_path, take_lease
from pytest_gym.runfolder.layout import CAPTURE_DIR, GYM_LOG, POLICY_LOG, RECORDER_LOG, STATE_FILE
from pytest_gym.standins import SCRIPT_ENV

#: Kept Gyms per fingerprint (runs of the same settings at the same time each get one).
SLOTS = 4
#: The logs of a kept Gym's processes: each run gets the part written while it held the lease.
KEPT_LOGS = (GYM_LOG, POLICY_LOG, RECORDER_LOG)
#: The file of a pool that names the process its Gyms live as long as (instead of pytest's parent).
OWNER_FILE = "owner"
#: What a start depends on besides the settings: these variables' values (hashed), where set. Not ``SCRIPT_ENV``:
#: the scripted policy's script is set at every lease (``_reset_policy``), like its answer and latency.
_START_VARIABLES = (POLICY_KEY_ENV,)
_START_PREFIXES = ("NEMO_GYM", "RAY_")
#: The settings a start depends on (startargs.gym_command, deployment.gym_environment, standins.launch).
START_SETTINGS = (
    "config", "resources_server", "model_type", "set", "model_url", "model", "policy", "cli", "server_venv",
    "trajectories", "env", "secret_env", "bind_resources_server", "hydra", "benchmark", "search_dir",
    "benchmark_data", "agent_type", "header",
)  # fmt: skip


class NotKept(Exception):
    """This run's Gym cannot be kept, or every kept one is in use: it is started for this run alone, as without
    --gym-reuse (the message says why)."""


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


def fingerprint(settings: GymSettings, environ: dict[str, str] | None = None) -> str:
    """What a kept Gym must have been started with to serve this run: 16 hex digits."""
    environ = dict(os.environ) if environ is None else environ
    data: dict[str, Any] = {name: getattr(settings, name) for name in START_SETTINGS}
    if settings.policy in RECORDER_POLICIES:  # one recorder serves both, its mode and upstream set per lease
        data.update(policy="recorder", model_url=None)
    try:
        data["cli"] = find_gym_cli(settings.cli)
    except GymError:  # the start says so, in its words
        data["cli"] = settings.cli
    with contextlib.suppress(OSError):
        data["cli_mtime"] = os.stat(data["cli"]).st_mtime_ns
    files = {}
    for path in settings.config:
        with contextlib.suppress(OSError):
            files[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    data["config_files"] = files
    names = set(_START_VARIABLES) | set(settings.secret_env)
    names |= {name for name in environ if name.startswith(_START_PREFIXES)}
    data["variables"] = {name: _digest(environ[name]) for name in sorted(names) if name in environ}
    return _digest(json.dumps(data, sort_keys=True, default=str))[:16]


def keep_owner(pool: Path, run_owner: int) -> int | None:
    """The process a kept Gym lives as long as: the pool's owner file's; else the leader of the run owner's
    session (your terminal's shell, the CI job), whichever wrapper (make, tox, uv run) started pytest; else the
    run owner's parent. None when none is known (then nothing is kept)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((pool / OWNER_FILE).read_text(encoding="utf-8").strip())
        if pid > 1 and pid_alive(pid):
            return pid
    with contextlib.suppress(OSError):
        leader = os.getsid(run_owner)
        if leader > 1 and leader != run_owner and pid_alive(leader):
            return leader
    parent = parent_pid(run_owner)
    return parent if parent is not None and parent > 1 else None


def _live_endpoint(state: dict[str, Any] | None, access: GymAccess | None) -> GymEndpoint | None:
    """The kept Gym recorded in ``state`` when all of it still runs and its head answers; else None."""
    if not state or "started" not in state or "endpoint" not in state:
        return None
    try:
        endpoint = GymEndpoint.from_json(state["endpoint"])
        if endpoint.dead_servers():
            return None
        discover(endpoint.head_url, timeout=5.0, access=access)
    except (GymError, KeyError, TypeError, ValueError):
        return None
    return endpoint


def _point_captures(entry: Path, run_dir: Path) -> None:
    """Gym's captures (``entry/model_calls``, a link) go to this run's folder from now on."""
    target = capture_dir(run_dir)
    target.mkdir(parents=True, exist_ok=True)
    link, new = entry / CAPTURE_DIR, entry / f"{CAPTURE_DIR}.new"
    new.unlink(missing_ok=True)
    os.symlink(target, new)
    os.replace(new, link)


def _reset_policy(settings: GymSettings, endpoint: GymEndpoint) -> None:
    """A kept scripted policy answers as this run's fresh one would: this run's start script (answer, latency,
    ``PYTEST_GYM_POLICY_SCRIPT``), its counts at zero."""
    from pytest_gym.rollout.http import FetchError, fetch  # imported when used, as by discovery
    from pytest_gym.standins.policy import start_script  # a server module (http.server): only a kept Gym needs it

    if settings.policy != "scripted" or endpoint.policy_url is None:
        return
    answer, latency = settings.policy_answer, settings.policy_latency_ms
    script = start_script(answer, settings.model, latency, os.environ.get(SCRIPT_ENV))
    body = json.dumps({**asdict(script), "reset_stats": True}).encode()
    url = endpoint.policy_url.removesuffix("/v1") + "/_script"
    try:
        status, _ = fetch("PUT", url, body, timeout=10.0)
    except FetchError as exc:
        raise GymError(f"--gym-reuse: the kept scripted policy at {url} did not take its start script: {exc}") from None
    if status != 200:
        raise GymError(f"--gym-reuse: the kept scripted policy at {url} refused its start script (HTTP {status})")


def _lease_recorder(settings: GymSettings, endpoint: GymEndpoint, run_dir: Path) -> GymEndpoint:
    """The kept recorder serves this run as one started for it would: its mode, folder, upstream and cassette.
    Returns the endpoint naming it by this run's mode."""
    from pytest_gym.rollout.http import FetchError, fetch
    from pytest_gym.standins.launch import recorder_lease

    if settings.policy not in RECORDER_POLICIES or endpoint.policy_url is None:
        return endpoint
    url = endpoint.policy_url.removesuffix("/v1") + "/_lease"
    try:
        status, data = fetch("PUT", url, json.dumps(recorder_lease(settings, run_dir)).encode(), 30)
    except FetchError as exc:
        raise GymError(f"--gym-reuse: the kept model recorder at {url} did not take this run: {exc}") from None
    if status != 200:
        raise GymError(f"--gym-reuse: {_answer_message(data) or f'the kept model recorder answered HTTP {status}'}")
    servers = [
        replace(s, process_name=policy_process_name(settings.policy), name=settings.policy)
        if s.server_type == POLICY_SERVER_TYPE else s
        for s in endpoint.servers
    ]  # fmt: skip
    return replace(endpoint, servers=servers)


def _release_recorder(policy_url: str) -> None:
    """The run's recorder stats into the kept recorder's log (the part the run copies), its files closed."""
    from pytest_gym.rollout.http import FetchError, fetch

    with contextlib.suppress(FetchError):  # a recorder that died: its log says what it could
        fetch("POST", policy_url.removesuffix("/v1") + "/_release", b"", 30)


def _answer_message(data: bytes) -> str:
    """The message of a stand-in's JSON error answer, or ''."""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        return str(json.loads(data)["error"]["message"])
    return ""


def _stop(entry: Path, state: dict[str, Any], grace: float) -> list[str]:
    """Stop the kept Gym ``state`` records (the caller holds the entry's lock); no run finds it afterwards."""
    try:
        ended = stop_started(Started.from_json(state.get("started")), grace)
    except ValueError as exc:  # a hand-edited state file: nothing is signalled on its word
        ended = [f"the kept Gym's state file ({entry / STATE_FILE}): {exc}; stop what it started by hand"]
    (entry / STATE_FILE).unlink(missing_ok=True)
    return ended


def acquire_kept(
    settings: GymSettings, run_dir: Path, run_owner: int, access: GymAccess | None = None
) -> tuple[GymEndpoint, dict[str, Any]]:
    """A kept Gym for this run, leased to ``run_owner`` (the process that ends the run): one found alive, or one
    started now and kept. ``NotKept`` when it cannot be kept (no process to own it) or every slot is leased: the
    caller starts one for the run.

    Returns the endpoint and the record ``release_kept`` needs (kept in the run's deployment state)."""
    assert settings.reuse is not None
    pool = Path(settings.reuse)
    pool.mkdir(parents=True, exist_ok=True)
    owner = keep_owner(pool, run_owner)
    if owner is None:
        raise NotKept(
            "--gym-reuse: no process to keep a Gym for (pytest leads its session and has no parent, as PID 1 of a "
            f"container; or name one in {pool / OWNER_FILE}): Gym started for this run"
        )
    key = fingerprint(settings)
    for slot in range(SLOTS):
        entry = pool / f"{key}-{slot}"
        with locked(lock_path(entry)):
            if lease_holder(entry) is not None:
                continue
            entry.mkdir(exist_ok=True)
            state = read_state(entry)
            endpoint = _live_endpoint(state, access)
            stale: list[str] = []  # why this run starts a new one there, said at the run's end
            if endpoint is None:
                if state and "started" in state:
                    stale = [
                        f"--gym-reuse: the kept Gym in {entry} was not running as recorded (its owner ended, or it "
                        f"failed): this run started a new one there; the old one: {note}"
                        for note in _stop(entry, state, settings.shutdown_grace)
                    ]
                (entry / STATE_FILE).unlink(missing_ok=True)
                for name in KEPT_LOGS:
                    (entry / name).unlink(missing_ok=True)
            _point_captures(entry, run_dir)
            offsets = {name: log_size(entry / name) for name in KEPT_LOGS}
            reused = endpoint is not None
            if endpoint is None:
                idle = (settings.reuse_idle, entry)
                endpoint, started = start_deployment(settings, entry, owner_pid=owner, access=access, idle=idle)
                write_state(entry, {"endpoint": endpoint.to_json(), "started": asdict(started), "owner": owner})
            else:
                _reset_policy(settings, endpoint)
            endpoint = _lease_recorder(settings, endpoint, run_dir)
            take_lease(entry, run_owner, run_dir)
            record: dict[str, Any] = {
                "entry": str(entry), "offsets": offsets, "reused": reused, "owner": owner, "idle": settings.reuse_idle
            }  # fmt: skip
            if settings.policy in RECORDER_POLICIES and endpoint.policy_url:
                record["recorder_url"] = endpoint.policy_url
            if stale:
                record["notes"] = stale
            return endpoint, record
    raise NotKept("--gym-reuse: every kept Gym with these settings is in use: Gym started for this run")


def release_kept(record: Any, run_dir: Path) -> list[str]:
    """At the run's end: its part of the kept Gym's logs into its folder, the lease freed; what to say."""
    record = record if isinstance(record, dict) else {}
    earlier = record.get("notes")
    earlier = [str(note) for note in earlier] if isinstance(earlier, list) else []
    entry_text, offsets = record.get("entry"), record.get("offsets", {})
    # As this plugin records it (a hand edit is not followed): a log name other than the kept logs' could copy a
    # file anywhere, an offset of ``true`` or Infinity is no position.
    if not isinstance(entry_text, str) or not (
        isinstance(offsets, dict) and all(name in KEPT_LOGS and is_int(at) and at >= 0 for name, at in offsets.items())
    ):
        return [
            *earlier,
            f"the run's Gym state file ({run_dir / STATE_FILE}) does not record the kept Gym as pytest-gym records "
            "it: its lease ends with this run, and it stops when unused (python -m pytest_gym stop-kept POOL)",
        ]
    entry = Path(entry_text)
    if isinstance(record.get("recorder_url"), str):
        _release_recorder(record["recorder_url"])  # first: the run's recorder stats end its part of the log
    for name, offset in offsets.items():
        source = entry / name
        if not source.is_file():
            continue
        with contextlib.suppress(OSError), source.open("rb") as src, (run_dir / name).open("ab") as dst:
            if name == GYM_LOG:
                since = "since this run leased it" if record.get("reused") else "started by this run"
                dst.write(f"pytest-gym: the kept Gym in {entry} ({since}); its log from then on:\n".encode())
            src.seek(offset)
            shutil.copyfileobj(src, dst)
    with contextlib.suppress(OSError):  # the kept Gym's folder removed meanwhile: no lease left to free
        give_back(entry, run_dir)
    how = "attached to" if record.get("reused") else "started and kept"
    return [
        *earlier,
        f"--gym-reuse: {how} the Gym in {entry}; it stays up for the next run with these settings and stops when "
        f"unused for {record.get('idle', 0):g} s or when process {record.get('owner')} ends "
        f"(now: python -m pytest_gym stop-kept {entry.parent})",
    ]


def stop_kept(pool: Path, grace: float = 30.0) -> list[str]:
    """Stop every kept Gym of ``pool`` that no live run holds; what happened to each (for the caller to say)."""
    notes: list[str] = []
    if not pool.is_dir():
        return notes
    for entry in sorted(p for p in pool.iterdir() if p.is_dir()):
        with locked(lock_path(entry)):
            holder = lease_holder(entry)
            if holder is not None:
                notes.append(f"{entry.name}: in use by process {holder['pid']}; left running")
                continue
            state = read_state(entry)
            if state and "started" in state:
                notes.append(f"{entry.name}: " + "; ".join(_stop(entry, state, grace)))
    return notes
