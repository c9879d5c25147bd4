"""``--gym-update-baseline`` writes what the run measured of the suite, and nothing of what it did not run.

Before, a run that judged part of a suite replaced the suite's whole baseline with that part: ``pytest -k <task>
--gym-update-baseline`` (the update command the run prints, with the user's ``-k``) left a 10-task baseline with
the one task, and ``-x`` with the few trials before the first failure; every later comparison judged against that.
Now a narrowed run (-k, -m, --deselect, --lf) updates its selected tasks and keeps the others, syrupy's way with
``--snapshot-update``; a stopped run (-x, --maxfail, Ctrl-C, --gym-max-errors) updates nothing and says so; a task
whose every trial errored keeps its entry.
The stand-in Gym (``tests/helpers/standin.py``) rewards task q0 with 0.0 and every other with 1.0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.standin import StandinGym, reply, serving
from tests.helpers.standin_runs import attached_run

AGENT = "fake_agent"
TASKS, REPEATS = 6, 2
XDIST = [("-p", "no:xdist"), ("-n", "2")]
UPDATE = ("--gym-baseline", "baseline.json", "--gym-update-baseline")


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving(AGENT) as server:
        server.rewards = {0: 0.0}
        yield server


def stored(pytester: pytest.Pytester) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((pytester.path / "baseline.json").read_text())["suites"]["data.jsonl"]
    return found


def rerun(pytester: pytest.Pytester, gym: StandinGym, *args: str) -> pytest.RunResult:
    """Another run of the suite into a new run folder."""
    import shutil

    shutil.rmtree(pytester.path / "run", ignore_errors=True)
    return attached_run(pytester, gym, TASKS, REPEATS, *args)


@pytest.mark.parametrize("xdist", XDIST)
def test_a_narrowed_update_keeps_the_tasks_it_did_not_run(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    rerun(pytester, gym, *UPDATE)
    before = stored(pytester)
    (q1,) = [h for h, t in before["tasks"].items() if t["line"] == 2]
    gym.rewards = {0: 0.0, 1: 0.0}  # q1 broke since
    result = rerun(pytester, gym, *UPDATE, "-k", q1[:12], *xdist)
    assert result.parseoutcomes()["failed"] == REPEATS  # q1's trials alone (xdist's workers deselect the rest)
    after = stored(pytester)
    assert set(after["tasks"]) == set(before["tasks"])  # before: only q1 was left
    assert after["tasks"][q1]["mean_reward"] == 0.0
    assert {h: t for h, t in after["tasks"].items() if h != q1} == {h: t for h, t in before["tasks"].items() if h != q1}
    assert (after["suite"]["tasks"], after["suite"]["trials"]) == (TASKS, TASKS * REPEATS)
    assert after["suite"]["mean_reward"] == pytest.approx((TASKS - 2) / TASKS)
    result.stdout.fnmatch_lines(["*baseline of data.jsonl written to *: 1 task updated, 0 added, 5 not selected kept*"])


@pytest.mark.parametrize("xdist", XDIST)
def test_a_stopped_run_updates_no_baseline(pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]) -> None:
    rerun(pytester, gym, *UPDATE)
    before = (pytester.path / "baseline.json").read_bytes()
    result = rerun(pytester, gym, *UPDATE, "-x", *xdist)
    assert result.parseoutcomes()["failed"] == 1  # stopped at q0's first trial
    assert (pytester.path / "baseline.json").read_bytes() == before
    result.stdout.fnmatch_lines(
        ["*baseline of data.jsonl not updated: the run stopped before * of its selected trials ran*"]
    )


@pytest.mark.parametrize("xdist", XDIST)
def test_a_run_the_error_budget_stopped_updates_no_baseline(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    """--gym-max-errors stops the workers' rollouts: the controller hears it from them."""
    rerun(pytester, gym, *UPDATE)
    before = (pytester.path / "baseline.json").read_bytes()
    gym.faults = [reply({"detail": "boom"}, 500) for _ in range(3)]
    result = rerun(pytester, gym, *UPDATE, "--gym-max-errors", "1", "--gym-retries", "0", *xdist)
    assert result.parseoutcomes()["errors"] >= 2
    assert (pytester.path / "baseline.json").read_bytes() == before
    result.stdout.fnmatch_lines(["*baseline of data.jsonl not updated*"])


