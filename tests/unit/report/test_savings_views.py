"""What a budget, adaptive repeats and a sequential run saved, as the views read it from the summary: the MLflow
metrics, the JUnit properties and the report's confidence-sequence plot (the pytest runs of
tests/session/test_budgets.py and tests/session/test_sequential.py check the same views end to end)."""

from __future__ import annotations

import re

from pytest_gym.exporters.mlflow import metrics_of
from pytest_gym.judge.summary import RunSummary, SequentialCheck, SequentialSummary, SpendSummary, SuiteSummary
from pytest_gym.report.charts import confidence_sequence_chart
from pytest_gym.report.junit import flat_properties, summary_properties

SUITE = "data.jsonl"


def _sequential() -> SequentialSummary:
    history = [(t, max(0.0, 0.95 - 2.0 / t), min(1.0, 0.95 + 2.0 / t)) for t in range(10, 110, 10)]
    check = SequentialCheck(threshold=0.8, decision="holds", decided_at=60, low=0.93, high=0.97, history=history)
    return SequentialSummary(
        seed=7,
        tasks=1000,
        decided_at=60,
        message="decided after 60 of 1000 tasks: mean_reward>=0.8 holds for the whole suite at 95%",
        checks={"mean_reward>=0.8": check},
        stopped_early=True,
    )


def _suite() -> SuiteSummary:
    return SuiteSummary(
        tasks=60,
        trials=60,
        mean_reward=0.95,
        skipped={"sequential": 940, "decided": 5, "budget": 3},
        efficiency={"mean_output_tokens": 120.0, "p90_latency_s": 1.5, "mean_turns": None},
        budget=SpendSummary(max_tokens=20000, tokens=12000, trials=60, skipped=3),
        sequential=_sequential(),
    )


def test_mlflow_logs_what_was_saved_spent_and_when_it_was_decided() -> None:
    metrics = metrics_of({SUITE: _suite()})
    assert metrics[f"{SUITE}/skipped/sequential"] == 940
    assert metrics[f"{SUITE}/skipped/budget"] == 3
    assert metrics[f"{SUITE}/trials_saved"] == 945  # decided + sequential; the budget's are not savings
    assert metrics[f"{SUITE}/budget/tokens"] == 12000
    assert metrics[f"{SUITE}/sequential/decided_at"] == 60
    assert metrics[f"{SUITE}/sequential/tasks"] == 1000
    assert metrics[f"{SUITE}/efficiency/mean_output_tokens"] == 120.0
    assert f"{SUITE}/efficiency/mean_turns" not in metrics  # not measured: not logged
    plain = metrics_of({SUITE: SuiteSummary(tasks=3, trials=3, mean_reward=1.0)})
    assert not [key for key in plain if re.search(r"/(skipped|budget|sequential|trials_saved)", key)]


def test_junit_properties_carry_spend_savings_and_the_run_budget() -> None:
    props = flat_properties(_suite())
    assert props["skipped.sequential"] == "940"
    assert props["trials_saved"] == "945"
    assert props["budget"] == "12,000 of 20,000 tokens"
    assert props["sequential.decided_at"] == "60"
    assert props["sequential"].startswith("decided after 60 of 1000 tasks")
    assert props["efficiency.p90_latency_s"] == "1.5"
    assert "efficiency.mean_turns" not in props
    run = RunSummary(suites={SUITE: _suite()}, budget=SpendSummary(max_cost=1.0, cost=0.25, trials=60, skipped=3))
    assert summary_properties(run)[SUITE]["run_budget"] == "$0.25 of $1 on 60 trials, 3 not run"
    assert "run_budget" not in summary_properties(RunSummary(suites={SUITE: _suite()}))[SUITE]
    assert summary_properties(None) == {}


def test_the_report_plots_each_confidence_sequence_its_threshold_and_decision() -> None:
    svg = confidence_sequence_chart(_sequential().model_dump(mode="json"))
    assert 'data-chart="sequence"' in svg
    (band,) = re.findall(r'<polygon points="([^"]+)"', svg)
    points = band.split()
    assert len(points) == 2 * 10  # the upper edge out, the lower edge back, one point per history entry
    assert "mean_reward&gt;=0.8: threshold 0.8" in svg
    assert "mean_reward&gt;=0.8: holds" in svg  # the decision marker
    assert confidence_sequence_chart(None) == ""
    assert confidence_sequence_chart({"checks": {"x": {"history": []}}}) == ""
