"""Attaching to the real Gym whose head reports pids that are not its servers' (as another host's would be):
the trials pass. A proxy (the stand-in Gym forwarding the head's routes) rewrites the pids the real head reports."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.processes import dead_pid
from tests.helpers.realgym import RealGym, attach
from tests.helpers.standin import Answer, Request, StandinGym


def pid_proxy(target: str) -> StandinGym:
    """The head at ``target`` behind the stand-in: ``/server_instances`` with a dead pid, ours, and 1."""
    proxy = StandinGym()
    fake_pids = [dead_pid(), os.getpid(), 1]

    def forward(request: Request) -> Answer:
        with urllib.request.urlopen(target + request.target, timeout=30) as upstream:
            status, body = upstream.status, upstream.read()
        if request.route == "/server_instances":
            instances = json.loads(body)
            for i, instance in enumerate(instances):
                instance["pid"] = fake_pids[i % len(fake_pids)]
            body = json.dumps(instances).encode()
        return Answer(status=status, body=body)

    for route in ("/server_instances", "/global_config_dict_yaml", "/readyz", "/health"):
        proxy.routes[route] = forward
    return proxy


def test_attaching_to_a_real_gym_whose_pids_are_not_ours(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    gym.script(latency_ms=300)  # 5 trials one at a time: longer than a watchdog's first look (1 s)
    proxy = pid_proxy(gym.url)
    try:
        args = attach(gym, "--gym-concurrency", "1")
        result = pytester.runpytest("--gym-url", proxy.base_url, *args[2:])
    finally:
        proxy.close()
    result.assert_outcomes(passed=2, failed=3)
    assert gym.policy_calls() == 5
