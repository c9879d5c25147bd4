"""``--gym-sequential`` through pytest, against the stand-in Gym of ``tests/helpers/standin.py`` (with and without
xdist): a run stops once its gate is decided, a gate no per-task mean decides runs every task. The statistics
(coverage at every stopping time, verdicts equal to the full run's) are in tests/unit/judge/test_sequential.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_gym.judge.sequential import task_order
from pytest_gym.report.junit import read_suite_properties
from tests.helpers.standin import Request, StandinGym, serving

AGENT = "fake_agent"  # the stand-in Gym's agent


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving() as server:
        yield server


def chance_of(task: str, repeat: int, p: float) -> float:
    u = int.from_bytes(hashlib.sha256(f"{task}/{repeat}".encode()).digest()[:8], "big") / 2**64
    return 1.0 if u < p else 0.0


def scripted(p: float, calls: list[str]) -> Any:
    def answer(request: Request) -> tuple[int, bytes]:
        body = request.json()
        task = str(body["responses_create_params"]["input"][0]["content"])
        calls.append(task)
        return 200, json.dumps({"reward": chance_of(task, int(body["_ng_rollout_index"]), p)}).encode()

    return answer


def rows(count: int) -> str:
    items = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(count)]
    return "".join(json.dumps(r) + "\n" for r in items)


def run(pytester: pytest.Pytester, gym: StandinGym, run_dir: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", run_dir,
        "--gym-trajectories", "off", "--gym-sequential", "--gym-seed", "11", "--gym-verdict", "gate",
        "-p", "no:cacheprovider", "-p", "no:randomly", "-rs", *args,
    )  # fmt: skip


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_a_sequential_run_stops_once_the_gate_is_decided(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text(rows(300))
    calls: list[str] = []
    gym.routes["/run"] = scripted(0.97, calls)
    result = run(
        pytester, gym, "run", "--gym-gate", "mean_reward>=0.8", "--gym-repeats", "2", "--junitxml", "r.xml", *xdist
    )
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    (suite,) = summary["suites"].values()
    seq = suite["sequential"]
    assert seq["seed"] == 11
    assert seq["stopped_early"] is True
    decided_at = seq["decided_at"]
    holds = "mean_reward>=0.8 holds for the whole suite at 95%"
    assert seq["message"] == f"decided after {decided_at} of 300 tasks: {holds}"
    assert suite["gates"]["mean_reward>=0.8"]["passed"] is True
    # The first tasks of the seeded order ran, each whole; the ones in flight at the decision finished.
    hashes = _hashes(pytester)
    order = task_order(11, "data.jsonl", list(hashes.values()))
    ran = set(calls)
    assert len(calls) == 2 * len(ran)
    # Alone, the dispatcher starts nothing once the decision holds: beyond the decided prefix ran at most what it
    # had started ahead (its lookahead, 64 trials: 32 tasks). Under xdist a worker also runs on while the other
    # finishes that prefix (the decision reads it alone): 24-79 tasks for decided_at 23 on a loaded 2-core CI.
    # Half the suite bounds that; a run that did not stop runs all 300.
    limit = decided_at + 32 if xdist == ("-p", "no:xdist") else 300 // 2
    assert decided_at <= len(ran) <= limit
    assert {hashes[t] for t in ran} >= set(order[:decided_at])
    outcomes = result.parseoutcomes()
    assert outcomes["skipped"] == 2 * (300 - len(ran))
    result.stdout.fnmatch_lines(
        [
            f"*sequential (--gym-seed 11): decided after * of 300 tasks: {holds}",
            f"SKIPPED * decided after * of 300 tasks: {holds}",
        ]
    )
    assert suite["skipped"] == {"sequential": outcomes["skipped"]}
    junit = read_suite_properties(pytester.path / "r.xml")
    assert junit["gym.data.jsonl.sequential"] == seq["message"]
    assert junit["gym.data.jsonl.skipped.sequential"] == str(outcomes["skipped"])
    page = (pytester.path / "run" / "report.html").read_text()
    assert 'data-chart="sequence"' in page
    assert seq["checks"]["mean_reward>=0.8"]["history"][-1][0] == decided_at
    # The interval is the confidence sequence's, and it holds the whole suite's mean reward (all 600 trials).
    assert "anytime-valid" in suite["ci_note"]
    whole = sum(chance_of(f"q{i}", r, 0.97) for i in range(300) for r in range(2)) / 600
    assert suite["ci_low"] <= whole <= suite["ci_high"]


def _hashes(pytester: pytest.Pytester) -> dict[str, str]:
    """Task text -> its hash, as the plugin computes it."""
    from pytest_gym.core.dataset import read_tasks

    tasks = read_tasks(pytester.path / "data.jsonl")
    return {f"q{i}": task.hash for i, task in enumerate(tasks)}


def test_a_gate_that_cannot_be_decided_early_runs_every_task(pytester: pytest.Pytester, gym: StandinGym) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text(rows(40))
    calls: list[str] = []
    gym.routes["/run"] = scripted(1.0, calls)
    result = run(pytester, gym, "run", "--gym-gate", "mean_reward>=0.5", "--gym-gate", "p90_latency_s<=60")
    result.assert_outcomes(passed=42)
    assert len(calls) == 40
    result.stdout.fnmatch_lines(["*sequential (--gym-seed 11): every task runs: p90_latency_s<=60 cannot be decided*"])


def test_sequential_refuses_adaptive_repeats(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text(rows(2))
    result = pytester.runpytest(
        "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "data.jsonl", "--gym-sequential", "--gym-repeats-adaptive"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-sequential needs every task's repeats*"])
