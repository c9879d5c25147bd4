"""``--gym-sequential``: gates decided for the whole suite before all of it ran, with a guarantee.

Statistics by simulation through the plugin's functions (rates stated; seeded, so reproducible): the
one-sided tests at the suite's true mean reject at any time in at most alpha of the runs (time-uniform
coverage), a sequential verdict equals the full run's in at least 95% of suites at every true mean (at the
threshold too), errored trials never decide a gate, the paired check decides a drop against the tolerance.
Then pytest runs against the stand-in Gym of ``tests/helpers/standin.py`` (with and without xdist).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from pytest_gym.judge.confseq import Capital, confidence_sequence
from pytest_gym.judge.gates import parse_gate
from pytest_gym.judge.sequential import suite_sequence, task_order
from pytest_gym.report.junit import read_suite_properties
from tests.helpers.standin import Request, StandinGym, serving

AGENT = "fake_agent"  # the stand-in Gym's agent

ALPHA = 0.05


def bernoulli_suite(rng: random.Random, tasks: int, p: float, repeats: int = 1) -> list[list[float]]:
    return [[1.0 if rng.random() < p else 0.0 for _ in range(repeats)] for _ in range(tasks)]


def sequential_verdict(gates: Sequence[str], suite: list[list[float]], rng: random.Random) -> tuple[bool, int]:
    """(every gate holds, tasks taken) of a sequential run over ``suite`` in a random order."""
    parsed = [parse_gate(g) for g in gates]
    sequence = suite_sequence(parsed, len(suite), 1.0, ALPHA)
    order = list(range(len(suite)))
    rng.shuffle(order)
    for i in order:
        sequence.take(str(i), list(suite[i]))
        if sequence.decided:
            break
    decisions = [seq.decision for _, seq in sequence.gates]
    assert all(d is not None for d in decisions)  # at the end every gate is decided (exactly, from all tasks)
    return all(decisions), sequence.tasks


def full_verdict(gates: Sequence[str], suite: list[list[float]]) -> bool:
    from pytest_gym.judge.stats import suite_stats

    stats = suite_stats({str(i): rewards for i, rewards in enumerate(suite)}, 1.0)
    values = {"mean_reward": stats.mean_reward, "pass@1": stats.pass_at[1]}
    ops = {">=": float.__ge__, "<=": float.__le__, ">": float.__gt__, "<": float.__lt__}
    return all(ops[g.op](float(values[g.metric_label] or 0.0), g.threshold) for g in map(parse_gate, gates))


# -- time-uniform coverage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tasks", "p"), [(60, 0.8), (200, 0.5), (200, 0.9), (400, 0.8)])
def test_the_tests_reject_the_true_mean_at_any_time_in_at_most_alpha_of_runs(tasks: int, p: float) -> None:
    """Each one-sided test, at the suite's own mean, checked after every task of every run: it ever rejects in
    at most alpha = 5% of runs (measured 0.7-3.3%, 600 runs each), so its confidence sequence covers the true
    mean at every stopping time at once."""
    rng = random.Random(f"coverage/{tasks}/{p}")
    runs = 600
    ever = {True: 0, False: 0}
    for _ in range(runs):
        values = [v for (v,) in bernoulli_suite(rng, tasks, p)]
        mean = sum(values) / tasks
        rng.shuffle(values)
        for upper in (True, False):
            capital = Capital(tasks, mean, upper)
            for x in values:
                capital.update(x)
                if capital.rejects(ALPHA):
                    ever[upper] += 1
                    break
    # 600 runs: a true rate of 5% is seen above 7.2% in < 1% of such checks; ours must stay below.
    assert ever[True] / runs <= 0.072, ever
    assert ever[False] / runs <= 0.072, ever


def test_the_confidence_sequence_contains_the_mean_and_shrinks_to_it() -> None:
    rng = random.Random(3)
    values = [v for (v,) in bernoulli_suite(rng, 300, 0.85)]
    mean = sum(values) / 300
    widths = []
    for t in (10, 50, 150, 300):
        low, high = confidence_sequence(values[:t], 300, ALPHA)
        assert low <= mean <= high
        widths.append(high - low)
    assert widths == sorted(widths, reverse=True)
    assert widths[-1] < 1e-9  # every task taken: the mean itself


# -- the verdict equals the full run's ---------------------------------------------------------------------


@pytest.mark.parametrize("tasks", [100, 400])
@pytest.mark.parametrize("p", [0.6, 0.75, 0.8, 0.85, 0.95])
def test_a_sequential_verdict_equals_the_full_runs(tasks: int, p: float) -> None:
    """mean_reward>=0.8 over suites drawn at a true mean p (at the threshold too): the sequential run's verdict
    equals the full suite's in >= 95% of suites (measured 97.3% at the threshold on 400 tasks, 99-100%
    elsewhere; 300 suites each), and far from the threshold it runs a fraction of the tasks (8-10% of 400)."""
    rng = random.Random(f"agree/{tasks}/{p}")
    suites = 300
    agree = taken = 0
    for _ in range(suites):
        suite = bernoulli_suite(rng, tasks, p)
        verdict, used = sequential_verdict(["mean_reward>=0.8"], suite, rng)
        agree += verdict == full_verdict(["mean_reward>=0.8"], suite)
        taken += used
    assert agree / suites >= 0.95, agree
    if abs(p - 0.8) >= 0.15 and tasks >= 400:
        assert taken / (suites * tasks) <= 0.25


def test_several_gates_and_repeats_keep_the_whole_verdict() -> None:
    """Two gates on 3 trials a task share alpha: the suite's verdict (both gates) equals the full run's in >= 95%
    of suites (measured 99.5%, 200 suites near both thresholds)."""
    gates = ["mean_reward>=0.7", "pass@1>=0.72"]
    rng = random.Random("two gates")
    agree = 0
    for _ in range(200):
        chances = [min(1.0, max(0.0, rng.gauss(0.74, 0.2))) for _ in range(150)]
        suite = [[1.0 if rng.random() < c else 0.0 for _ in range(3)] for c in chances]
        verdict, _ = sequential_verdict(gates, suite, rng)
        agree += verdict == full_verdict(gates, suite)
    assert agree / 200 >= 0.95


# -- what cannot decide ----------------------------------------------------------------------------------------


def test_errored_trials_never_decide_a_gate() -> None:
    """A third of the tasks errored: with them as failures the mean is 0.67 (< 0.8), as successes 1.0: the gate
    is decided only when every task ran (then exactly, as the full run's undecided-on-errors rule has it)."""
    sequence = suite_sequence([parse_gate("mean_reward>=0.8")], 300, 1.0)
    for i in range(300):
        sequence.take(str(i), [None] if i % 3 == 0 else [1.0])
        if i < 299:
            assert not sequence.decided, i
    ((_, check),) = sequence.gates
    assert check.decision is None


def test_gates_no_per_task_mean_decides_keep_every_task() -> None:
    sequence = suite_sequence([parse_gate("mean_reward>=0.5"), parse_gate("ci_low(mean_reward)>=0.5")], 100, 1.0)
    for i in range(100):
        sequence.take(str(i), [1.0])
    assert sequence.gates[0][1].decision is True
    assert not sequence.decided
    assert sequence.undecidable == ["ci_low(mean_reward)>=0.5"]


@pytest.mark.parametrize(("drop", "tolerance", "regression"), [(0.3, 0.05, True), (0.0, 0.1, False)])
def test_the_paired_check_decides_a_drop_against_the_tolerance(drop: float, tolerance: float, regression: bool) -> None:
    """A baseline at 0.9 per task, now 0.9 - drop: the paired check decides regression / none for the whole
    suite well before the end, the right way in every one of 100 suites."""
    rng = random.Random(f"paired/{drop}")
    hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(400)]
    for _ in range(100):
        means = {h: 1.0 if rng.random() < 0.9 else 0.0 for h in hashes}
        sequence = suite_sequence([], 400, 1.0, baseline_means=means, max_regression=tolerance)
        for h in rng.sample(hashes, len(hashes)):
            keep = means[h] if rng.random() >= drop / 0.9 else 0.0  # a share of the passing tasks now fail
            sequence.take(h, [keep])
            if sequence.decided:
                break
        assert sequence.baseline is not None
        assert sequence.baseline.decision is (not regression)
        assert sequence.tasks < 300


