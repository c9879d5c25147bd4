"""A seeded stochastic stand-in for a model at temperature > 0, for statistics over the judge's functions.

A real model is not a deterministic policy: each task has its own chance of being answered right,
and every trial is a fresh draw. ``StandIn`` holds those chances, one per task:

* ``equal(tasks, p)``: every task at ``p``;
* ``beta(tasks, mean, concentration, seed)``: chances drawn from Beta(mean * c, (1 - mean) * c), so
  tasks differ in difficulty (intra-task correlation 1 / (1 + c));
* ``mix(tasks, p, solid, hopeless)``: a deterministic mix, a share of tasks always right, a share always
  wrong, the rest at ``p``;

and ``broken(indices)`` is the same stand-in with those tasks always wrong (a real break), ``lowered(d)``
one with every chance ``d`` lower. ``run(rng, repeats)`` draws a run: each task's rewards in trial order,
keyed by a full SHA-256 task hash (baselines want real hashes). Standard library only; every draw comes
from the ``random.Random`` passed in, so a seed reproduces a run.

For pytest runs, ``rows`` writes a dataset of the stand-in's tasks and ``Draws`` answers the fake Gym
head's ``/run`` with seeded rewards (the scripted policy has the same mode for a real Gym:
``pytest_gym.standins.policy``, ``chance``/``seed``).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any


@cache
def task_hashes(tasks: int) -> tuple[str, ...]:
    """Stable full-length task hashes, one per task index."""
    return tuple(hashlib.sha256(f"stochastic task {i}".encode()).hexdigest() for i in range(tasks))


@dataclass(frozen=True)
class StandIn:
    """Per-task chances of a success; ``partial`` draws rewards of four quarter-point checks instead of 0/1."""

    chances: tuple[float, ...]
    partial: bool = False

    @property
    def tasks(self) -> int:
        return len(self.chances)

    @property
    def mean(self) -> float:
        """The true mean reward (the expectation every run estimates)."""
        return sum(self.chances) / len(self.chances)

    def broken(self, indices: Iterable[int]) -> StandIn:
        """The same stand-in with these tasks always failing."""
        dead = set(indices)
        return StandIn(tuple(0.0 if i in dead else p for i, p in enumerate(self.chances)), self.partial)

    def lowered(self, drop: float) -> StandIn:
        """Every chance ``drop`` lower (all must stay >= 0): the true mean drops by exactly ``drop``."""
        if min(self.chances) < drop:
            raise ValueError(f"cannot lower a chance of {min(self.chances)} by {drop}")
        return StandIn(tuple(p - drop for p in self.chances), self.partial)

    def rewards(self, rng: random.Random, repeats: int | Iterable[int]) -> list[list[float]]:
        """Each task's rewards in trial order; ``repeats`` per task, or one count per task."""
        counts = [repeats] * self.tasks if isinstance(repeats, int) else list(repeats)
        r = rng.random
        if self.partial:
            return [[((r() < p) + (r() < p) + (r() < p) + (r() < p)) / 4.0 for _ in range(m)] for p, m in zip(
                self.chances, counts, strict=True)]  # fmt: skip
        return [[1.0 if r() < p else 0.0 for _ in range(m)] for p, m in zip(self.chances, counts, strict=True)]

    def run(self, rng: random.Random, repeats: int | Iterable[int]) -> dict[str, list[float]]:
        """One run: task hash -> rewards in trial order."""
        return dict(zip(task_hashes(self.tasks), self.rewards(rng, repeats), strict=True))


def equal(tasks: int, p: float, partial: bool = False) -> StandIn:
    return StandIn((p,) * tasks, partial)


def beta(tasks: int, mean: float, concentration: float, seed: int | str = 0, partial: bool = False) -> StandIn:
    rng = random.Random(f"beta/{tasks}/{mean}/{concentration}/{seed}")
    a, b = mean * concentration, (1.0 - mean) * concentration
    return StandIn(tuple(rng.betavariate(a, b) for _ in range(tasks)), partial)


def mix(tasks: int, p: float, solid: float = 0.5, hopeless: float = 0.0) -> StandIn:
    """The first ``solid`` share of tasks always right, the last ``hopeless`` share always wrong, the rest at p."""
    always = round(tasks * solid)
    never = round(tasks * hopeless)
    return StandIn((1.0,) * always + (p,) * (tasks - always - never) + (0.0,) * never)


class Draws:
    """A seeded stochastic Gym agent: rewards for the fake Gym head's ``/run`` (tests/helpers/standin.StandinGym).

    Repeat r of a task gets draw r of that task (a hash of seed, task and r, r the request's
    ``_ng_rollout_index``), so a run is the same whatever order its trials arrive in. ``chances`` maps a
    task (the text of its row's first input message) to its chance of reward 1; ``partial`` draws four
    quarter-point checks instead. ``errored`` tasks answer HTTP 500 on every call, ``errored_calls`` on
    their repeat r (``(task, r)``).
    """

    def __init__(
        self,
        chances: dict[str, float],
        seed: int | str = 0,
        partial: bool = False,
        errored: frozenset[str] = frozenset(),
        errored_calls: frozenset[tuple[str, int]] = frozenset(),
    ) -> None:
        self.chances, self.seed, self.partial = chances, seed, partial
        self.errored, self.errored_calls = errored, errored_calls
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def _uniform(self, *parts: object) -> float:
        digest = hashlib.sha256(repr((self.seed, *parts)).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def __call__(self, body: dict[str, Any]) -> tuple[int, bytes]:
        task = str(body["responses_create_params"]["input"][0]["content"])
        n = int(body["_ng_rollout_index"])
        with self.lock:
            self.calls[task] = self.calls.get(task, 0) + 1
        if task in self.errored or (task, n) in self.errored_calls:
            return 500, b'{"error": "scripted outage"}'
        p = self.chances[task]
        if self.partial:
            reward = sum(self._uniform(task, n, check) < p for check in range(4)) / 4.0
        else:
            reward = 1.0 if self._uniform(task, n) < p else 0.0
        return 200, json.dumps({"reward": reward}).encode()


def rows(stand_in: StandIn, prefix: str = "q") -> tuple[str, dict[str, float]]:
    """A dataset (JSONL text) with one row per task of ``stand_in``, and each row's chance by its task text."""
    texts = [f"{prefix}{i}" for i in range(stand_in.tasks)]
    data = "".join(json.dumps({"responses_create_params": {"input": [{"role": "user", "content": t}]}}) + "\n"
                   for t in texts)  # fmt: skip
    return data, dict(zip(texts, stand_in.chances, strict=True))
