"""Fixtures for pytest-gym's own tests: one real Gym deployment for the whole test session.

Gym runs with the mcqa resources server and the built-in scripted policy (the
only stand-in: Gym itself is real). Tests attach to it with ``--gym-url`` and
steer the policy through its ``/_script`` route. Without Gym the Gym tests skip
locally and fail under CI, where they must run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

# pytester's in-process runs restore sys.modules afterwards, dropping what the plugin imported lazily.
# PyYAML's C loader (yaml._yaml, used by OmegaConf) cannot be re-imported: it keeps the node classes of
# the first import, so a fresh yaml then fails with "could not determine a constructor for the tag None"
# (tests/test_suitefile.py run alone). Imported here, yaml is in pytester's snapshot and kept.
import yaml  # noqa: F401

from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.deployment import start_deployment, stop_started

ROOT = Path(__file__).parent
EXAMPLE = ROOT / "examples" / "mcqa" / "example.jsonl"
#: The bundled mcqa example expects B, C, I, E, E.
EXAMPLE_ANSWERS = ["B", "C", "I", "E", "E"]


def find_gym_cli() -> str | None:
    for candidate in (os.environ.get("PYTEST_GYM_CLI"), str(ROOT / ".venvs" / "gym" / "bin" / "gym")):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("gym")


def need_gym() -> str:
    cli = find_gym_cli()
    if cli is None:
        message = "NeMo Gym is not installed (scripts/install-gym.sh, or set PYTEST_GYM_CLI)"
        if os.environ.get("CI"):
            pytest.fail(message + ": Gym tests must run in CI")
        pytest.skip(message)
    return cli


class RealGym:
    """A running deployment plus a handle on its scripted policy."""

    def __init__(self, endpoint: GymEndpoint, cli: str, run_dir: Path) -> None:
        self.endpoint = endpoint
        self.cli = cli
        self.run_dir = run_dir
        assert endpoint.policy_url is not None
        self.policy_url = endpoint.policy_url

    @property
    def url(self) -> str:
        return self.endpoint.head_url

    def script(self, **changes: Any) -> dict[str, Any]:
        response = httpx.put(f"{self.policy_url}/_script", json=changes, timeout=10, trust_env=False)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def policy_calls(self) -> int:
        stats = httpx.get(f"{self.policy_url}/_stats", timeout=10, trust_env=False).json()
        return int(stats["calls"])

    def reset(self) -> None:
        self.script(
            answer="\\boxed{E}", latency_ms=0, fault_every=0, fault_mode="status", fault_status=500, reset_stats=True,
            chance=1.0, chance_concentration=0.0, solid=0.0, hopeless=0.0, broken=[], seed=0,
        )  # fmt: skip


@pytest.fixture
def example(pytester: pytest.Pytester) -> Path:
    """The bundled 5-row mcqa example, copied so the rootdir is the test's own folder."""
    path = pytester.path / "example.jsonl"
    shutil.copy(EXAMPLE, path)
    pytester.makeini("[pytest]\n")
    return path


def attach(gym: RealGym, *args: str, dataset: str = "example.jsonl") -> tuple[str, ...]:
    """Command-line arguments that run ``dataset`` against the shared Gym."""
    return ("--gym-url", gym.url, "--gym-agent", "mcqa_simple_agent", "--gym-dataset", dataset, *args)


def start_mode(gym_cli: str, *args: str, dataset: str = "example.jsonl") -> tuple[str, ...]:
    """Command-line arguments that start a Gym (mcqa, the policy answering E) for ``dataset``, run folder ``run``."""
    return (
        "--gym-dataset", dataset, "--gym-resources-server", "mcqa", "--gym-policy", "scripted",
        "--gym-policy-answer", "\\boxed{E}", f"--gym-cli={gym_cli}", "--gym-server-venv", "auto",
        "--gym-agent", "mcqa_simple_agent", "--gym-run-dir", "run", *args,
    )  # fmt: skip


@pytest.fixture(scope="session")
def gym_cli() -> str:
    return need_gym()


@pytest.fixture(scope="session")
def real_gym(gym_cli: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealGym]:
    settings = GymSettings(
        resources_server="mcqa",
        policy="scripted",
        policy_answer="\\boxed{E}",
        cli=gym_cli,
        server_venv="auto",
        shutdown_grace=20,
    )
    run_dir = tmp_path_factory.mktemp("shared-gym")
    endpoint, started = start_deployment(settings, run_dir)
    try:
        yield RealGym(endpoint, gym_cli, run_dir)
    finally:
        stop_started(started, settings.shutdown_grace)


@pytest.fixture
def gym(real_gym: RealGym) -> Iterator[RealGym]:
    """The shared Gym with its policy reset to answer \\boxed{E} (2 of the 5 example rows right)."""
    real_gym.reset()
    yield real_gym
    real_gym.reset()


@pytest.fixture(autouse=True)
def _inner_runs_in_file_order(request: pytest.FixtureRequest) -> None:
    """Runs made with pytester keep pytest's order even where pytest-randomly is installed (it loads in them too).

    The outer run may be shuffled (that finds tests that lean on each other); the inner runs are a user's
    runs whose output the tests read line by line. pytester clears PYTEST_ADDOPTS, so set it after it.
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        request.getfixturevalue("monkeypatch").setenv("PYTEST_ADDOPTS", "-p no:randomly")
