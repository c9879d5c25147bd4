"""Rollouts a run paid for and judged nowhere are counted, not dropped.

pytest-gym starts rollouts ahead of pytest (up to ``--gym-concurrency`` at once). When pytest stops first (``-x``,
``--maxfail``, Ctrl-C) or reports the rest as not run (``--gym-max-errors``), the rollouts that finished meanwhile
were paid for, are in the run folder, and count in no suite: before, the run's totals left them out (a ``-x`` run
of 10 trials over 8 slots sent 17 rollouts, recorded 9 and reported the tokens of 1). Now the summary's
``unjudged`` and a run line say what they spent, and a note says how many were cancelled in flight (Gym may still
run those to the end; their usage is known nowhere). The stand-in Gym (``tests/helpers/standin.py``) answers task
q0 after ``FIRST_S`` with reward 0 (the first failure) and the other tasks at once, or after ``SLOW_S``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.standin import StandinGym, reply, serving
from tests.helpers.standin_runs import attached_run, suite_summary, summary

AGENT = "fake_agent"
TASKS, REPEATS = 5, 2
FIRST_S, SLOW_S = 0.5, 4.0
XDIST = [("-p", "no:xdist"), ("-n", "2")]
#: $1 per token in and out: the stand-in's usage is 1 + 1 tokens a rollout, so $2 a rollout.
PRICES = ("--gym-price-in", "1000000", "--gym-price-out", "1000000")
CANCELLED = re.compile(r"(\d+) rollouts? cancelled in flight when the run stopped")


def task_of(body: dict[str, Any]) -> str:
    return str(body["responses_create_params"]["input"][0]["content"])


def answering(slow: str | None = None) -> Any:
    """Rewards: q0 fails after FIRST_S, ``slow`` passes after SLOW_S, every other task passes at once."""

    def reward(body: dict[str, Any]) -> float:
        task = task_of(body)
        if task in ("q0", slow):
            time.sleep(FIRST_S if task == "q0" else SLOW_S)  # the stand-in serves each connection in its own thread
        return 0.0 if task == "q0" else 1.0

    return reward


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        server.rewards = answering()
        yield server


def records(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()]


def cancelled_in_flight(pytester: pytest.Pytester) -> int:
    """The rollouts the notes say were cancelled in flight (one note per process)."""
    return sum(int(m.group(1)) for note in summary(pytester)["notes"] if (m := CANCELLED.search(note)))


@pytest.mark.parametrize("xdist", XDIST)
def test_rollouts_finished_ahead_of_a_stopped_run_are_counted(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    result = attached_run(pytester, gym, TASKS, REPEATS, "-x", "-q", "--gym-concurrency", "8", *PRICES, *xdist)
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)  # xdist's -x: interrupted
    judged = suite_summary(pytester)
    counted = judged["trials"] + judged["errors"]
    assert counted < TASKS * REPEATS  # -x stopped the run
    paid = len(records(pytester))
    unjudged = summary(pytester).get("unjudged") or {"rollouts": 0, "tokens": 0, "cost": 0.0}
    # Every recorded rollout is judged in the suite or counted here; $2 and 2 tokens each.
    assert unjudged["rollouts"] == paid - judged["totals"]["trials_with_usage"]
    assert (unjudged["tokens"], unjudged["cost"]) == (2 * unjudged["rollouts"], 2.0 * unjudged["rollouts"])
    if xdist[0] == "-p":  # one process: the other tasks answer at once, all finished while q0 takes FIRST_S
        assert unjudged["rollouts"] >= (TASKS - 1) * REPEATS  # (xdist's workers run some of them meanwhile)
    # Every request Gym saw was recorded or is in the cancelled count.
    assert paid <= gym.calls["/run"] <= paid + cancelled_in_flight(pytester)
    if unjudged["rollouts"]:  # the line survives -q: money is never a detail
        result.stdout.fnmatch_lines(
            [f"not judged: {unjudged['rollouts']} rollout* finished for trials that did not run*"]
        )


def test_rollouts_cancelled_in_flight_are_noted(pytester: pytest.Pytester, gym: StandinGym) -> None:
    gym.rewards = answering(slow="q1")  # q1's two rollouts are still in flight when q0 fails
    attached_run(pytester, gym, TASKS, REPEATS, "-x", "--gym-concurrency", "8", "-p", "no:xdist")
    cancelled = cancelled_in_flight(pytester)
    assert cancelled >= REPEATS
    # Each of them was sent (Gym saw it) and none recorded: what Gym ran of them is known nowhere else.
    assert gym.calls["/run"] == len(records(pytester)) + cancelled
    assert not any(r["_ng_task_index"] == 1 for r in records(pytester))  # q1


@pytest.mark.parametrize("xdist", XDIST)
def test_a_rate_limited_run_ends_at_its_run_timeout_with_no_rollout_said_in_flight(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    """Every answer a 429 with ``Retry-After: 30``: the trials wait out the rate limit holding every slot. The run
    timeout (6 s) still ends the run (before, a trial waited for a free slot past it: 30-60 s), and none of the
    waiting rollouts has a request out, so none is said to be cancelled in flight."""
    gym.rewards = None
    gym.faults = [reply({"detail": "rate limited"}, 429, headers={"Retry-After": "30"}) for _ in range(TASKS * REPEATS)]
    args = ("--gym-run-timeout", "6", "--gym-retries", "3", "--gym-concurrency", "8", *xdist)
    started = time.monotonic()
    result = attached_run(pytester, gym, TASKS, REPEATS, *args)
    assert time.monotonic() - started < 25  # the 6 s timeout, the start and the end of a run; not Retry-After's 30
    result.stdout.fnmatch_lines(["*the run timeout (--gym-run-timeout 6 s) was hit*"])
    assert gym.calls["/run"] >= 1
    if xdist[0] == "-p":  # (xdist's workers start late on a loaded machine: their first requests may still be out)
        assert cancelled_in_flight(pytester) == 0


def test_rollouts_finished_for_trials_reported_not_run_are_counted(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """--gym-max-errors reports the trials after its limit as not run, finished rollouts or not."""
    gym.rewards = None  # every answer at once, reward 1.0; the first three are Gym's faults
    gym.faults = [reply({"detail": "boom"}, 500) for _ in range(3)]
    args = ("--gym-max-errors", "1", "--gym-retries", "0", "--gym-concurrency", "8", *PRICES, "-p", "no:xdist")
    attached_run(pytester, gym, TASKS, REPEATS, *args)
    judged = suite_summary(pytester)["totals"]["trials_with_usage"]
    unjudged = summary(pytester)["unjudged"]
    assert unjudged["rollouts"] == len(records(pytester)) - judged > 0
    assert unjudged["cost"] == 2.0 * unjudged["rollouts"]


SKIPPED_R1 = """
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if item.name.endswith("[r1]"):
            for mark in ({marker},):
                item.add_marker(mark)
