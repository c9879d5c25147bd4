"""pytest-repeat does not repeat a Gym trial, and the run says so (``pytest_gym/one_run.py``).

pytest-repeat's ``--count N`` and ``@pytest.mark.repeat(N)`` repeat a test function by parametrizing it; a Gym
item is not one it parametrizes. A user who asks for ``--count 3`` expecting 3 samples per task gets one per
trial: the run must say so once (terminal and summary), naming ``--gym-repeats``. The suite's plain test
functions are repeated as usual, which shows pytest-repeat was active in the run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.standin import StandinGym, serving
from tests.helpers.standin_runs import CountedRuns, attached_run, summary

pytest.importorskip("pytest_repeat")

AGENT = "fake_agent"
TASKS, REPEATS = 3, 2
TRIALS = TASKS * REPEATS
XDIST = [("-p", "no:xdist"), ("-n", "2"), ()]
NOTE = "does not repeat Gym trials: pytest-repeat repeats test functions, and a Gym trial is not one"
RIGHT_OPTION = f"--gym-repeats N takes N samples per task (this run: {REPEATS})."
RERUN_NOTE = "does not rerun Gym trials: each runs once"
PLAIN = """
def test_plain():
    pass
"""
MARKED = """
import pytest

@pytest.mark.repeat(3)
def test_plain():
    pass
"""
MARK_ALL = """
import pytest

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.repeat({count}))
"""


@pytest.fixture
def policy() -> Iterator[tuple[StandinGym, CountedRuns]]:
    with serving(AGENT) as gym:
        gym.rewards = rewards = CountedRuns()
        yield gym, rewards


def run(pytester: pytest.Pytester, gym: StandinGym, *args: str, plain: str = PLAIN) -> pytest.RunResult:
    pytester.makepyfile(test_other=plain)
    return attached_run(pytester, gym, TASKS, REPEATS, "test_other.py", *args)


def outcomes(result: pytest.RunResult) -> dict[str, int]:
    found = result.parseoutcomes()
    found.pop("warnings", None)  # in-process pytester: pytest_gym is imported before the run's rewrite hook
    return found


def notes(pytester: pytest.Pytester, text: str) -> list[str]:
    """The run summary's notes that hold ``text``."""
    return [note for note in summary(pytester)["notes"] if text in note]


@pytest.mark.parametrize("xdist", XDIST)
def test_count_does_not_repeat_trials_and_says_so_once(
    pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns], xdist: tuple[str, ...]
) -> None:
    gym, rewards = policy
    result = run(pytester, gym, "--count", "3", *xdist)
    assert outcomes(result) == {"passed": TRIALS + 3}, result.stdout.str()  # the plain test 3 times, trials once
    assert sorted(rewards.calls.values()) == [1] * TRIALS
    result.stdout.fnmatch_lines([f"note: --count 3 {NOTE}*"])
    assert result.stdout.str().count(NOTE) == 1
    (note,) = notes(pytester, NOTE)
    assert note == f"--count 3 {NOTE}. {RIGHT_OPTION}"


def test_a_repeat_marker_on_trials_says_so(pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns]) -> None:
    gym, rewards = policy
    pytester.makeconftest(MARK_ALL.format(count=3))  # on every item, after pytest-repeat's turn
    result = run(pytester, gym, plain=MARKED)
    assert outcomes(result) == {"passed": TRIALS + 3}, result.stdout.str()  # the plain test's own marker: 3 times
    assert sorted(rewards.calls.values()) == [1] * TRIALS
    result.stdout.fnmatch_lines([f"note: The repeat marker {NOTE}*"])
    assert result.stdout.str().count(NOTE) == 1
    assert len(notes(pytester, NOTE)) == 1


@pytest.mark.parametrize("xdist", XDIST)
def test_a_rerun_and_a_repeat_request_each_get_their_note_once(
    pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns], xdist: tuple[str, ...]
) -> None:
    pytest.importorskip("pytest_rerunfailures")
    gym, rewards = policy
    result = run(pytester, gym, "--count", "3", "--reruns", "2", *xdist)
    assert outcomes(result) == {"passed": TRIALS + 3}, result.stdout.str()
    assert sorted(rewards.calls.values()) == [1] * TRIALS
    result.stdout.fnmatch_lines([f"note: --reruns 2 {RERUN_NOTE}*"])
    result.stdout.fnmatch_lines([f"note: --count 3 {NOTE}*"])
    text = result.stdout.str()
    assert (text.count(NOTE), text.count(RERUN_NOTE)) == (1, 1)
    assert (len(notes(pytester, NOTE)), len(notes(pytester, RERUN_NOTE))) == (1, 1)


NO_REQUEST = [
    pytest.param((), "", id="no --count"),
    pytest.param(("--count", "1"), "", id="--count 1"),
    pytest.param((), MARK_ALL.format(count=1), id="repeat(1) marker"),
    pytest.param(("-p", "no:repeat"), MARK_ALL.format(count=3), id="repeat marker without pytest-repeat"),
]


@pytest.mark.parametrize(("args", "conftest"), NO_REQUEST)
def test_no_repeat_asked_no_note(
    pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns], args: tuple[str, ...], conftest: str
) -> None:
    gym, rewards = policy
    if conftest:
        pytester.makeconftest(conftest)
    result = run(pytester, gym, *args)
    assert outcomes(result) == {"passed": TRIALS + 1}, result.stdout.str()
    assert sorted(rewards.calls.values()) == [1] * TRIALS
    assert NOTE not in result.stdout.str()
    assert notes(pytester, NOTE) == []


def test_the_note_gives_each_suite_s_repeats() -> None:
    from pytest_gym.one_run import repeat_note

    tail = "--gym-repeats N takes N samples per task"
    assert repeat_note("--count 3", [2, 4]).endswith(f"{tail} (this run's suites: 2, 4).")  # suite files' own
    assert repeat_note("--count 3", []).endswith(f"{tail}.")  # none known: none said
