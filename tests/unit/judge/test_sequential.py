"""``--gym-sequential``: gates decided for the whole suite before all of it ran, with a guarantee.

Statistics by simulation through the plugin's functions (rates stated; seeded, so reproducible): the
one-sided tests at the suite's true mean reject at any time in at most alpha of the runs (time-uniform
coverage), a sequential verdict equals the full run's in at least 95% of suites at every true mean (at the
threshold too), errored trials never decide a gate, the paired check decides a drop against the tolerance.
The pytest runs are in tests/session/test_sequential.py.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

import pytest

from pytest_gym.judge.confseq import Capital, confidence_sequence
from pytest_gym.judge.gates import parse_gate
from pytest_gym.judge.sequential import suite_sequence, task_order

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


@pytest.mark.simulation
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


@pytest.mark.simulation
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


@pytest.mark.simulation
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