"""


@pytest.mark.parametrize(
    ("marker", "args", "rolled_out"),
    [
        ("pytest.mark.skip(reason='not now')", (), TASKS),
        ("pytest.mark.skipif(True, reason='not now')", (), TASKS),
        ("pytest.mark.xfail(run=False, reason='not now')", (), TASKS),
        ("pytest.mark.xfail(False, run=False, reason='not now')", (), 2 * TASKS),  # its condition does not hold
        ("pytest.mark.xfail(True, reason='first'), pytest.mark.xfail(run=False)", (), 2 * TASKS),  # the first decides
        ("pytest.mark.xfail(run=False, reason='not now')", ("--runxfail",), 2 * TASKS),
    ],
    ids=["skip", "skipif", "xfail run=False", "xfail False", "first xfail runs", "--runxfail"],
)
def test_trials_skipped_before_their_setup_are_not_rolled_out(
    pytester: pytest.Pytester, gym: StandinGym, marker: str, args: tuple[str, ...], rolled_out: int
) -> None:
    """A conftest's (or a row tag's) unconditional skip: pytest never runs the trial, so no rollout is paid for it;
    a trial pytest runs all the same (an xfail that does not hold or comes second, --runxfail) is rolled out."""
    gym.rewards = None
    pytester.makeconftest(SKIPPED_R1.format(marker=marker))
    attached_run(pytester, gym, TASKS, REPEATS, "--gym-concurrency", "8", "-p", "no:xdist", *args)
    assert gym.calls["/run"] == rolled_out  # before: every [r1] too, dispatched ahead and never judged
    assert "unjudged" not in summary(pytester)


def test_a_trial_skipped_by_a_condition_it_rolled_out_is_counted(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """A skipif condition written as a string is pytest's to evaluate: the rollout went out ahead, and is counted."""
    gym.rewards = None
    pytester.makeconftest(SKIPPED_R1.format(marker="pytest.mark.skipif('1 == 1', reason='not now')"))
    attached_run(pytester, gym, TASKS, REPEATS, "--gym-concurrency", "8", *PRICES, "-p", "no:xdist")
    unjudged = summary(pytester)["unjudged"]
    assert unjudged["rollouts"] == len(records(pytester)) - TASKS == gym.calls["/run"] - TASKS > 0
    assert unjudged["cost"] == 2.0 * unjudged["rollouts"]


def test_shards_and_their_merge_leave_skipped_trials_out_alike(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """No shard rolls out a trial pytest skips before its setup: the merge does not ask a shard for it."""
    gym.rewards = None
    pytester.makeconftest(SKIPPED_R1.format(marker="pytest.mark.skip(reason='not now')"))
    for shard in ("1/2", "2/2"):
        attached_run(pytester, gym, TASKS, REPEATS, "--gym-shard", shard, "-p", "no:xdist")
        (pytester.path / "run").rename(pytester.path / f"shard-{shard[0]}")
    result = attached_run(
        pytester, gym, TASKS, REPEATS, "--gym-merge", "shard-1", "--gym-merge", "shard-2", "-p", "no:xdist"
    )
    result.assert_outcomes(passed=TASKS, skipped=TASKS)


def test_resume_reuses_what_a_stopped_run_left(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """The line says their records are in the run folder and --gym-resume reuses them: it does."""
    attached_run(pytester, gym, TASKS, REPEATS, "-x", "--gym-concurrency", "8", "-p", "no:xdist")
    first = gym.calls["/run"]
    paid = len(records(pytester))
    (pytester.path / "run").rename(pytester.path / "earlier")
    result = attached_run(pytester, gym, TASKS, REPEATS, "--gym-resume", "earlier", "-p", "no:xdist")
    result.assert_outcomes(passed=(TASKS - 1) * REPEATS, failed=REPEATS)
    assert gym.calls["/run"] - first == TASKS * REPEATS - paid


@pytest.mark.parametrize("xdist", XDIST)
def test_a_run_that_judged_every_rollout_has_nothing_unjudged(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    result = attached_run(pytester, gym, TASKS, REPEATS, "--gym-concurrency", "8", *xdist)
    result.assert_outcomes(passed=(TASKS - 1) * REPEATS, failed=REPEATS)
    assert "unjudged" not in summary(pytester)
    assert not cancelled_in_flight(pytester)
    assert "not judged" not in result.stdout.str()
