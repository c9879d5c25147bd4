"""Everything in tests/gym/ needs a real NeMo Gym: marked ``gym`` here, by folder, and given what they share.

- One real Gym deployment per test process and configuration: mcqa with the built-in scripted policy (the
  only stand-in: Gym itself is real). Tests attach to it with ``--gym-url`` and steer the policy through
  its ``/_script`` route.
- One kept Gym per test process and start configuration (``kept_pool``, ``--gym-reuse``) for start-mode tests
  that are not about starting: the first such run starts it, the next with the same settings attaches. The
  shared mcqa Gym above is one of them.
- One Ray cluster per test process, which every Gym started here joins (``RAY_ADDRESS``) instead of
  starting its own: Gym's orchestrator starts Ray at every ``gym env start`` but the servers these tests use
  never touch it, and a Ray start is about a third of a Gym start's CPU. Tests about a started Gym's whole
  process tree and lifetime ask for ``own_ray``: their Gym starts its own cluster, as it does for users.

All of them are scoped to this folder (``package``): they stop once the process's last real-Gym test is done
(the root conftest runs these tests first and together), instead of idling through the rest of the run.

Without Gym these tests skip locally and fail under CI, where they must run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gym.core.pids import pid_alive
from pytest_gym.core.settings import GymSettings
from pytest_gym.gym.kept import OWNER_FILE, acquire_kept, release_kept, stop_kept
from pytest_gym.process.groups import log_tail, spawn_supervised, stop_supervised
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


#: Starts a Ray cluster, writes its address, holds it until SIGINT. Lean, for it idles through a test process's
#: whole real-Gym phase (the servers these tests start never schedule Ray work): no dashboard (nothing reads it),
#: no CPUs (Ray prestarts no idle workers for them), and with ``RAY_LEAN`` no metrics, event or usage reporting.
#: Measured idle: 1.7 CPU-s a minute instead of 3.6 (a test process holds one for 8-13 minutes in CI).
RAY_HOLDER = """
import sys, time
from pathlib import Path
import ray
ray.init(include_dashboard=False, num_cpus=0)
Path(sys.argv[1]).write_text(ray.get_runtime_context().gcs_address)
try:
    time.sleep(24 * 3600)
except KeyboardInterrupt:
    pass
"""


#: Ray's own switches for what nobody reads here: metrics, event statistics, usage reports.
RAY_LEAN = {"RAY_enable_metrics_collection": "0", "RAY_event_stats": "0", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="package", autouse=True)
def shared_ray(gym_cli: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray cluster for this test process; ``RAY_ADDRESS`` makes every Gym started here join it."""
    folder = tmp_path_factory.mktemp("ray")
    address = folder / "address"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", **RAY_LEAN}  # loopback only: no token files in a home folder
    env.pop("RAY_ADDRESS", None)
    holder = spawn_supervised(
        "ray", [str(Path(gym_cli).parent / "python"), "-c", RAY_HOLDER, str(address)], folder, folder / "ray.log",
        env=env, grace=20,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not (address.is_file() and address.read_text()):
            if time.monotonic() > deadline or not pid_alive(holder.pid):
                log = folder / "ray.log"
                pytest.fail(f"the shared Ray cluster did not start; {log}:\n{log_tail(log)}")
            time.sleep(0.1)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_ADDRESS", address.read_text())
            patch.setenv("RAY_AUTH_MODE", "disabled")
            yield address.read_text()
    finally:
        stop_supervised([holder])


@pytest.fixture(scope="package")
def pool_of_this_process(shared_ray: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``--gym-reuse`` folder of this test process: its kept Gyms live as long as it (``owner``), and are stopped
    after its last test of this folder, before the Ray cluster they joined."""
    pool = tmp_path_factory.mktemp("kept")
    (pool / OWNER_FILE).write_text(str(os.getpid()))
    yield pool
    stop_kept(pool, grace=20)


@pytest.fixture
def own_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Gym this test starts starts its own Ray cluster (a test about its whole process tree)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)


@pytest.fixture(scope="package")
def real_gym(gym_cli: str, pool_of_this_process: Path, tmp_path_factory: pytest.TempPathFactory) -> RealGym:
    """The shared Gym, kept in this process's pool: start-mode tests with the same settings (``start_mode`` and
    ``reuse``: mcqa, the policy answering E) attach to it too. Leased only while such a test runs."""
    settings = GymSettings(
        resources_server="mcqa",
        policy="scripted",
        policy_answer="\\boxed{E}",
        cli=gym_cli,
        server_venv="auto",
        shutdown_grace=20,
        reuse=str(pool_of_this_process),
        reuse_idle=24 * 3600,  # attached tests do not mark it used; the pool's end stops it
    )
    run_dir = tmp_path_factory.mktemp("shared-gym")
    endpoint, record = acquire_kept(settings, run_dir, os.getpid())
    release_kept(record, run_dir)  # free for the start-mode tests of this process
    return RealGym(endpoint, gym_cli, run_dir)


@pytest.fixture(scope="package")
def kept_pool(real_gym: RealGym, pool_of_this_process: Path) -> Path:
    """``--gym-reuse`` folder for start-mode tests that are not about starting (``reuse``). The shared Gym is in it
    first: a start-mode test with its settings that came first would start it with that test's idle time
    (``reuse``'s 5 minutes), and the attached tests, which do not mark it used, would then lose it."""
    return pool_of_this_process


@pytest.fixture
def gym(real_gym: RealGym) -> Iterator[RealGym]:
    """The shared Gym with its policy reset to answer \\boxed{E} (2 of the 5 example rows right)."""
    real_gym.reset()
    yield real_gym
    real_gym.reset()
