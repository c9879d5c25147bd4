"""``--gym-repeats-adaptive``: a task's repeats stop once its verdict under ``--gym-task-pass`` cannot change.

The stand-in Gym of ``tests/helpers/standin.py`` answers each (task, repeat) with a scripted reward, so which
repeats must run is known in advance: the shortest prefix of the task's outcomes after which every completion
gives one verdict (computed here by enumerating the completions, not by the plugin's rule).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gym.core.dataset import Task
from pytest_gym.core.outcome import TrialOutcome, TrialSpec
from pytest_gym.core.taskrule import parse_task_rule
from pytest_gym.rollout.admission import Admission, SuitePolicy
from pytest_gym.rollout.ledger import Ledger
from tests.helpers.standin import Request, StandinGym, serving

AGENT = "fake_agent"  # the stand-in Gym's agent

XDIST = [("-p", "no:xdist"), ("-n", "2")]


def needed(pattern: tuple[int, ...], rule: str) -> int:
    """Repeats that must run: the shortest prefix whose every completion gives the full pattern's verdict."""
    k = len(pattern)
    check = parse_task_rule(rule)
    for ran in range(k + 1):
        s = sum(pattern[:ran])
        verdicts = {check.passes(k, s + sum(rest)) for rest in itertools.product((0, 1), repeat=k - ran)}
        if len(verdicts) == 1:
            return ran
    raise AssertionError("a complete pattern decides")


class Scripted:
    """``/run``: reward pattern[task][repeat]; remembers which (task, repeat) were called."""

    def __init__(self, patterns: dict[str, tuple[int, ...]]) -> None:
        self.patterns = patterns
        self.called: set[tuple[str, int]] = set()
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> tuple[int, bytes]:

        body = request.json()
        task = str(body["responses_create_params"]["input"][0]["content"])
        repeat = int(body["_ng_rollout_index"])
        with self.lock:
            self.called.add((task, repeat))
        return 200, json.dumps({"reward": float(self.patterns[task][repeat])}).encode()


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving() as server:
        yield server


def write_rows(path: Path, tasks: list[str]) -> None:
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": t}]}} for t in tasks]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run(pytester: pytest.Pytester, gym: StandinGym, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", "run",
        "--gym-trajectories", "off", "--gym-repeats-adaptive", "-p", "no:cacheprovider", "-p", "no:randomly",
        "-rs", *args,
    )  # fmt: skip


MIXED = [p for p in itertools.product((0, 1), repeat=5) if sum(p) in (0, 2, 3, 4, 5)][::3]


@pytest.mark.parametrize("rule", ["all", "4/5", "majority", "any"])
def test_exactly_the_repeats_that_cannot_change_the_verdict_are_skipped(
    pytester: pytest.Pytester, gym: StandinGym, rule: str
) -> None:
    pytester.makeini("[pytest]\n")
    patterns = {f"t{i}": p for i, p in enumerate(MIXED)}
    write_rows(pytester.path / "data.jsonl", list(patterns))
    scripted = Scripted(patterns)
    gym.routes["/run"] = scripted
    result = run(pytester, gym, "--gym-repeats", "5", "--gym-task-pass", rule, "--gym-concurrency", "4")
    expected = {(t, r) for t, p in patterns.items() for r in range(needed(p, rule))}
    assert scripted.called == expected  # the prefix that decides each task, nothing after it
    outcomes = result.parseoutcomes()
    assert outcomes["skipped"] == 5 * len(patterns) - len(expected)
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == len(expected)
    result.stdout.fnmatch_lines([f"SKIPPED * decided: the task * --gym-task-pass {rule} after * of 5 repeats*"])
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    (suite,) = summary["suites"].values()
    assert suite["skipped"] == {"decided": outcomes["skipped"]}
    assert "pass@k and the interval are over the trials that ran" in suite["savings_note"]


@pytest.mark.parametrize("xdist", XDIST)
def test_decided_tasks_stop_their_repeats_under_xdist(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    """Tasks that always pass or always fail: 4/5 stops a passing task after 4 repeats, a failing one after 2,
    whichever worker runs which repeat."""
    pytester.makeini("[pytest]\n")
    patterns = {f"t{i}": (i % 2,) * 5 for i in range(12)}
    write_rows(pytester.path / "data.jsonl", list(patterns))
    scripted = Scripted(patterns)
    gym.routes["/run"] = scripted
    result = run(pytester, gym, "--gym-repeats", "5", "--gym-task-pass", "4/5", *xdist)
    per_task = {t: sum(1 for task, _ in scripted.called if task == t) for t in patterns}
    assert per_task == {t: 4 if p[0] else 2 for t, p in patterns.items()}
    result.assert_outcomes(passed=6 * 4, failed=6 * 2, skipped=6 * 1 + 6 * 3)


def spec(task: Task, repeat: int) -> TrialSpec:
    return TrialSpec(f"d.jsonl::{task.short_hash}[r{repeat}]", task, 0, repeat, None)


def outcome(s: TrialSpec, reward: float | None) -> TrialOutcome:
    if reward is None:
        return TrialOutcome.for_spec(s, error="boom", error_class="http")
    return TrialOutcome.for_spec(s, reward=reward)


def test_the_admission_waits_starts_and_skips(tmp_path: Path) -> None:
    task = Task(path=Path("d.jsonl"), line=1, offset=0, hash="a" * 64)
    specs = [spec(task, r) for r in range(3)]
    ledger = Ledger(tmp_path)
    admission = Admission(ledger, {"d.jsonl": SuitePolicy(3, parse_task_rule("all"), adaptive=True)})
    assert [admission.decide(s).action for s in specs] == ["start", "wait", "wait"]  # r0 could fail the task
    ledger.record(outcome(specs[0], 1.0))
    assert [admission.decide(s).action for s in specs[1:]] == ["start", "wait"]
    ledger.record(outcome(specs[1], None))  # an error settles nothing: r2 is still needed
    assert admission.decide(specs[2]).action == "start"
    ledger.record(outcome(specs[2], 0.0))
    failed = Admission(Ledger(tmp_path), {"d.jsonl": SuitePolicy(3, parse_task_rule("all"), adaptive=True)})
    assert failed.decide(specs[2]).action == "start"  # it ran: a rerun asks again
    other = Task(path=Path("d.jsonl"), line=2, offset=0, hash="b" * 64)
    ledger.record(outcome(spec(other, 0), 0.0))
    decision = admission.decide(spec(other, 1))
    assert (decision.action, decision.kind) == ("skip", "decided")
    assert "failed --gym-task-pass all after 1 of 3 repeats" in decision.reason
    majority = Admission(Ledger(tmp_path / "m"), {"d.jsonl": SuitePolicy(5, parse_task_rule("majority"), True)})
    # Three successes decide it: three repeats start at once, the fourth waits.
    assert [majority.decide(spec(other, r)).action for r in range(5)] == ["start"] * 3 + ["wait"] * 2