def test_a_whole_update_keeps_the_tasks_whose_every_trial_errored(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """Gym failing q2 and q3 (or dying halfway) leaves them no measurement: they keep what the baseline knew."""
    rerun(pytester, gym, *UPDATE)
    before = stored(pytester)
    answer = gym.run
    gym.routes["/run"] = lambda request: (
        reply({"detail": "boom"}, 500) if request.json()["_ng_task_index"] in (2, 3) else answer(request)
    )
    result = rerun(pytester, gym, *UPDATE, "--gym-retries", "0")
    assert result.parseoutcomes()["errors"] == 2 * REPEATS
    after = stored(pytester)
    unmeasured = {h for h, t in before["tasks"].items() if t["line"] in (3, 4)}
    assert {h: after["tasks"][h] for h in unmeasured} == {h: before["tasks"][h] for h in unmeasured}
    assert after["suite"]["errors"] == 0  # the suite's numbers over what the baseline holds
    result.stdout.fnmatch_lines(["*baseline of data.jsonl written to *: 2 tasks with no trial measured (all errored)*"])


def test_a_node_id_on_the_command_line_updates_its_task_alone(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """The update command a run prints carries the user's node ids: the part they select is merged like -k's."""
    rerun(pytester, gym, *UPDATE)
    before = stored(pytester)
    (q1,) = [h for h, t in before["tasks"].items() if t["line"] == 2]
    result = rerun(pytester, gym, *UPDATE, f"data.jsonl::{q1[:12]}[r0]", f"data.jsonl::{q1[:12]}[r1]")
    result.assert_outcomes(passed=REPEATS)
    assert set(stored(pytester)["tasks"]) == set(before["tasks"])
    assert stored(pytester)["suite"]["trials"] == TASKS * REPEATS


def test_a_run_that_stopped_after_its_last_trial_updates_the_baseline(
    pytester: pytest.Pytester, gym: StandinGym
) -> None:
    """-x stops nothing when the failure is the last trial: every trial ran, the suite's baseline is written."""
    rerun(pytester, gym, *UPDATE)
    gym.rewards = lambda body: 0.0 if (body["_ng_task_index"], body["_ng_rollout_index"]) == (TASKS - 1, 1) else 1.0
    result = rerun(pytester, gym, *UPDATE, "-x", "-p", "no:xdist")
    result.assert_outcomes(passed=TASKS * REPEATS - 1, failed=1)
    assert stored(pytester)["suite"]["mean_reward"] == pytest.approx(1 - 1 / (TASKS * REPEATS))
    result.stdout.fnmatch_lines(["*baseline of data.jsonl written to *"])


def test_a_marker_selection_that_keeps_every_trial_replaces_the_baseline(
    pytester: pytest.Pytester, gym: StandinGym
) -> None:
    """``-m "not slow"`` in addopts selects every trial: the whole suite ran, and a task gone from the dataset goes."""
    rerun(pytester, gym, *UPDATE)
    import shutil

    shutil.rmtree(pytester.path / "run")
    attached_run(pytester, gym, TASKS - 1, REPEATS, *UPDATE, "-m", "not slow")  # the last row removed
    assert (stored(pytester)["suite"]["tasks"], len(stored(pytester)["tasks"])) == (TASKS - 1, TASKS - 1)


def test_a_run_the_run_timeout_cut_updates_no_baseline(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """Trials past --gym-run-timeout are errors: the suite was cut short, as by a budget, and nothing is written."""
    rerun(pytester, gym, *UPDATE)
    before = (pytester.path / "baseline.json").read_bytes()

    def slow_second_repeats(body: dict[str, Any]) -> float:
        if body["_ng_task_index"] >= 2 and body["_ng_rollout_index"] == 1:
            time.sleep(4.0)  # the stand-in serves each connection in its own thread
        return 1.0

    gym.rewards = slow_second_repeats
    result = rerun(pytester, gym, *UPDATE, "--gym-run-timeout", "3", "--gym-concurrency", "1", "-p", "no:xdist")
    assert result.parseoutcomes()["errors"] >= 1
    assert (pytester.path / "baseline.json").read_bytes() == before
    result.stdout.fnmatch_lines(["*baseline of data.jsonl not updated: the run timeout left trials unrun*"])


def test_a_skipped_trial_is_no_trial_a_stopped_run_missed(pytester: pytest.Pytester, gym: StandinGym) -> None:
    """-x failing at the last trial, with a trial skipped by a marker: every selected trial that can run ran."""
    rerun(pytester, gym, *UPDATE)
    pytester.makeconftest(
        "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
        "    items[0].add_marker(pytest.mark.skip(reason='not now'))\n"
    )
    gym.rewards = lambda body: 0.0 if (body["_ng_task_index"], body["_ng_rollout_index"]) == (TASKS - 1, 1) else 1.0
    result = rerun(pytester, gym, *UPDATE, "-x", "-p", "no:xdist")
    result.assert_outcomes(passed=TASKS * REPEATS - 2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*baseline of data.jsonl written to *"])


def test_a_whole_run_still_replaces_the_baseline(pytester: pytest.Pytester, gym: StandinGym) -> None:
    rerun(pytester, gym, *UPDATE, "-k", "r0")  # the first baseline: the selected tasks only
    assert stored(pytester)["suite"]["trials"] == TASKS
    rerun(pytester, gym, *UPDATE)
    assert (stored(pytester)["suite"]["tasks"], stored(pytester)["suite"]["trials"]) == (TASKS, TASKS * REPEATS)
