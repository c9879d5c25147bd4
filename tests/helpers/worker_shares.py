"""The order of this repo's own tests under ``--dist worksteal``: which worker starts with which tests.

``--dist worksteal`` cuts the collected list into one contiguous share per worker, the sizes its scheduler
makes (``share_sizes``), and an idle worker later steals the second half of the longest queue. The real-Gym
tests are CPU-bound: each Gym start costs about 20 s of CPU across five processes. On two cores, three
workers starting Gyms at once took tests/gym 681 s instead of 468 s with two. So the real-Gym tests go to at
most ``GYM_WORKERS`` workers, first in their shares (the Gyms they share start once per process and stop after
its last real-Gym test), and every share ends with short tests, which is what an idle worker steals.

Alone, three workers ran tests/unit and tests/session in 152 s instead of 199 s (they mostly wait on sockets,
subprocesses and timers); in CI, where the oldest setup's leg already fills that idle time, a third worker
gained nothing (scripts/test.sh), so CI runs two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

#: Workers that run real-Gym tests: the cores of CI's machine.
GYM_WORKERS = 2


def share_sizes(total: int, workers: int) -> list[int]:
    """The sizes of the contiguous shares xdist's worksteal scheduler hands out first (its ``check_schedule``:
    each idle node in turn gets ``len(pending) // nodes_remaining``)."""
    sizes, left = [], total
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def worker_order(slow: Sequence[T], fast: Sequence[T], workers: int) -> list[T]:
    """``slow`` (real-Gym tests, sorted by file) and ``fast`` in shares: the slow ones split among the first
    ``min(workers, GYM_WORKERS)`` shares, each leading its share; the fast ones fill every share to xdist's size.

    When the slow tests outnumber what those shares hold, the rest of them go to the next shares (never
    dropped)."""
    gym_workers = max(1, min(workers, GYM_WORKERS))
    sizes = share_sizes(len(slow) + len(fast), workers)
    slow_parts = [
        list(slow[len(slow) * i // gym_workers : len(slow) * (i + 1) // gym_workers]) for i in range(gym_workers)
    ]
    pending_slow: list[T] = []
    ordered: list[T] = []
    fast_left = list(fast)
    for i, size in enumerate(sizes):
        share = pending_slow + (slow_parts[i] if i < gym_workers else [])
        pending_slow = share[size:]  # more slow tests than the share holds: the next share leads with them
        share = share[:size]
        take = size - len(share)
        share += fast_left[:take]
        del fast_left[:take]
        ordered += share
    return ordered + pending_slow + fast_left
