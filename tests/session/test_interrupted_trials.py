"""A trial another plugin ends before it has an outcome counts as an errored trial, not as no trial.

pytest-timeout's ``--timeout`` (its signal, raised into the wait for a slow rollout) or a conftest fixture that
raises makes pytest report the trial as an error. The verdicts must see the same: before, such a trial was left
out of them, so a run of 6 trials with 5 timed out said "1 trial, 0 errors, mean reward 1.000, PASS" and its gate
``mean_reward>=0.8`` passed on the one trial left. The stand-in Gym answers task q0 at once and the others after
``SLOW_S`` (``tests/helpers/standin.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.standin import StandinGym, serving
from tests.helpers.standin_runs import attached_run, suite_summary

pytest.importorskip("pytest_timeout")

AGENT = "fake_agent"
TASKS, REPEATS = 3, 2
#: pytest-timeout's limit: the first trial's setup also finds Gym (a slow CI machine has taken over 1 s for it).
TIMEOUT = "2"
SLOW_S = 4.0
XDIST = [("-p", "no:xdist"), ("-n", "2")]


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:

        def slow_but_right(body: dict[str, Any]) -> float:
            if body["responses_create_params"]["input"][0]["content"] != "q0":
                time.sleep(SLOW_S)  # the stand-in serves each connection in its own thread
            return 1.0

        server.rewards = slow_but_right
        yield server


def run(pytester: pytest.Pytester, gym: StandinGym, *args: str) -> pytest.RunResult:
    return attached_run(pytester, gym, TASKS, REPEATS, *args, subprocess=True)  # a signal: a process of its own


@pytest.mark.parametrize("xdist", XDIST)
def test_trials_a_timeout_plugin_ended_are_errors_in_the_verdicts(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    # Concurrency 1: each slow rollout starts when its trial's wait (and its timeout) starts.
    result = run(
        pytester, gym, "--timeout", TIMEOUT, "--gym-concurrency", "1", "--gym-verdict", "gate",
        "--gym-gate", "mean_reward>=0.8", "--gym-price-in", "1000000", "--gym-price-out", "1000000", *xdist,
    )  # fmt: skip
    slow = (TASKS - 1) * REPEATS
    errors = result.parseoutcomes().get("errors", 0)
    # The slow trials; under xdist on a loaded machine also a fast one that waited for the one slot a slow one held.
    assert slow <= errors < TASKS * REPEATS, result.stdout.str()
    assert "Timeout" in result.stdout.str()
    # The timeout's exception cut passes of the rollouts' event loop short (pytest's thread runs it without xdist):
    # the loop still ends clean, its feeder task not left pending.
    assert "Task was destroyed but it is pending" not in result.stderr.str()
    found = suite_summary(pytester)
    assert (found["trials"], found["errors"]) == (TASKS * REPEATS - errors, errors)  # "trials": those with a reward
    assert found["gates"]["mean_reward>=0.8"]["passed"] is False  # undecided with 4 (or 5) of 6 errored: not a pass
    result.stdout.fnmatch_lines(["*FAILED data.jsonl::gate?mean_reward>=0.8?*"])
    # Every rollout that finished was paid for, the timed-out trials' included ($1 a token, 1 in and 1 out each).
    paid = len((pytester.path / "run" / "rollouts.jsonl").read_text().splitlines())
    assert paid > TASKS * REPEATS - errors  # some rollout finished after its trial timed out
    assert (found["totals"]["input_tokens"], found["totals"]["cost"]) == (paid, 2.0 * paid)


SETUP_ERRORS = {
    "fixture": """
        import pytest

        @pytest.fixture(autouse=True)
        def broken_for_r1(request):
            if request.node.name.endswith("[r1]"):
                raise RuntimeError("the conftest's fixture broke")
        """,
    "setup hook": """
        def pytest_runtest_setup(item):
            if item.name.endswith("[r1]"):
                raise RuntimeError("a plugin's setup hook broke")
        """,
}


@pytest.mark.parametrize("where", SETUP_ERRORS)
def test_a_trial_whose_setup_another_broke_is_an_error_in_the_verdicts(
    pytester: pytest.Pytester, gym: StandinGym, where: str
) -> None:
    gym.rewards = None  # every answer at once, reward 1.0
    pytester.makeconftest(SETUP_ERRORS[where])
    result = run(pytester, gym)
    result.assert_outcomes(passed=TASKS, errors=TASKS)
    found = suite_summary(pytester)
    assert (found["trials"], found["errors"], found["verdict"]) == (TASKS, TASKS, "FAIL")


def test_a_task_s_unfinished_trials_are_errors_in_the_verdicts(pytester: pytest.Pytester, gym: StandinGym) -> None:
    args = ("--timeout", TIMEOUT, "--gym-concurrency", "1", "--gym-verdict", "task", "-p", "no:xdist")
    result = run(pytester, gym, *args)
    result.assert_outcomes(passed=1, errors=TASKS - 1)
    found = suite_summary(pytester)
    assert found["trials"] + found["errors"] == TASKS * REPEATS
    assert found["errors"] >= TASKS - 1  # each slow task's first trial at least; its second may have run meanwhile


def test_a_task_a_fixture_errored_counts_each_trial_as_an_error(pytester: pytest.Pytester, gym: StandinGym) -> None:
    gym.rewards = None
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture(autouse=True)
        def broken(request):
            raise RuntimeError("the conftest's fixture broke")
        """
    )
    result = run(pytester, gym, "--gym-verdict", "task")
    result.assert_outcomes(errors=TASKS)
    found = suite_summary(pytester)
    assert (found["trials"], found["errors"]) == (0, TASKS * REPEATS)


