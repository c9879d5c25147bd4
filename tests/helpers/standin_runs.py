"""A user's pytest run attached to the stand-in Gym (``tests/helpers/standin.py``): tasks ``q0``, ``q1``, ... as
``data.jsonl`` (``stochastic.rows``), the run folder ``run`` and the summary ``summary.json``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers.standin import StandinGym
from tests.helpers.stochastic import equal, rows


def attached_run(
    pytester: pytest.Pytester,
    gym: StandinGym,
    tasks: int,
    repeats: int,
    *args: str,
    ini: str = "",
    subprocess: bool = False,
) -> pytest.RunResult:
    """``pytest`` over ``tasks`` tasks x ``repeats``, with ``ini`` in the ini file; in a process of its own with
    ``subprocess`` (a signal, a plugin that must load afresh)."""
    pytester.makeini(f"[pytest]\n{ini}")
    (pytester.path / "data.jsonl").write_text(rows(equal(tasks, 1.0))[0])
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest
    return run(
        "--gym-url", gym.url, "--gym-agent", gym.agent, "--gym-dataset", "data.jsonl", "--gym-repeats", str(repeats),
        "--gym-run-dir", "run", "--gym-summary", "summary.json", "--gym-trajectories", "off",
        "-p", "no:cacheprovider", "-p", "no:randomly", *args,
    )  # fmt: skip


def summary(pytester: pytest.Pytester) -> dict[str, Any]:
    """The run's summary file."""
    found: dict[str, Any] = json.loads((pytester.path / "summary.json").read_text())
    return found


def suite_summary(pytester: pytest.Pytester) -> dict[str, Any]:
    """The summary of the suite ``data.jsonl``."""
    found: dict[str, Any] = summary(pytester)["suites"]["data.jsonl"]
    return found


class CountedRuns:
    """The stand-in's ``/run`` rewards (``StandinGym.rewards``), counting each trial's calls in ``calls`` by
    (task index, repeat): ``reward(n)`` answers its n-th call (1.0 by default)."""

    def __init__(self, reward: Callable[[int], float] = lambda n: 1.0) -> None:
        self.calls: dict[tuple[int, int], int] = {}
        self.lock = threading.Lock()
        self._reward = reward

    def __call__(self, body: dict[str, Any]) -> float:
        trial = (int(body["_ng_task_index"]), int(body["_ng_rollout_index"]))
        with self.lock:
            calls = self.calls[trial] = self.calls.get(trial, 0) + 1
        return self._reward(calls)
