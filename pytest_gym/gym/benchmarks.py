"""Gym benchmarks as suites: find ``benchmarks/NAME`` where Gym would, and its prepared data.

A benchmark is a folder in Gym's install root or a ``--search-dir``: ``config.yaml`` names the agent and
its ``type: benchmark`` dataset (``jsonl_fpath``, ``prepare_script``, ``num_repeats``). Gym's
``gym eval prepare`` resolves those paths against its working folder, so it runs in a folder of the run
folder where ``benchmarks`` links to the benchmark's root (Hydra's ``outputs/`` stays in the run folder).
Its log is ``gym_prepare.log``. Prepared once per run, under a lock (xdist workers collect too).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gym.core.endpoint import GymError
from pytest_gym.core.locks import LockTimeout, locked
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.deployment import gym_environment
from pytest_gym.gym.startargs import find_gym_cli, gym_roots
from pytest_gym.process.groups import first_error, log_tail, spawn_supervised, stop_supervised, supervisor_popen
from pytest_gym.runfolder.layout import BENCHMARKS_LOCK, PREPARE_LOG


@dataclass(frozen=True)
class Benchmark:
    """One benchmark's suite: its agent, its data (absolute) and the repeats its config asks for."""

    name: str
    root: str
    agent: str | None
    jsonl_fpath: str
    num_repeats: int | None
    prompt_config: Any = None

    @property
    def data(self) -> Path:
        path = Path(self.jsonl_fpath)
        return path if path.is_absolute() else Path(self.root) / path


