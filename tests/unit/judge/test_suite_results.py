"""Suite results without pytest: totals (latency percentiles, tokens, cost), what survives the xdist codec,
baselines per suite, marker names and bounded row fields. (Through pytest: tests/session/test_verdicts.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.collect import marker_name
from pytest_gym.core.dataset import FIELD_LIST_MAX, read_tasks, task_hash
from pytest_gym.core.outcome import TrialOutcome, from_properties
from pytest_gym.core.settings import GymSettings
from pytest_gym.judge.baseline import baseline_from, load_baselines, update_baselines
from pytest_gym.judge.known import load_known_failures
from pytest_gym.judge.stats import suite_stats
from pytest_gym.judge.suites import SuiteResults, parse_gates
from pytest_gym.judge.totals import TrialCost, percentile, suite_totals


def row(i: int, **fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": f"question {i}"}, **fields}


def test_suite_totals_by_hand() -> None:
    trials = [
        TrialCost(latency_s=float(s), attempts=a, input_tokens=100, output_tokens=10, total_tokens=110)
        for s, a in zip(range(1, 11), [1, 1, 2, 1, 3, 1, 1, 1, 1, 1], strict=True)
    ]
    trials.append(TrialCost(latency_s=None))  # reused: no latency, no usage
    totals = suite_totals(trials, price_in=2.0, price_out=8.0)
    assert (totals.trials, totals.trials_with_usage) == (11, 10)
    assert (totals.input_tokens, totals.output_tokens, totals.total_tokens) == (1000, 100, 1100)
    # Nearest rank over the ten latencies 1..10 s: p50 the 5th, p90 the 9th, p99 the 10th.
    assert (totals.latency_p50_s, totals.latency_p90_s, totals.latency_p99_s, totals.latency_max_s) == (5, 9, 10, 10)
    assert totals.latency_sum_s == 55
    assert totals.retries == 1 + 2
    assert totals.cost == pytest.approx((1000 * 2.0 + 100 * 8.0) / 1_000_000)


def test_suite_totals_without_usage_or_prices() -> None:
    totals = suite_totals([TrialCost(latency_s=0.5)])
    assert (totals.input_tokens, totals.total_tokens, totals.cost) == (None, None, None)
    assert totals.latency_p99_s == 0.5
    assert suite_totals([TrialCost(latency_s=0.5)], price_in=1.0).cost is None  # a price, but nothing to price
    only_in = suite_totals([TrialCost(latency_s=None, input_tokens=10**6, output_tokens=10**6)], price_in=3.0)
    assert only_in.cost == 3.0  # the price not given counts 0
    assert only_in.total_tokens == 2 * 10**6  # summed when the trials did not report a total
    empty = suite_totals([])
    assert (empty.latency_p50_s, empty.retries) == (None, 0)
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def _outcome(suite: str, h: str, repeat: int, reward: float | None, **fields: Any) -> TrialOutcome:
    return TrialOutcome(
        nodeid=f"{suite}::{h[:12]}[r{repeat}]",
        task_hash=h,
        repeat=repeat,
        line=1,
        dataset=suite,
        reward=reward,
        **fields,
    )


def test_results_keep_what_totals_need_through_the_xdist_codec() -> None:
    """The owner learns latency, attempts and tokens from the reports' properties (as under xdist)."""
    h = task_hash(row(0))
    sent = [
        _outcome("s.jsonl", h, 0, 1.0, latency_s=0.25, attempts=2, tokens={"input_tokens": 7, "output_tokens": 3}),
        _outcome("s.jsonl", h, 1, 0.0, latency_s=0.75, tokens={"input_tokens": 5, "output_tokens": 1}),
        _outcome("s.jsonl", h, 2, None, latency_s=1.5, attempts=3, error="boom", error_class="http_status"),
    ]
    results = SuiteResults(GymSettings(price_in=1.0, price_out=2.0), [])
    for outcome in sent:
        received = from_properties(outcome.nodeid, outcome.to_properties())
        assert received is not None
        results.add(received)
    (verdict,) = results.judge(Path("."))
    totals = verdict.totals
    assert totals is not None
    assert (totals.trials, totals.input_tokens, totals.output_tokens, totals.total_tokens) == (3, 12, 4, 16)
    assert (totals.latency_p50_s, totals.latency_max_s, totals.retries) == (0.75, 1.5, 3)
    assert totals.cost == pytest.approx((12 * 1.0 + 4 * 2.0) / 1e6)
    metrics = verdict.metrics()
    assert metrics["totals"]["retries"] == 3
    assert metrics["flaky_tasks"] == [{"hash": h[:12], "line": 1, "successes": 1, "repeats": 2}]
    assert metrics["flaky_rate"] == 1.0


