"""Gym's next shapes, where they can be met without a released Gym: agents are also found among ``processors``
servers that serve ``/run`` (Gym's main moves ``/run`` there), and ``--gym-agent-type`` reaches ``gym env
start``. Stand-in heads list the servers; a fake ``gym`` records its command line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.gym.discovery import discover
from tests.helpers.fake_gym_cli import install, recorded_argv, start_args
from tests.helpers.standin import StandinGym, reply, serving


def openapi(*routes: str) -> dict[str, Any]:
    return {"openapi": "3.1.0", "paths": {route: {"post": {"summary": route}} for route in routes}}


@pytest.fixture
def deployment() -> Iterator[tuple[StandinGym, StandinGym, StandinGym]]:
    """A head listing two processors: one serving /run (an episode processor), one serving only /verify."""
    with serving("head") as head, serving("runner") as runner, serving("checker") as checker:
        runner.routes["/openapi.json"] = lambda _: reply(openapi("/run", "/aggregate_metrics"))
        checker.routes["/openapi.json"] = lambda _: reply(openapi("/verify"))
        head.instances = [
            {"process_name": "episode_runner", "server_type": "processors", "name": "single_agent", "url": runner.url},
            {"process_name": "checker", "server_type": "processors", "name": "verifier", "url": checker.url},
            {"process_name": "mcqa", "server_type": "resources_servers", "name": "mcqa", "url": checker.url},
        ]  # fmt: skip
        head.config_yaml = "{}\n"
        yield head, runner, checker


def test_a_processor_serving_run_is_found_as_an_agent(deployment: tuple[StandinGym, StandinGym, StandinGym]) -> None:
    head, runner, _ = deployment
    endpoint = discover(head.url)
    assert endpoint.agents == ["episode_runner"]
    assert endpoint.route_for("episode_runner") == f"{runner.url}/run"


def test_rows_run_through_the_processor(
    pytester: pytest.Pytester, deployment: tuple[StandinGym, StandinGym, StandinGym]
) -> None:
    head, runner, checker = deployment
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text("".join(
        json.dumps({"responses_create_params": {"input": f"q{i}"}}) + "\n" for i in range(3)
    ))  # fmt: skip
    result = pytester.runpytest(
        "--gym-url", head.url, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run", "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=3)  # no --gym-agent: the one place rows can go
    assert runner.calls.get("/run") == 3
    assert checker.calls.get("/run") is None
    bodies = [r.json() for r in runner.log if r.route == "/run"]
    assert {b["agent_ref"]["name"] for b in bodies} == {"episode_runner"}


def test_agent_type_reaches_gym_env_start(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("FAKE_GYM_RECORD", str(pytester.path / "record"))
    (pytester.path / "rows.jsonl").write_text('{"responses_create_params": {"input": "q"}}\n')
    fake: Path = install(pytester.path / "bin")
    result = pytester.runpytest(
        *start_args(fake), "--gym-dataset", "rows.jsonl", "--gym-agent-type", "simple_agent/fast"
    )
    result.assert_outcomes(passed=1)
    argv = recorded_argv(pytester.path / "record")
    assert argv[argv.index("--agent-type") + 1] == "simple_agent/fast"
    info = json.loads((pytester.path / "run" / "pytest_gym_run.json").read_text())
    assert info["basis"]["agent_type"] == "simple_agent/fast"  # a resume with another harness reuses nothing
