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
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache


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
