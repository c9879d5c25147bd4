"""Work per trial stays constant as the suite grows: nothing that walks every item runs once per trial.

Not a timing test (speed is the benchmarks' job): it counts how often the whole plan is walked. Before the
fix, ``GymSession.plan`` (a pass over every collected item) ran for every trial, O(trials^2) in a run:
a 200,000-trial run spent most of its CPU there.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from pytest_gym.runfolder.layout import ERRORS_FILE
from tests.helpers.standin import Answer, StandinGym, serving

COUNTING_CONFTEST = """
import json, os
from pytest_gym.session import GymSession

calls = [0]
original = GymSession.plan

def counted(self, session):
    calls[0] += 1
    return original(self, session)

GymSession.plan = counted

def pytest_sessionfinish(session):
    name = "plan-calls-" + os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(str(session.config.rootpath), name), "w") as fh:
        fh.write(json.dumps(calls[0]))
"""


AGENT = "fake_agent"


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        yield server


def write_rows(pytester: pytest.Pytester, count: int) -> None:
    """``data.jsonl``: ``count`` distinct one-question rows."""
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(count)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_the_plan_is_made_a_bounded_number_of_times_per_process(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(COUNTING_CONFTEST)
    write_rows(pytester, 40)
    result = pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-repeats", "2",
        "-p", "no:cacheprovider", "-p", "no:randomly", *xdist, timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=80)
    counts = {p.name: json.loads(p.read_text()) for p in pytester.path.glob("plan-calls-*")}
    assert counts, "the counting conftest did not run"
    # Once for the trial state, once to hand the plan to the dispatcher: per process, not per trial.
    assert all(n <= 3 for n in counts.values()), counts


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_a_gym_that_cannot_be_reached_makes_no_plan_per_trial(
    pytester: pytest.Pytester, xdist: tuple[str, ...]
) -> None:
    """Failures cost more than passes: once the deployment is known unreachable, every later trial errors
    with the cached reason at once, without walking the plan again."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(COUNTING_CONFTEST)
    write_rows(pytester, 40)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: nothing answers there
        result = pytester.runpytest_subprocess(
            "--gym-url", f"http://127.0.0.1:{port}", "--gym-agent", AGENT, "--gym-dataset", "data.jsonl",
            "--gym-repeats", "2", "--gym-startup-timeout", "1", "-p", "no:cacheprovider", "-p", "no:randomly",
            *xdist, timeout=300,
        )  # fmt: skip
    result.assert_outcomes(errors=80)
    counts = {p.name: json.loads(p.read_text()) for p in pytester.path.glob("plan-calls-*")}
    assert counts, "the counting conftest did not run"
    assert all(n <= 3 for n in counts.values()), counts


REPR_CONFTEST = """
import json, os
import pytest

filtered = []
original = pytest.Function._traceback_filter

def counted(self, excinfo):
    filtered.append(self.nodeid)
    return original(self, excinfo)

pytest.Function._traceback_filter = counted
seen = []

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and call.excinfo is not None:
        before = len(filtered)
        ours = item._repr_failure_py(call.excinfo, "auto")
        used = len(filtered) > before
        # pytest's own filtering of the same failure, as any test item gets it
        item._traceback_filter = lambda excinfo: original(item, excinfo)
        pytests = item._repr_failure_py(call.excinfo, "auto")
        del item._traceback_filter
        seen.append([call.when, str(ours), str(pytests), repr(ours.reprcrash), repr(pytests.reprcrash), used])
    return report

def pytest_sessionfinish(session):
    with open(os.path.join(str(session.config.rootpath), "reprs.json"), "w") as fh:
        fh.write(json.dumps(seen))
"""


