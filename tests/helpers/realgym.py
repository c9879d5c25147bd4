"""A real Gym for the tests: finding its CLI, a handle on a running deployment, and the arguments to use it."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_gym.core.endpoint import GymEndpoint
from pytest_gym.standins.policy import start_script
from tests.helpers.paths import ROOT


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
        """The policy's whole start script again (as a kept lease sets it): a test's changes are all undone, those
        of a start-mode test that leased this Gym with ``PYTEST_GYM_POLICY_SCRIPT`` (``empty_if``...) included."""
        self.script(**asdict(start_script("\\boxed{E}", None, 0.0, None)), reset_stats=True)


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


def reuse(pool: Path) -> tuple[str, ...]:
    """Arguments that keep the Gym a start-mode run starts in ``pool`` (tests/gym/conftest.py's ``kept_pool``), or
    attach to the one kept there for the same settings. Unused for 5 minutes, it stops (an idle Gym still costs
    about 2% of a core): long enough for the tests of a few files in between (test_review's tool-calling base
    run and test_trajectories' tool-calling run share one)."""
    return (f"--gym-reuse={pool}", "--gym-reuse-idle", "300")