def test_unjudged_spend_counts_what_no_suite_counts_at_each_suite_s_prices() -> None:
    """Recorded usage of trials that never ran, or errored without their rollout, is counted once, each suite at
    its own prices; a judged trial's usage and a reused trial's are not counted again."""
    h = task_hash(row(0))
    usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
    results = SuiteResults(
        GymSettings(price_in=1.0, price_out=1.0),
        [],
        settings_for=lambda suite: (GymSettings(price_in=3.0 if suite == "b.jsonl" else 1.0, price_out=1.0), []),
    )
    results.add(_outcome("a.jsonl", h, 0, 1.0, tokens=usage))  # judged with its usage
    results.add(_outcome("a.jsonl", h, 1, None, error="not run", error_class="setup"))  # errored, no usage
    results.add(_outcome("a.jsonl", h, 2, None, error="gone", error_class="http_status", reused=True))
    recorded = {("a.jsonl", h, r): usage for r in range(4)} | {("b.jsonl", h, 0): usage}
    unjudged = results.unjudged_spend(recorded)
    assert unjudged is not None
    # a r1 (errored without it), a r3 (never ran), b r0 (never ran): a r0 is judged, a r2 reused.
    assert (unjudged.rollouts, unjudged.tokens) == (3, 36)
    assert unjudged.cost == pytest.approx((2 * (10 * 1.0 + 2 * 1.0) + (10 * 3.0 + 2 * 1.0)) / 1e6)
    assert unjudged.line().startswith("not judged: 3 rollouts finished for trials that did not run or count")
    assert results.unjudged_spend({("a.jsonl", h, 0): usage}) is None


def _judge(tmp_path: Path, suites: dict[str, dict[int, list[float]]], **settings: Any) -> list[Any]:
    results = SuiteResults(GymSettings(**settings), parse_gates(settings.get("gate", ()), "test"))
    for suite, tasks in suites.items():
        for i, rewards in tasks.items():
            h = task_hash(row(i))
            for repeat, reward in enumerate(rewards):
                results.add(_outcome(suite, h, repeat, reward))
    return results.judge(tmp_path)


def test_two_suites_keep_two_baselines(tmp_path: Path) -> None:
    """Was: the last suite overwrote the file, and on the next run the other showed 0 shared tasks."""
    base = str(tmp_path / "b.json")
    suites = {"a.jsonl": {0: [1.0], 1: [1.0]}, "b.jsonl": {10: [1.0], 11: [0.0], 12: [1.0]}}
    _judge(tmp_path, suites, baseline=base, update_baseline=True)
    assert set(json.loads(Path(base).read_text())["suites"]) == {"a.jsonl", "b.jsonl"}
    a, b = _judge(tmp_path, suites, baseline=base)
    assert (a.comparison.paired.n_shared, b.comparison.paired.n_shared) == (2, 3)
    assert a.metrics()["baseline"]["file"] == base

    # Updating one suite leaves the other's baseline as it was.
    _judge(tmp_path, {"a.jsonl": {0: [0.0], 1: [1.0]}}, baseline=base, update_baseline=True)
    stored = load_baselines(base)
    assert stored is not None
    assert stored.suites["a.jsonl"].suite.mean_reward == 0.5
    assert stored.suites["b.jsonl"].suite.tasks == 3

    (c,) = _judge(tmp_path, {"c.jsonl": {20: [1.0]}}, baseline=base, gate=("new_failures<=0",))
    assert c.comparison is None
    assert c.baseline_note == f"no baseline for suite c.jsonl in {base}: create it with --gym-update-baseline"
    assert c.gates[0].reason == f"new_failures<=0: {c.baseline_note}"