def test_the_order_is_seeded_and_a_permutation() -> None:
    hashes = [f"{i:064x}" for i in range(50)]
    assert task_order(7, "s", hashes) == task_order(7, "s", list(reversed(hashes)))
    assert sorted(task_order(7, "s", hashes)) == sorted(hashes)
    assert task_order(7, "s", hashes) != task_order(8, "s", hashes)


# -- through pytest --------------------------------------------------------------------------------------------


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving() as server:
        yield server


def chance_of(task: str, repeat: int, p: float) -> float:
    u = int.from_bytes(hashlib.sha256(f"{task}/{repeat}".encode()).digest()[:8], "big") / 2**64
    return 1.0 if u < p else 0.0


def scripted(p: float, calls: list[str]) -> Any:
    def answer(request: Request) -> tuple[int, bytes]:
        body = request.json()
        task = str(body["responses_create_params"]["input"][0]["content"])
        calls.append(task)
        return 200, json.dumps({"reward": chance_of(task, int(body["_ng_rollout_index"]), p)}).encode()

    return answer


def rows(count: int) -> str:
    items = [{"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}} for i in range(count)]
    return "".join(json.dumps(r) + "\n" for r in items)


def run(pytester: pytest.Pytester, gym: StandinGym, run_dir: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-dataset", "data.jsonl", "--gym-run-dir", run_dir,
        "--gym-trajectories", "off", "--gym-sequential", "--gym-seed", "11", "--gym-verdict", "gate",
        "-p", "no:cacheprovider", "-p", "no:randomly", "-rs", *args, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")])
def test_a_sequential_run_stops_once_the_gate_is_decided(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text(rows(300))
    calls: list[str] = []
    gym.routes["/run"] = scripted(0.97, calls)
    result = run(
        pytester, gym, "run", "--gym-gate", "mean_reward>=0.8", "--gym-repeats", "2", "--junitxml", "r.xml", *xdist
    )
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    (suite,) = summary["suites"].values()
    seq = suite["sequential"]
    assert seq["seed"] == 11
    assert seq["stopped_early"] is True
    decided_at = seq["decided_at"]
    holds = "mean_reward>=0.8 holds for the whole suite at 95%"
    assert seq["message"] == f"decided after {decided_at} of 300 tasks: {holds}"
    assert suite["gates"]["mean_reward>=0.8"]["passed"] is True
    # The first tasks of the seeded order ran, each whole; the ones in flight at the decision finished.
    hashes = _hashes(pytester)
    order = task_order(11, "data.jsonl", list(hashes.values()))
    ran = set(calls)
    assert len(calls) == 2 * len(ran)
    assert decided_at <= len(ran) <= 0.25 * 300
    assert {hashes[t] for t in ran} >= set(order[:decided_at])
    outcomes = result.parseoutcomes()
    assert outcomes["skipped"] == 2 * (300 - len(ran))
    result.stdout.fnmatch_lines(
        [
            f"*sequential (--gym-seed 11): decided after * of 300 tasks: {holds}",
            f"SKIPPED * decided after * of 300 tasks: {holds}",
        ]
    )
    assert suite["skipped"] == {"sequential": outcomes["skipped"]}
    junit = read_suite_properties(pytester.path / "r.xml")
    assert junit["gym.data.jsonl.sequential"] == seq["message"]
    assert junit["gym.data.jsonl.skipped.sequential"] == str(outcomes["skipped"])
    page = (pytester.path / "run" / "report.html").read_text()
    assert 'data-chart="sequence"' in page
    assert seq["checks"]["mean_reward>=0.8"]["history"][-1][0] == decided_at
    # The interval is the confidence sequence's, and it holds the whole suite's mean reward (all 600 trials).
    assert "anytime-valid" in suite["ci_note"]
    whole = sum(chance_of(f"q{i}", r, 0.97) for i in range(300) for r in range(2)) / 600
    assert suite["ci_low"] <= whole <= suite["ci_high"]


def _hashes(pytester: pytest.Pytester) -> dict[str, str]:
    """Task text -> its hash, as the plugin computes it."""
    from pytest_gym.core.dataset import read_tasks

    tasks = read_tasks(pytester.path / "data.jsonl")
    return {f"q{i}": task.hash for i, task in enumerate(tasks)}


def test_a_gate_that_cannot_be_decided_early_runs_every_task(pytester: pytest.Pytester, gym: StandinGym) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text(rows(40))
    calls: list[str] = []
    gym.routes["/run"] = scripted(1.0, calls)
    result = run(pytester, gym, "run", "--gym-gate", "mean_reward>=0.5", "--gym-gate", "p90_latency_s<=60")
    result.assert_outcomes(passed=42)
    assert len(calls) == 40
    result.stdout.fnmatch_lines(["*sequential (--gym-seed 11): every task runs: p90_latency_s<=60 cannot be decided*"])


def test_sequential_refuses_adaptive_repeats(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    (pytester.path / "data.jsonl").write_text(rows(2))
    result = pytester.runpytest(
        "--gym-url", "http://127.0.0.1:9", "--gym-dataset", "data.jsonl", "--gym-sequential", "--gym-repeats-adaptive"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-sequential needs every task's repeats*"])