BLOCKING_STEP = """
import time

import pytest_gym.rollout.transport as transport

_run = transport.Rollouts.run


async def run(self, spec):
    if spec.task_index == 1 and spec.repeat == 0:
        time.sleep(3.0)  # a rollout's step that takes long (a huge answer parsed and masked), in the loop's thread
    return await _run(self, spec)


transport.Rollouts.run = run
"""


def test_a_timeout_s_signal_ends_the_trial_it_timed_and_no_other(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """Without xdist pytest's thread would run the rollouts' loop: the signal raised inside a rollout's step ended
    that task, its slot was never given back, and every later trial timed out (the slow one passed)."""
    gym.rewards = None  # every answer at once
    pytester.makeconftest(BLOCKING_STEP)
    result = run(pytester, gym, "--timeout", TIMEOUT, "--gym-concurrency", "1", "-p", "no:xdist")
    result.assert_outcomes(passed=TASKS * REPEATS - 1, errors=1)
    # The trial timed out is the slow one, or the one waiting for the slot it holds (prefetched ahead of it).
    result.stdout.fnmatch_lines(["ERROR data.jsonl::* - Failed: Timeout*"])
    found = suite_summary(pytester)
    assert (found["trials"], found["errors"]) == (TASKS * REPEATS - 1, 1)


THREADS = """
import threading
from pathlib import Path


def pytest_runtest_teardown(item):
    with Path("threads.txt").open("a") as fh:
        fh.write(" ".join(t.name for t in threading.enumerate()) + "\\n")
"""


@pytest.mark.parametrize(
    ("args", "env", "own_thread"),
    [
        ((), "", False),
        (("--timeout", "30"), "", True),
        ((), "30", True),
        (("--timeout", "30", "--timeout-method", "thread"), "", False),
        (("--timeout", "30", "-o", "timeout_func_only=true"), "", False),
    ],
    ids=["no timeout", "signal timeout", "PYTEST_TIMEOUT", "thread method", "func_only"],
)
def test_the_rollouts_loop_has_its_own_thread_only_under_a_signal_timeout(
    pytester: pytest.Pytester,
    gym: StandinGym,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    env: str,
    own_thread: bool,
) -> None:
    gym.rewards = None
    pytester.makeconftest(THREADS)
    if env:
        monkeypatch.setenv("PYTEST_TIMEOUT", env)
    else:
        monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    run(pytester, gym, *args, "-p", "no:xdist").assert_outcomes(passed=TASKS * REPEATS)
    seen = (pytester.path / "threads.txt").read_text()
    assert ("pytest-gym-dispatch" in seen) is own_thread


MARKED = """

import pytest


def pytest_collection_modifyitems(items):
    for item in items:  # the Gym items: a conftest's way to give them pytest-timeout's marker
        item.add_marker(pytest.mark.{marker})
"""


@pytest.mark.parametrize(
    ("marker", "own_thread"),
    [
        ("timeout(30)", True),
        ("timeout(timeout=30, method='signal')", True),
        ("timeout(30, 'thread')", False),
        ("timeout(timeout=30, func_only=True)", False),
        ("timeout(0)", False),
    ],
    ids=["seconds", "keywords", "thread method", "func_only", "no timeout"],
)
def test_a_timeout_marker_on_gym_items_gives_the_loop_its_own_thread(
    pytester: pytest.Pytester, gym: StandinGym, monkeypatch: pytest.MonkeyPatch, marker: str, own_thread: bool
) -> None:
    gym.rewards = None
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    pytester.makeconftest(THREADS + MARKED.format(marker=marker))
    run(pytester, gym, "-p", "no:xdist").assert_outcomes(passed=TASKS * REPEATS)
    seen = (pytester.path / "threads.txt").read_text()
    assert ("pytest-gym-dispatch" in seen) is own_thread


def test_a_timeout_marker_s_signal_ends_the_trial_it_timed_and_no_other(
    pytester: pytest.Pytester, gym: StandinGym, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker's signal, as the option's (``test_a_timeout_s_signal_ends_the_trial_it_timed_and_no_other``)."""
    gym.rewards = None
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    pytester.makeconftest(BLOCKING_STEP + MARKED.format(marker=f"timeout({TIMEOUT})"))
    result = run(pytester, gym, "--gym-concurrency", "1", "-p", "no:xdist")
    result.assert_outcomes(passed=TASKS * REPEATS - 1, errors=1)
    result.stdout.fnmatch_lines(["ERROR data.jsonl::* - Failed: Timeout*"])
