"""Attach-mode health on its own: a server that keeps failing its probe is dead after repeated checks, and
concurrent checks share one round of probes. (Start-mode pids: tests/unit/core/test_pids.py; through pytest:
tests/session/test_attached_health.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from pytest_gym.core.endpoint import GymEndpoint, ServerInstance
from pytest_gym.rollout.health import FAILED_CHECKS, Health
from pytest_gym.rollout.http import HTTPPool
from tests.helpers.standin import Answer, StandinDeployment, StandinGym


@pytest.fixture
def fake_gym() -> Iterator[StandinDeployment]:
    fake = StandinDeployment()
    yield fake
    fake.close()


# -- Health on its own: refusals and repeated failures -------------------------------------------------


def test_a_server_that_keeps_failing_its_probe_is_dead_after_repeated_checks(fake_gym: StandinDeployment) -> None:
    hung = StandinGym("hung")
    hung.routes["/health"] = lambda _: Answer(hang_s=60)  # reads the probe and never answers: a hung server
    try:
        url = hung.base_url
        servers = [ServerInstance("hung", "t", "hung", url, 1), ServerInstance("ok", "t", "ok", fake_gym.agent.url, 1)]
        endpoint = GymEndpoint(fake_gym.head.url, servers, {})

        async def checks() -> list[str | None]:
            pool = HTTPPool()
            health = Health(endpoint, pool, probe_timeout_s=0.2)
            assert not health.watches  # attach mode: no pid watchdog
            try:
                return [await health.check() for _ in range(FAILED_CHECKS)]
            finally:
                await pool.aclose()

        results = asyncio.run(checks())
    finally:
        hung.close()
    assert results[:-1] == [None] * (FAILED_CHECKS - 1)
    assert results[-1] == (
        f"Gym server hung at {url} (no answer within 0.2 s; {FAILED_CHECKS} checks in a row) is not answering"
    )


def test_concurrent_checks_share_one_round_of_probes(fake_gym: StandinDeployment) -> None:
    fake_gym.resources.close()
    endpoint = GymEndpoint(fake_gym.head.url, [ServerInstance("r", "t", "r", fake_gym.resources.url, None)], {})

    async def checks() -> tuple[list[str | None], bool]:
        pool = HTTPPool()
        health = Health(endpoint, pool)
        signal = health.signal()
        try:
            results = await asyncio.gather(*(health.check() for _ in range(20)))
            return list(results), signal.done()
        finally:
            await pool.aclose()

    started = time.monotonic()
    results, signalled = asyncio.run(checks())
    assert time.monotonic() - started < 2  # one round (a refusal, 0.25 s, a refusal), not twenty
    assert len(set(results)) == 1
    assert results[0] is not None
    assert "connection refused" in results[0]
    assert signalled
