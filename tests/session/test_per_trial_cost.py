"""Work per trial stays constant as the suite grows: nothing that walks every item runs once per trial.

Not a timing test (speed is the benchmarks' job): it counts how often the whole plan is walked. Before the
fix, ``GymSession.plan`` (a pass over every collected item) ran for every trial, O(trials^2) in a run:
a 200,000-trial run spent most of its CPU there.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from tests.helpers.standin import StandinGym, serving

COUNTING_CONFTEST = """
import json, os
from pytest_gym.session import GymSession

calls = [0]
original = GymSession.plan

def counted(self, session):
    calls[0] += 1
    return original(self, session)

GymSession.plan = counted

def pytest_sessionfinish(session):
    name = "plan-calls-" + os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(str(session.config.rootpath), name), "w") as fh:
        fh.write(json.dumps(calls[0]))
"""


AGENT = "fake_agent"


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        yield server


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_the_plan_is_made_a_bounded_number_of_times_per_process(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(COUNTING_CONFTEST)
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(40)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-repeats", "2",
        "-p", "no:cacheprovider", "-p", "no:randomly", *xdist, timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=80)
    counts = {p.name: json.loads(p.read_text()) for p in pytester.path.glob("plan-calls-*")}
    assert counts, "the counting conftest did not run"
    # Once for the trial state, once to hand the plan to the dispatcher: per process, not per trial.
    assert all(n <= 3 for n in counts.values()), counts


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_a_gym_that_cannot_be_reached_makes_no_plan_per_trial(
    pytester: pytest.Pytester, xdist: tuple[str, ...]
) -> None:
    """Failures cost more than passes: once the deployment is known unreachable, every later trial errors
    with the cached reason at once, without walking the plan again."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(COUNTING_CONFTEST)
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(40)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: nothing answers there
        result = pytester.runpytest_subprocess(
            "--gym-url", f"http://127.0.0.1:{port}", "--gym-agent", AGENT, "--gym-dataset", "data.jsonl",
            "--gym-repeats", "2", "--gym-startup-timeout", "1", "-p", "no:cacheprovider", "-p", "no:randomly",
            *xdist, timeout=300,
        )  # fmt: skip
    result.assert_outcomes(errors=80)
    counts = {p.name: json.loads(p.read_text()) for p in pytester.path.glob("plan-calls-*")}
    assert counts, "the counting conftest did not run"
    assert all(n <= 3 for n in counts.values()), counts
