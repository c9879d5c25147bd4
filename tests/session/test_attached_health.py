"""Attach-mode health through pytest: trials pass whatever pids a remote Gym reports, and a server that stops
answering (found through HTTP, not through pids) fails the rest of the run fast, naming it.

The stand-in deployment's head reports pids that are not its servers': one that does not exist here and one of
an unrelated live process (this test process).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator

import pytest

from tests.helpers.processes import dead_pid
from tests.helpers.standin import Answer, Request, StandinDeployment, reply


class FakeGym(StandinDeployment):
    """The agent counts its runs, takes ``delay`` seconds each, and stops the resources server at run
    ``stop_resources_at`` (from then on it answers 500: it cannot reach its verifier)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.delay = 0.0
        self.runs = 0
        self.stop_resources_at: int | None = None
        self.resources_up = True
        self.pids = {"fake_agent": dead_pid(), "fake_resources": os.getpid()}
        self.agent.routes["/run"] = self.run

    def run(self, request: Request) -> Answer:
        with self.lock:
            self.runs += 1
            if self.stop_resources_at is not None and self.runs >= self.stop_resources_at and self.resources_up:
                self.resources_up = False
                self.resources.close()
        time.sleep(self.delay)
        if not self.resources_up:  # the agent could not reach its resources server to verify
            return reply({"detail": "verifier unreachable"}, 500)
        return reply({"reward": 1.0, "response": {"usage": {"total_tokens": 3}}})


@pytest.fixture
def fake_gym(pytester: pytest.Pytester) -> Iterator[FakeGym]:
    rows = "".join(json.dumps({"responses_create_params": {"input": f"q{i}"}}) + "\n" for i in range(8))
    (pytester.path / "data.jsonl").write_text(rows)
    pytester.makeini("[pytest]\n")
    fake = FakeGym()
    yield fake
    fake.close()


def attach_fake(fake: FakeGym, *args: str) -> tuple[str, ...]:
    return ("--gym-url", fake.head.url, "--gym-agent", "fake_agent", "--gym-dataset", "data.jsonl", *args)


def test_attached_trials_pass_whatever_pids_gym_reports(pytester: pytest.Pytester, fake_gym: FakeGym) -> None:
    """Pids of another machine: one that does not exist here, one of an unrelated live process."""
    fake_gym.delay = 0.2  # 8 trials one at a time: the run outlasts a watchdog's first look (1 s)
    result = pytester.runpytest(*attach_fake(fake_gym, "--gym-concurrency", "1"))
    result.assert_outcomes(passed=8)
    assert "no longer running" not in result.stdout.str()


def test_an_attached_server_that_stops_answering_fails_the_rest_fast_naming_it(
    pytester: pytest.Pytester, fake_gym: FakeGym
) -> None:
    """Detected through HTTP: the pids reported are of a live local process, which would hide a dead server."""
    fake_gym.pids = {"fake_agent": os.getpid(), "fake_resources": os.getpid()}
    fake_gym.stop_resources_at = 3
    started = time.monotonic()
    result = pytester.runpytest(*attach_fake(fake_gym, "--gym-concurrency", "1", "--gym-trial-timeout", "60", "-v"))
    assert time.monotonic() - started < 20
    result.assert_outcomes(passed=2, errors=6)
    url = fake_gym.resources.url
    result.stdout.fnmatch_lines([f"*Gym server fake_resources at {url} (connection refused) is not answering*"])
    assert result.stdout.str().count("is not answering") >= 6
    assert fake_gym.runs == 3  # after the first failure no trial was sent to the broken deployment
