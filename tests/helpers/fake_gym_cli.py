"""A fake ``gym`` command for process-lifetime and command-line tests (hostile input, no real Gym needed).

It records its argv, working folder and (as a digest) the policy key it received (and one line per start
in ``starts``), serves the stand-in Gym (tests/helpers/standin.py) with one agent on
``++head_server.port`` (``FAKE_GYM_INSTANCES``: JSON its ``/server_instances`` answers instead), spawns a
child in its process group and records both pids.
On SIGINT it takes ``FAKE_GYM_STOP_S`` seconds to stop, like Gym's slow shutdown; with
``FAKE_GYM_ORPHAN=1`` its child ignores SIGINT and is left behind, so only a signal to the whole group
stops it. ``FAKE_GYM_RUN_S`` makes each ``/run`` take that long; ``FAKE_GYM_ENV_NAMES`` (comma-separated)
records digests of those variables, ``FAKE_GYM_ECHO`` prints their values to the log. With ``FAKE_GYM_FAIL=1``
it prints a pydantic error, 70 lines of noise and exits 1; with ``FAKE_GYM_FAIL=uv`` what Gym prints without
``uv`` on PATH (the cause 60 lines before the end, under a traceback about a server that stopped).
With ``FAKE_GYM_PORT_RACE=N`` its first N starts
fail as Gym does when a port it picked is taken before its server binds it (counted in ``starts``).
Every process of a test run carries ``PYTEST_GYM_TEST_MARK`` in its environment (tests/helpers/processes.py).
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

# Imported here, before any in-process pytester run: a run that imports it first has it dropped from
# sys.modules at its end, and the re-imported module no longer matches its cached C extension
# ("could not determine a constructor for the tag None" in the next run's discover()).
import yaml  # noqa: F401

from tests.helpers.paths import ROOT

SCRIPT = r"""
import hashlib, json, os, signal, subprocess, sys, threading, time

record = os.environ["FAKE_GYM_RECORD"]
os.makedirs(record, exist_ok=True)
with open(os.path.join(record, "starts"), "a") as fh:
    fh.write("start\n")
key = os.environ.get("GYM_POLICY_API_KEY")
env_digests = {name: hashlib.sha256(os.environ[name].encode()).hexdigest() if name in os.environ else None
               for name in os.environ.get("FAKE_GYM_ENV_NAMES", "").split(",") if name}
with open(os.path.join(record, "argv.json"), "w") as fh:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "env_sha256": env_digests,
               "key_sha256": hashlib.sha256(key.encode()).hexdigest() if key else None}, fh)
print("fake gym: starting", flush=True)
for name in os.environ.get("FAKE_GYM_ECHO", "").split(","):
    if name:
        print(f"fake gym: {name} is {os.environ.get(name)}", flush=True)  # a Gym that echoes a secret
races = int(os.environ.get("FAKE_GYM_PORT_RACE") or 0)
if races:
    with open(os.path.join(record, "starts")) as fh:
        started = len(fh.readlines())
    if started <= races:
        print("(policy_model) ERROR:    [Errno 98] error while attempting to bind on address "
              "('127.0.0.1', 18249): address already in use", flush=True)
        print("RuntimeError: Process `policy_model` finished unexpectedly!", flush=True)
        sys.exit(1)
if os.environ.get("FAKE_GYM_FAIL") == "uv":  # as Gym 0.7.0 fails without uv on PATH (no --gym-server-venv)
    print("Checking for HTTP server statuses.")
    for name in ("mcqa_environment_server", "mcqa_simple_agent", "mcqa", "policy_model"):
        print(f"({name}) /bin/bash: line 1: uv: command not found")
    print("Sending interrupt signals to servers...\nNeMo Gym finished!\nTraceback (most recent call last):")
    for i in range(24):
        print(f'  File "nemo_gym/cli/env.py", line {600 + i}, in poll\n    self.poll()')
    print("RuntimeError: Process `mcqa` finished unexpectedly!\nShutting down Ray cluster spun up by NeMo Gym...")
    sys.exit(1)
if os.environ.get("FAKE_GYM_FAIL"):
    print("Traceback (most recent call last):")
    print('  File "nemo_gym/global_config.py", line 1, in parse')
    print("pydantic_core._pydantic_core.ValidationError: 1 validation error for ServerConfig")
    print("entrypoint")
    print("  Field required [type=missing]")
    for i in range(70):
        print(f"INFO shutting down component {i}")
    sys.exit(1)
port = int(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("++head_server.port=")))
child_code = "import signal, time\n"
if os.environ.get("FAKE_GYM_ORPHAN"):
    child_code += "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
child_code += "time.sleep(600)\n"
child = subprocess.Popen([sys.executable, "-c", child_code])
with open(os.path.join(record, "pids.json"), "w") as fh:
    json.dump({"gym": os.getpid(), "child": child.pid}, fh)

sys.path.insert(0, @ROOT@)
from tests.helpers.standin import StandinGym

gym = StandinGym("fake_agent", port=port)
url = gym.base_url
gym.config_yaml = "fake_agent: {}\n"
instances = os.environ.get("FAKE_GYM_INSTANCES")
gym.instances = json.loads(instances) if instances else [
    {"process_name": "fake_agent", "server_type": "responses_api_agents", "name": "simple_agent",
     "url": url + "/agent", "pid": os.getpid()}
]
gym.latency_s = float(os.environ.get("FAKE_GYM_RUN_S", "0"))  # a slow rollout
stop = threading.Event()
signal.signal(signal.SIGINT, lambda *_: stop.set())
print(f"fake gym: serving {url}", flush=True)
while not stop.wait(0.2):
    pass
print("fake gym: SIGINT, stopping slowly", flush=True)
time.sleep(float(os.environ.get("FAKE_GYM_STOP_S", "0")))
if not os.environ.get("FAKE_GYM_ORPHAN"):
    child.terminate()
    child.wait()
print("fake gym: stopped", flush=True)
"""


def install(folder: Path) -> Path:
    """Write the fake ``gym`` executable into ``folder``; it runs with this interpreter."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gym"
    path.write_text(f"#!{sys.executable}\n" + SCRIPT.replace("@ROOT@", repr(str(ROOT))), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def start_args(fake: Path, *args: str) -> tuple[str, ...]:
    """Command-line arguments that start the fake Gym (with the scripted policy), run folder ``run``."""
    return (
        "--gym-resources-server", "fake", "--gym-policy", "scripted", "--gym-cli", str(fake), "--gym-run-dir", "run",
        "--gym-shutdown-grace", "5", *args,
    )  # fmt: skip


def recorded_argv(folder: Path) -> list[str]:
    """The argv the fake Gym was started with."""
    import json

    argv: list[str] = json.loads((folder / "argv.json").read_text(encoding="utf-8"))["argv"]
    return argv


def install_with_root(folder: Path, configs: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """The fake ``gym`` in a venv-like ``folder`` whose site-packages holds ``nemo_gym`` (Gym's install root,
    as pytest-gym finds it) and the given config files (``{}``); returns (the gym CLI, the install root)."""
    site = folder / "lib" / "python3.13" / "site-packages"
    (site / "nemo_gym").mkdir(parents=True, exist_ok=True)
    (site / "nemo_gym" / "__init__.py").write_text("")
    for config in configs:
        (site / config).parent.mkdir(parents=True, exist_ok=True)
        (site / config).write_text("{}\n")
    return install(folder / "bin"), site
