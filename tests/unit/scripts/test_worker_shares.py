"""The order of this repo's own tests under --dist worksteal (tests/helpers/worker_shares.py)."""

from __future__ import annotations

import itertools

import pytest
from xdist.scheduler.worksteal import WorkStealingScheduling

from tests.helpers.worker_shares import GYM_WORKERS, share_sizes, worker_order


class _Node:
    """What worksteal's scheduler asks of a worker: its id, and the tests it was sent."""

    shutting_down = False

    def __init__(self, gateway_id: str) -> None:
        self.gateway = type("Gateway", (), {"id": gateway_id})()
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:  # a worker with nothing to run (a collection smaller than the workers)
        self.shutting_down = True

    def send_steal(self, indices: list[int]) -> None:  # only the first shares are read here
        pass


class _Config:
    """What the scheduler reads of pytest's config: ``-n N`` as xdist spells it (``--tx N*popen``)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx"
        return [f"{self.workers}*popen"]


def _first_shares(collection: list[str], workers: int) -> list[list[str]]:
    """The shares xdist's own worksteal scheduler hands out first, in the order the workers were added."""
    sched = WorkStealingScheduling(_Config(workers))  # type: ignore[arg-type]
    nodes = [_Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)  # type: ignore[arg-type]
    for node in nodes:
        sched.add_node_collection(node, collection)  # type: ignore[arg-type]
    sched.schedule()
    return [[collection[i] for i in node.sent] for node in nodes]


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_the_shares_are_the_sizes_xdist_hands_out(workers: int) -> None:
    for total in range(0, 40):
        collection = [f"t{i}" for i in range(total)]
        assert [len(share) for share in _first_shares(collection, workers)] == share_sizes(total, workers)


@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_real_gym_tests_lead_the_shares_of_at_most_two_workers(workers: int) -> None:
    """Every mix of up to 12 slow and 30 fast tests: nothing lost or repeated; the slow ones lead their shares,
    in at most GYM_WORKERS of them, as evenly as they come; every share with room ends with fast ones."""
    for n_slow, n_fast in itertools.product(range(13), range(31)):
        slow = [f"gym{i}" for i in range(n_slow)]
        fast = [f"unit{i}" for i in range(n_fast)]
        ordered = worker_order(slow, fast, workers)
        assert sorted(ordered) == sorted(slow + fast)
        # the relative order within each kind is kept: pytest-randomly's shuffle and the sort by file
        assert [t for t in ordered if t.startswith("gym")] == slow
        assert [t for t in ordered if t.startswith("unit")] == fast
        shares = _first_shares(ordered, workers)
        with_gym = [share for share in shares if any(t.startswith("gym") for t in share)]
        for share in shares:
            kinds = [t.startswith("gym") for t in share]
            assert kinds == sorted(kinds, reverse=True)  # real-Gym tests first, then the short ones
        if n_slow <= sum(share_sizes(n_slow + n_fast, workers)[:GYM_WORKERS]):  # they fit: split evenly
            assert len(with_gym) <= min(workers, GYM_WORKERS)
            counts = [sum(t.startswith("gym") for t in share) for share in with_gym]
            assert max(counts, default=0) - min(counts, default=0) <= 1


def test_three_workers_keep_the_third_free_of_gyms() -> None:
    ordered = worker_order([f"gym{i}" for i in range(130)], [f"unit{i}" for i in range(1376)], 3)
    shares = _first_shares(ordered, 3)
    assert [sum(t.startswith("gym") for t in share) for share in shares] == [65, 65, 0]