def test_version_1_baseline_file_serves_the_suite_sharing_its_tasks(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    old = baseline_from(suite_stats({task_hash(row(i)): [1.0] for i in range(3)}, 1.0), {}, {})
    path.write_text(json.dumps({"schema_version": 1, **old.model_dump(mode="json")}))
    a, b = _judge(tmp_path, {"a.jsonl": {0: [1.0], 1: [0.0], 2: [1.0]}, "b.jsonl": {9: [1.0]}}, baseline=str(path))
    assert a.comparison is not None
    assert a.comparison.new_failures == [task_hash(row(1))]
    assert b.comparison is None
    assert b.baseline_note == f"no baseline for suite b.jsonl in {path}: create it with --gym-update-baseline"


def test_update_keeps_suites_written_by_another_run(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    one = baseline_from(suite_stats({task_hash(row(0)): [1.0]}, 1.0), {}, {})
    update_baselines(path, {"x.jsonl": one})
    update_baselines(path, {"y.jsonl": one})
    stored = load_baselines(path)
    assert stored is not None
    assert sorted(stored.suites) == ["x.jsonl", "y.jsonl"]
    path.write_text("{broken")
    assert update_baselines(path, {"z.jsonl": one}) == [
        "replaced an unusable baseline file: is not valid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)); delete it or record a new baseline"
    ]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("difficulty", "hard", "hard"),
        ("difficulty", "multi step", "multi_step"),
        ("difficulty", "3", "difficulty_3"),
        ("category", "and", "category_and"),
        ("category", "ünïcode-x", "category__n_code_x"),
        ("9lives", "_x", "m_9lives__x"),
        ("tags", "C++", "C__"),
    ],
)
def test_marker_names_are_identifiers(field: str, value: str, expected: str) -> None:
    assert marker_name(field, value) == expected
    assert expected.isidentifier()


def test_row_fields_are_bounded(tmp_path: Path) -> None:
    rows = [
        row(0, id="a" * 100, name="b" * 101, tags=[f"t{i}" for i in range(40)], category=True, difficulty=2.5),
        row(1, task_id=7, uuid=None, tags=["x", {"nested": 1}, ["y"], 3], name="a\x1fb"),
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second = read_tasks(path, None, ("id", "name", "tags", "category", "difficulty", "task_id", "uuid"))
    assert first.fields == (("id", "a" * 100), *(("tags", f"t{i}") for i in range(FIELD_LIST_MAX)))
    assert second.fields == (("tags", "x"), ("tags", "3"), ("task_id", "7"))  # a separator in a value: skipped
    assert len(first.packed_fields) < 300  # one string per task
    assert read_tasks(path)[0].fields == ()  # nothing kept unless asked


def test_an_errored_trial_of_a_quarantined_task_leaves_the_gates_alone(tmp_path: Path) -> None:
    """Gates are judged without quarantined tasks (known failures): so are the errored trials they are
    decided over. A listed task that errored and failed must not make a gate on the others undecided."""
    listed, other = task_hash(row(0)), task_hash(row(1))
    known = tmp_path / "known.yaml"
    known.write_text(f"- task: {listed[:12]}\n  reason: broken upstream\n")
    results = SuiteResults(GymSettings(), parse_gates(["mean_reward>=0.9"], "test"))
    results.known = load_known_failures(known)
    for outcome in (
        _outcome("s.jsonl", listed, 0, None, error="boom", error_class="http_status"),
        _outcome("s.jsonl", listed, 1, 0.0),
        _outcome("s.jsonl", other, 0, 1.0),
        _outcome("s.jsonl", other, 1, 1.0),
    ):
        results.add(outcome)
    (verdict,) = results.judge(tmp_path)
    assert verdict.imputed is None  # the only errored trial is the quarantined task's
    (gate,) = verdict.gates
    assert gate.passed, gate.reason
    assert gate.reason.endswith("(judged without the 1 quarantined task: known failures)")
    # An errored trial of a task that is not listed is still decided over (the listed task left out).
    results.add(_outcome("s.jsonl", other, 2, None, error="boom", error_class="http_status"))
    (verdict,) = results.judge(tmp_path)
    assert verdict.imputed is not None
    assert verdict.imputed.errored == [other]
    assert verdict.imputed.as_failed.tasks == 1
