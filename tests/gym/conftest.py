"""Everything in tests/gym/ needs a real NeMo Gym: marked ``gym`` here, by folder, and given shared deployments.

One real Gym deployment per test process: mcqa with the built-in scripted policy (the only stand-in: Gym
itself is real). Tests attach to it with ``--gym-url`` and steer the policy through its ``/_script`` route.
Without Gym these tests skip locally and fail under CI, where they must run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.deployment import start_deployment, stop_started
from tests.helpers.realgym import RealGym, need_gym

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this folder ``gym`` before ``-m`` selects by markers."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.gym)


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
