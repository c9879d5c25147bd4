"""Adaptive concurrency: on 429/503 the run's limit halves (once per window), then grows back by one per window
up to --gym-concurrency, shared by xdist workers; the summary counts the 429s and shows the limit over time.

A stand-in Gym whose /run answers 429 (Retry-After: 1) to any request above 4 in flight: a provider with a
concurrency limit of 4. Run at --gym-concurrency 16 with retries over 200 trials, a fixed concurrency met 52
and 77 answers 429 in two runs (``--gym-concurrency-adaptive off``); the adaptive limit 18 (one process) and
4 to 9 (``-n 2``); the test requires at most 40 (the counts print with ``-s``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from tests.helpers.standin import Answer, Request, StandinGym, reply, serving

pytestmark = pytest.mark.runtime

AGENT = "fake_agent"
CAPACITY = 4


class Provider:
    """/run of a provider that serves ``CAPACITY`` requests at once and answers 429 (Retry-After: 1) to more."""

    def __init__(self, work_s: float = 0.02) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.throttled = 0
        self.served = 0
        self.work_s = work_s

    def __call__(self, request: Request) -> Answer:
        with self.lock:
            if self.active >= CAPACITY:
                self.throttled += 1
                return reply({"detail": "rate limited"}, 429, headers={"Retry-After": "1"})
            self.active += 1
        try:
            time.sleep(self.work_s)
        finally:
            with self.lock:
                self.active -= 1
                self.served += 1
        return reply({"reward": 1.0, "response": {"usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}})


@pytest.fixture
def provider() -> Iterator[tuple[StandinGym, Provider]]:
    with serving(AGENT) as gym:
        handler = Provider()
        gym.routes["/run"] = handler
        yield gym, handler


def run_throttled(pytester: pytest.Pytester, gym: StandinGym, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\n")
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(100)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-repeats", "2",
        "--gym-concurrency", "16", "--gym-retries", "30", "--gym-trajectories", "off", "--gym-run-dir", "run",
        "-p", "no:cacheprovider", "-p", "no:randomly", *args,
    )  # fmt: skip


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_a_rate_limited_provider_meets_few_429s_and_no_trial_errors(
    pytester: pytest.Pytester, provider: tuple[StandinGym, Provider], xdist: tuple[str, ...]
) -> None:
    gym, handler = provider
    result = run_throttled(pytester, gym, *xdist)
    result.assert_outcomes(passed=200)
    print(f"adaptive, {' '.join(xdist)}: {handler.throttled} answers 429 over 200 trials")  # seen with -s
    assert handler.served == 200
    assert handler.throttled <= 40, handler.throttled
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())["concurrency"]
    assert summary["adaptive"] is True
    assert summary["ceiling"] == 16
    assert summary["status_429"] == summary["throttled"] == handler.throttled  # every 429 counted, once
    assert summary["lowest"] <= CAPACITY < 16
    assert summary["timeline"][0] == [0.0, 16.0]
    assert len(summary["timeline"]) >= 2
    assert f"{handler.throttled} answers 429/503" in result.stdout.str()


def test_a_fixed_concurrency_is_kept_when_adaptation_is_off(
    pytester: pytest.Pytester, provider: tuple[StandinGym, Provider]
) -> None:
    """Today's behaviour: the limit stays at 16, so the provider answers many more 429s; they are counted."""
    gym, handler = provider
    result = run_throttled(pytester, gym, "--gym-concurrency-adaptive", "off")
    result.assert_outcomes(passed=200)
    print(f"fixed: {handler.throttled} answers 429 over 200 trials")  # seen with -s
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())["concurrency"]
    assert summary["adaptive"] is False
    assert summary["timeline"] == []
    assert summary["status_429"] == handler.throttled > 40
