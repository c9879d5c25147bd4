"""Start a stand-in model server (the scripted policy, the recorder) as a supervised process of the run.

One launcher for every stand-in: the server writes its bound port to a file once it listens, the
launcher waits for that file (bounded), and a server that dies first is reported with its log's tail.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Literal

from pytest_gym.core.endpoint import GymError
from pytest_gym.core.settings import GymSettings
from pytest_gym.process.groups import Supervised, log_tail, spawn_supervised, stop_supervised, supervisor_popen
from pytest_gym.runfolder.layout import POLICY_LOG, POLICY_PORT_FILE, RECORDER_LOG, RECORDER_PORT_FILE


def launch(
    what: str,
    name: str,
    module: str,
    args: list[str],
    run_dir: Path,
    log: Path,
    port_file: Path,
    timeout: float = 20.0,
    owner_pid: int | None = None,
    idle: tuple[float, Path] | None = None,
) -> tuple[Supervised, str]:
    """``python -m module ARGS --port-file PORT_FILE`` under a supervisor; (process, its ``/v1`` base URL).

    The supervisor stops it when this process (or ``owner_pid``) ends, or unused (``idle``, a kept Gym's); stop it
    earlier with ``stop_supervised([process])``. ``what`` names it in errors.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    port_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", module, *args, "--port-file", str(port_file)]
    try:
        process = spawn_supervised(
            name, command, run_dir, log, first=signal.SIGTERM, grace=5.0, owner_pid=owner_pid, idle=idle
        )
    except OSError as exc:
        raise GymError(f"{what} did not start: {exc}") from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.exists():
            return process, f"http://127.0.0.1:{port_file.read_text().strip()}/v1"
        proc = supervisor_popen(process)
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_supervised([process])
    raise GymError(f"{what} did not start; log {log}:\n{log_tail(log)}")


def start_policy(
    settings: GymSettings,
    run_dir: Path,
    timeout: float = 20.0,
    owner_pid: int | None = None,
    idle: tuple[float, Path] | None = None,
) -> tuple[Supervised, str]:
    """The built-in scripted policy, answering as ``settings`` say."""
    args = [
        "--port",
        "0",
        # One argv item each (--answer=VALUE): an answer such as "-x" must not read as an option.
        f"--answer={settings.policy_answer}",
        f"--latency-ms={settings.policy_latency_ms}",
    ]
    if settings.model:
        args.append(f"--model={settings.model}")
    return launch(
        "the scripted policy",
        "policy",
        "pytest_gym.standins.policy",
        args,
        run_dir,
        run_dir / POLICY_LOG,
        run_dir / POLICY_PORT_FILE,
        timeout,
        owner_pid,
        idle,
    )


def start_recorder(
    mode: Literal["record", "replay"],
    run_dir: Path,
    *,
    upstream: str | None = None,
    cassette: str | Path | None = None,
    miss: Literal["error", "passthrough"] = "error",
    ignore: tuple[str, ...] = (),
    default_ignore: bool = True,
    port: int = 0,
    timeout: float = 20.0,
    owner_pid: int | None = None,
    idle: tuple[float, Path] | None = None,
) -> tuple[Supervised, str]:
    """The recording proxy or the replay server; the URL is what Gym gets as ``policy_base_url``.

    ``port`` 0 picks a free one; a fixed port lets a replay take over from a recording behind a running Gym.
    The upstream key is inherited through ``$GYM_POLICY_API_KEY`` (never on the command line). The cassette
    is complete at every moment.
    """
    args = [mode, "--run-dir", str(run_dir), "--port", str(port)]
    if upstream:
        args += ["--upstream", upstream]
    if mode == "replay":
        if cassette is None:
            raise GymError("replay needs a cassette: a cassette file or a run folder holding one")
        args += ["--cassette", str(cassette), "--miss", miss]
    for item in ignore:
        args += ["--ignore", item]
    if not default_ignore:
        args.append("--no-default-ignore")
    return launch(
        f"the model recorder ({mode})",
        "recorder",
        "pytest_gym.standins.recorder",
        args,
        run_dir,
        run_dir / RECORDER_LOG,
        run_dir / RECORDER_PORT_FILE,
        timeout,
        owner_pid,
        idle,
    )


def start_model_recorder(
    settings: GymSettings, run_dir: Path, owner_pid: int | None = None, idle: tuple[float, Path] | None = None
) -> tuple[Supervised, str]:
    """``--gym-policy record|replay``: the recording proxy or the replay server, in place of the model."""
    mode = recorder_mode(settings)
    return start_recorder(
        mode,
        run_dir,
        upstream=settings.model_url,
        cassette=settings.cassette,
        miss=settings.replay_miss,
        owner_pid=owner_pid,
        idle=idle,
    )


def recorder_lease(settings: GymSettings, run_dir: Path) -> dict[str, object]:
    """What a kept recorder is told when ``run_dir``'s run leases it (``PUT /_lease``): what a recorder started
    for that run would have been started with."""
    mode = recorder_mode(settings)
    return {
        "mode": mode, "run_dir": str(run_dir), "upstream": settings.model_url, "miss": settings.replay_miss,
        # as the recorder started for the run would read it: from the run folder, its working directory
        "cassette": str(run_dir / settings.cassette) if mode == "replay" and settings.cassette else None,
    }  # fmt: skip


def recorder_mode(settings: GymSettings) -> Literal["record", "replay"]:
    """``--gym-policy record|replay``'s mode, once what it needs is checked (GymError saying what is missing)."""
    if settings.policy == "record" and not settings.model_url:
        raise GymError("--gym-policy record needs --gym-model-url URL: the model whose answers are recorded")
    if settings.policy == "replay" and not settings.cassette:
        raise GymError(
            "--gym-policy replay needs --gym-cassette PATH: a cassette.jsonl, or the run folder of a recording"
        )
    if settings.policy == "replay" and settings.replay_miss == "passthrough" and not settings.model_url:
        raise GymError("--gym-replay-miss passthrough needs --gym-model-url URL: where unrecorded calls go")
    return "record" if settings.policy == "record" else "replay"
