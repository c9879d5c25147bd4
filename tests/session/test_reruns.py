"""A Gym trial runs once, whatever plugin reruns failed tests (``pytest_gym/one_run.py``).

The stand-in Gym plays a stochastic model whose later samples pass: each trial's first ``/run`` gets reward 0.0,
any later ``/run`` of the same trial 1.0. Under pytest-rerunfailures every failed trial would be rerun and pass:
the run would report a mean reward of 1.0 for a model whose trials all failed, and pay for twice the rollouts.
Each trial must run once and fail, the summary must say 0.0, and the run must say why its trials were not rerun;
the suite's other tests keep their reruns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.standin import StandinGym, serving
from tests.helpers.standin_runs import CountedRuns, attached_run, suite_summary, summary

pytest_rerunfailures = pytest.importorskip("pytest_rerunfailures")

AGENT = "fake_agent"
TASKS, REPEATS = 3, 2
TRIALS = TASKS * REPEATS
XDIST = [("-p", "no:xdist"), ("-n", "2"), ()]
NOTE = "does not rerun Gym trials: each runs once"


@pytest.fixture
def policy() -> Iterator[tuple[StandinGym, CountedRuns]]:
    with serving(AGENT) as gym:
        gym.rewards = rewards = CountedRuns(lambda n: 0.0 if n == 1 else 1.0)  # the first sample fails, later ones pass
        yield gym, rewards


def run(pytester: pytest.Pytester, gym: StandinGym, *args: str, ini: str = "") -> pytest.RunResult:
    return attached_run(pytester, gym, TASKS, REPEATS, *args, ini=ini)


def mean_reward(pytester: pytest.Pytester) -> float:
    value: float = suite_summary(pytester)["mean_reward"]
    return value


def has_force_reruns() -> bool:
    return "--force-reruns" in Path(pytest_rerunfailures.__file__).read_text(encoding="utf-8")


REQUESTS = [
    pytest.param(("--reruns", "2"), "", "--reruns 2", id="--reruns"),
    pytest.param((), "reruns = 2\n", "reruns = 2 (ini)", id="ini"),
    pytest.param(
        ("--force-reruns", "1"), "", "--force-reruns 1", id="--force-reruns",
        marks=pytest.mark.skipif(not has_force_reruns(), reason="this pytest-rerunfailures has no --force-reruns"),
    ),
]  # fmt: skip


@pytest.mark.parametrize("xdist", XDIST)
@pytest.mark.parametrize(("args", "ini", "request_text"), REQUESTS)
def test_a_rerun_plugin_does_not_rerun_a_trial_into_a_pass(
    pytester: pytest.Pytester,
    policy: tuple[StandinGym, CountedRuns],
    xdist: tuple[str, ...],
    args: tuple[str, ...],
    ini: str,
    request_text: str,
) -> None:
    gym, rewards = policy
    result = run(pytester, gym, *args, *xdist, ini=ini)
    outcomes = result.parseoutcomes()
    outcomes.pop("warnings", None)
    assert outcomes == {"failed": TRIALS}, result.stdout.str()  # no pass, no "rerun"
    assert sorted(rewards.calls.values()) == [1] * TRIALS  # one rollout per trial: none paid for twice
    assert mean_reward(pytester) == 0.0
    result.stdout.fnmatch_lines([f"note: {request_text} {NOTE}*"])
    assert NOTE in summary(pytester)["notes"][0]


@pytest.mark.parametrize("xdist", XDIST)
def test_the_suite_s_other_tests_keep_their_reruns(
    pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns], xdist: tuple[str, ...]
) -> None:
    gym, rewards = policy
    pytester.makepyfile(
        test_other="""
        from pathlib import Path

        def test_fails_once():
            marker = Path(__file__).with_name("ran-once")
            first = not marker.exists()
            marker.touch()
            assert not first
        """
    )
    result = run(pytester, gym, "--reruns", "1", "test_other.py", *xdist)
    outcomes = result.parseoutcomes()
    outcomes.pop("warnings", None)  # in-process pytester: pytest_gym is imported before the run's rewrite hook
    assert outcomes == {"failed": TRIALS, "passed": 1, "rerun": 1}, result.stdout.str()
    assert sorted(rewards.calls.values()) == [1] * TRIALS


def test_a_flaky_marker_on_trials_reruns_none_and_says_so(
    pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns]
) -> None:
    gym, rewards = policy
    pytester.makeconftest(
        """
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                item.add_marker(pytest.mark.flaky(reruns=3))
        """
    )
    result = run(pytester, gym)
    result.assert_outcomes(failed=TRIALS)
    assert sorted(rewards.calls.values()) == [1] * TRIALS
    result.stdout.fnmatch_lines([f"note: The flaky marker {NOTE}*"])


@pytest.mark.parametrize("ini", ["", "reruns = 2\n"], ids=["no ini", "--reruns 0 over the ini"])
def test_no_rerun_asked_no_note(pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns], ini: str) -> None:
    gym, _ = policy
    result = run(pytester, gym, "--reruns", "0", ini=ini)
    result.assert_outcomes(failed=TRIALS)
    assert NOTE not in result.stdout.str()


RERUNNER = """
import pytest
from _pytest.runner import runtestprotocol


class Rerunner:
    '''flaky's way (box/flaky, ``--force-flaky``): rerun a failed test through the protocol hook, up to 3 runs.'''

    def pytest_runtest_protocol(self, item, nextitem):
        if not item.config.getoption("force_flaky"):
            return None
        for attempt in range(3):
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            if all(not r.failed for r in reports):
                break
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        return True


def pytest_addoption(parser):
    parser.addoption("--force-flaky", action="store_true", default=False)


def pytest_configure(config):
    config.pluginmanager.register(Rerunner(), "flaky")
"""


@pytest.mark.parametrize("xdist", XDIST)
def test_any_plugin_that_reruns_through_the_protocol_runs_a_trial_once(
    pytester: pytest.Pytester, policy: tuple[StandinGym, CountedRuns], xdist: tuple[str, ...]
) -> None:
    gym, rewards = policy
    pytester.makeconftest(RERUNNER)
    result = run(pytester, gym, "--force-flaky", "-p", "no:rerunfailures", *xdist)
    result.assert_outcomes(failed=TRIALS)
    assert sorted(rewards.calls.values()) == [1] * TRIALS
    assert mean_reward(pytester) == 0.0
    result.stdout.fnmatch_lines([f"note: --force-flaky {NOTE}*"])