def test_a_trial_failure_reads_as_pytest_would_show_it_without_filtering_its_traceback(
    pytester: pytest.Pytester, gym: StandinGym
) -> None:
    """A failure pytest-gym raises (a low reward; a fault in setup) is shown by its message alone: its report is
    the one pytest makes, without pytest's per-frame filtering of the traceback (a path and a stat per frame)."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(REPR_CONFTEST)
    write_rows(pytester, 4)
    gym.rewards = lambda body: 0.0  # every trial fails ...
    gym.faults = [Answer(status=500, body=b"boom")]  # ... but the first rollout, an error in setup
    result = pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-concurrency", "1",
        "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", timeout=300,
    )  # fmt: skip
    result.assert_outcomes(failed=3, errors=1)
    seen = json.loads((pytester.path / "reprs.json").read_text())
    assert sorted(when for when, *_ in seen) == ["call", "call", "call", "setup"], seen
    for when, ours, pytests, our_crash, pytests_crash, used in seen:
        assert ours == pytests, when
        assert our_crash == pytests_crash, when
        assert not used, f"pytest filtered the traceback of a {when} failure pytest-gym raised"
    assert "reward 0.0 < min_reward 1.0" in "".join(ours for when, ours, *_ in seen if when == "call")


FREEZE_CONFTEST = """
import atexit, gc, json, os

seen = {"during": [], "after": None}

def pytest_runtest_call(item):
    seen["during"].append(gc.get_freeze_count())

def write():
    seen["after"] = gc.get_freeze_count()
    with open(os.environ["FREEZE_OUT"], "w") as fh:
        fh.write(json.dumps(seen))

atexit.register(write)  # after pytest's unconfigure
"""


def test_the_heap_of_a_run_with_trials_is_never_frozen(
    pytester: pytest.Pytester, gym: StandinGym, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frozen heap (``gc.freeze``) saved full collections, but ``gc.get_referrers`` does not see frozen objects:
    Hypothesis's ``register_random`` (trio registers its generator when Hypothesis loads during a run) then
    warned in the demo's output that trio's generator could be collected. A plugin leaves the collector as it
    is."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(FREEZE_CONFTEST)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    write_rows(pytester, 3)
    out = pytester.path / "freeze.json"
    monkeypatch.setenv("FREEZE_OUT", str(out))
    result = pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "test_plain.py", "data.jsonl",
        "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    assert json.loads(out.read_text()) == {"during": [0, 0, 0, 0], "after": 0}


COUNT_CONFTEST = """
import json, os
from pytest_gym.rollout.budget import SharedErrorCount

calls = [0]
original = SharedErrorCount.count

def counted(self):
    calls[0] += 1
    return original(self)

SharedErrorCount.count = counted

def pytest_sessionfinish(session):
    with open(os.path.join(str(session.config.rootpath), "count-calls"), "w") as fh:
        fh.write(json.dumps(calls[0]))
"""


@pytest.mark.parametrize(("budget", "looked"), [((), False), (("--gym-max-errors", "5"), True)])
def test_the_shared_error_count_is_read_per_trial_only_under_an_error_budget(
    pytester: pytest.Pytester, gym: StandinGym, budget: tuple[str, ...], looked: bool
) -> None:
    """The run's error count is a file shared by the xdist workers: without --gym-max-errors it is not read."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(COUNT_CONFTEST)
    write_rows(pytester, 4)
    result = pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", *budget,
        "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    calls = json.loads((pytester.path / "count-calls").read_text())
    assert (calls >= 4) if looked else (calls == 0), calls


@pytest.mark.parametrize(("budget", "counted"), [((), None), (("--gym-max-errors", "9"), 4)])
def test_errored_trials_are_counted_in_a_shared_file_only_under_an_error_budget(
    pytester: pytest.Pytester, gym: StandinGym, budget: tuple[str, ...], counted: int | None
) -> None:
    """A file append per errored trial that only --gym-max-errors reads is not made without it."""
    pytester.makeini("[pytest]\n")
    write_rows(pytester, 4)
    result = pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-reward-key", "nope",
        "--gym-run-dir", "run", *budget, "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
    )  # fmt: skip
    result.assert_outcomes(errors=4)
    errors_file = pytester.path / "run" / ERRORS_FILE
    assert (errors_file.stat().st_size if errors_file.exists() else None) == counted