def find_benchmark(name: str, settings: GymSettings) -> Benchmark:
    """Where Gym finds ``benchmarks/NAME/config.yaml`` (search dirs, extra roots, install root) and what it says."""
    import yaml

    if not name or "/" in name or name.startswith("."):
        raise GymError(f"--gym-benchmark {name!r} is not a benchmark name")
    gym_cli = find_gym_cli(settings.cli)
    roots = [r for r in gym_roots(settings, gym_cli, Path.cwd()) if (r / "benchmarks" / name / "config.yaml").is_file()]
    if not roots:
        raise GymError(
            f"benchmark {name!r} not found: no benchmarks/{name}/config.yaml under --gym-search-dir, "
            f"$NEMO_GYM_EXTRA_ROOTS or Gym's install root; `gym list benchmarks` lists the shipped ones"
        )
    root = roots[0]
    try:
        config = yaml.safe_load((root / "benchmarks" / name / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise GymError(f"benchmark {name!r}: cannot read {root}/benchmarks/{name}/config.yaml: {exc}") from None
    found = _benchmark_dataset(config if isinstance(config, dict) else {})
    if found is None:
        raise GymError(
            f"benchmark {name!r}: {root}/benchmarks/{name}/config.yaml declares no `type: benchmark` dataset"
        )
    agent, dataset = found
    repeats = dataset.get("num_repeats")
    return Benchmark(
        name=name,
        root=str(root),
        agent=agent,
        jsonl_fpath=str(dataset.get("jsonl_fpath") or ""),
        num_repeats=int(repeats) if isinstance(repeats, int) and repeats > 0 else None,
        prompt_config=dataset.get("prompt_config"),
    )


def _benchmark_dataset(config: dict[str, Any]) -> tuple[str | None, dict[str, Any]] | None:
    """(agent instance, dataset) of the config's first ``type: benchmark`` dataset."""
    agents_of: dict[str, str] = {}
    found: tuple[str, str, dict[str, Any]] | None = None
    for instance, body in config.items():
        if not isinstance(body, dict):
            continue
        for kind in ("responses_api_agents", "resources_servers"):
            servers = body.get(kind)
            for server in servers.values() if isinstance(servers, dict) else []:
                if not isinstance(server, dict):
                    continue
                ref = server.get("resources_server")
                if kind == "responses_api_agents" and isinstance(ref, dict) and ref.get("name"):
                    agents_of.setdefault(str(ref["name"]), str(instance))
                for dataset in server.get("datasets") or []:
                    if found is None and isinstance(dataset, dict) and dataset.get("type") == "benchmark":
                        found = (kind, str(instance), dataset)
    if found is None:
        return None
    kind, instance, dataset = found
    return (instance if kind == "responses_api_agents" else agents_of.get(instance)), dataset


@contextlib.contextmanager
def _locked(run_dir: Path, timeout: float) -> Iterator[None]:
    """The run's benchmark lock: one process prepares, the others (xdist workers) wait for it, bounded."""
    try:
        with locked(run_dir / BENCHMARKS_LOCK, timeout):
            yield
    except LockTimeout:
        raise GymError(
            f"another process of this run held {run_dir / BENCHMARKS_LOCK} (preparing a benchmark) for "
            f"{timeout:g} s; raise --gym-startup-timeout, or pass --gym-benchmark-data PATH"
        ) from None


def benchmark_suite(name: str, settings: GymSettings, run_dir: Path, data: str | None = None) -> Benchmark:
    """The benchmark with its data in place: ``data`` if given, else the prepared file, else prepared now."""
    bench = find_benchmark(name, settings)
    if bench.prompt_config:
        raise GymError(
            f"benchmark {name!r} sets prompt_config: pytest-gym sends its rows as prepared and does not apply "
            "Gym's prompt templates yet; give rows that hold responses_create_params with --gym-benchmark-data"
        )
    if data:
        if not Path(data).is_file():
            raise GymError(f"--gym-benchmark-data {data}: no such file")
        return Benchmark(bench.name, bench.root, bench.agent, str(Path(data).resolve()), bench.num_repeats)
    with _locked(run_dir, settings.startup_timeout + 30):  # the holder's prepare is bounded by the former
        if not bench.data.is_file():
            _prepare(bench, settings, run_dir)
    if not bench.data.is_file():
        raise GymError(
            f"benchmark {name!r} has no prepared data at {bench.data}; `gym eval prepare --benchmark {name}` "
            f"did not write it (log {run_dir / PREPARE_LOG}). Prepare it where there is internet, or pass the "
            "prepared jsonl with --gym-benchmark-data PATH (suite files: benchmark_data:)"
        )
    return bench


def _prepare(bench: Benchmark, settings: GymSettings, run_dir: Path) -> None:
    """``gym eval prepare --benchmark NAME``, supervised and bounded by --gym-startup-timeout."""
    import time

    gym_cli = find_gym_cli(settings.cli)
    cwd = run_dir / f"prepare-{bench.name}"
    cwd.mkdir(parents=True, exist_ok=True)
    link = cwd / "benchmarks"
    if not link.exists():
        link.symlink_to(Path(bench.root) / "benchmarks", target_is_directory=True)
    # Gym imports benchmarks/NAME/prepare.py from the first root holding it and then insists that the path it
    # returns equals jsonl_fpath made absolute against its cwd: this folder goes first, so both agree.
    command = [gym_cli, "eval", "prepare", "--benchmark", bench.name, "--search-dir", str(cwd.resolve())]
    for folder in settings.search_dir:
        command += ["--search-dir", folder]
    env = gym_environment(settings)
    kept, dropped = _unshadowed_pythonpath(env.get("PYTHONPATH", ""))
    log_path = run_dir / PREPARE_LOG
    with log_path.open("a", encoding="utf-8") as log:
        log.write("pytest-gym: " + " ".join(command) + "\n")
        if dropped:
            log.write(
                f"pytest-gym: left out of Gym's PYTHONPATH: {os.pathsep.join(dropped)} (a regular `benchmarks` "
                "package there hides Gym's benchmarks/NAME/prepare.py)\n"
            )
    if dropped:  # the supervisor keeps the full path (it imports pytest_gym); only Gym's is trimmed
        command = ["env", f"PYTHONPATH={kept}", *command] if kept else ["env", "-u", "PYTHONPATH", *command]
    try:
        proc = spawn_supervised("gym_prepare", command, cwd, log_path, first=signal.SIGINT, grace=5.0, env=env)
    except OSError as exc:
        raise GymError(f"`gym eval prepare` did not start: {exc}") from None
    popen = supervisor_popen(proc)
    deadline = time.monotonic() + settings.startup_timeout
    while popen is not None and popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if popen is not None and popen.poll() is None:
        stop_supervised([proc])
        raise GymError(
            f"`gym eval prepare --benchmark {bench.name}` did not finish within {settings.startup_timeout:g} s"
        )
    stop_supervised([proc])  # ended by itself: this only closes the supervisor's pipe
    if popen is not None and popen.returncode:
        cause = first_error(log_path) or log_tail(log_path, 5)
        raise GymError(
            f"`gym eval prepare --benchmark {bench.name}` failed (exit {popen.returncode}): {cause}; prepare it where "
            "there is internet and pass the prepared jsonl with --gym-benchmark-data PATH"
        )


def _unshadowed_pythonpath(pythonpath: str) -> tuple[str, list[str]]:
    """PYTHONPATH without the entries holding a regular ``benchmarks`` package (and those left out).

    Gym imports a prepare script as ``benchmarks.NAME.prepare``, ``benchmarks`` being a namespace package
    spread over its roots; a regular package of that name anywhere on the path wins over every namespace
    portion, so the import fails (a project's own ``benchmarks/__init__.py`` on PYTHONPATH is enough)."""
    kept: list[str] = []
    dropped: list[str] = []
    for entry in pythonpath.split(os.pathsep):
        if entry:
            (dropped if (Path(entry) / "benchmarks" / "__init__.py").is_file() else kept).append(entry)
    return os.pathsep.join(kept), dropped
