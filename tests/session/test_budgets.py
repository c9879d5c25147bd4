"""Budgets: ``--gym-max-tokens``/``--gym-max-cost`` for the run, ``max_tokens``/``max_cost`` for a suite file.

Once a budget is spent nothing new starts, the trials in flight finish (so the run stops within one
concurrency window of the limit), the rest are skipped saying why, every trial that ran is in the run folder,
a suite cut short has undecided (failed) gates, and ``--gym-resume`` runs the rest. The runs attach to the
stand-in Gym of ``tests/helpers/standin.py``, whose ``/run`` answers after a short wait with 200 tokens.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.exporters.api import ExportRun
from pytest_gym.exporters.github import markdown
from pytest_gym.judge.summary import RunSummary, SpendSummary, SuiteSummary
from pytest_gym.report.junit import read_suite_properties
from pytest_gym.rollout.admission import Budget
from pytest_gym.rollout.ledger import Spend
from tests.helpers.standin import Request, StandinGym, serving

pytestmark = pytest.mark.runtime

AGENT = "fake_agent"  # the stand-in Gym's agent

XDIST = [("-p", "no:xdist"), ("-n", "2")]
TOKENS = 200  # per trial: 100 in, 100 out


@pytest.fixture
def gym() -> Iterator[StandinGym]:
    with serving() as server:

        def answer(_: Request) -> tuple[int, bytes]:
            time.sleep(0.05)  # long enough for every slot to be in flight when the budget runs out
            usage = {"input_tokens": 100, "output_tokens": 100, "total_tokens": TOKENS}
            return 200, json.dumps({"reward": 1.0, "response": {"usage": usage}}).encode()

        server.routes["/run"] = answer
        yield server


def dataset(path: Path, rows: int, prefix: str = "q") -> None:
    items = [{"responses_create_params": {"input": [{"role": "user", "content": f"{prefix}{i}"}]}} for i in range(rows)]
    path.write_text("".join(json.dumps(r) + "\n" for r in items))


def run(pytester: pytest.Pytester, gym: StandinGym, run_dir: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--gym-url", gym.url, "--gym-agent", AGENT, "--gym-run-dir", run_dir, "--gym-trajectories", "off",
        "-p", "no:cacheprovider", "-p", "no:randomly", "-rs", *args,
    )  # fmt: skip


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("xdist", XDIST)
def test_a_token_budget_stops_dispatch_within_one_window_and_resume_finishes(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    dataset(pytester.path / "data.jsonl", 40)
    concurrency, limit = 4, 10 * TOKENS
    first = run(
        pytester, gym, "run1", "--gym-dataset", "data.jsonl", "--gym-max-tokens", str(limit),
        "--gym-concurrency", str(concurrency), "--gym-gate", "mean_reward>=0.5", "--junitxml", "run1.xml", *xdist,
    )  # fmt: skip
    outcomes = first.parseoutcomes()
    ran, skipped = outcomes["passed"], outcomes["skipped"]
    assert ran + skipped == 40
    # Spent at 10 trials; the others in flight then (fewer than the concurrency) finish, nothing else starts.
    assert 10 <= ran <= 10 + concurrency - 1, first.stdout.str()
    assert outcomes["failed"] == 1  # the gate: undecided on part of the suite, never passed
    first.stdout.fnmatch_lines(
        [
            "*gate mean_reward>=0.5: FAIL (*undecided: the budget stopped this suite after *",
            f"budget: spent {ran * TOKENS:,} of 2,000 tokens on {ran} trials, {skipped} trials not run",
            "SKIPPED *budget exhausted after * trials (*,* of 2,000 tokens)",
        ]
    )
    # Nothing lost: every trial that ran is in the run folder, once.
    records = lines(pytester.path / "run1" / "rollouts.jsonl")
    assert len(records) == ran
    assert len({(r["_ng_task_index"], r["_ng_rollout_index"]) for r in records}) == ran
    summary = json.loads((pytester.path / "run1" / "pytest_gym_summary.json").read_text())
    assert summary["budget"] == {
        "max_cost": None, "max_tokens": limit, "cost": 0.0, "tokens": ran * TOKENS, "trials": ran, "skipped": skipped
    }  # fmt: skip
    (suite,) = summary["suites"].values()
    assert suite["skipped"] == {"budget": skipped}
    assert suite["gates"]["mean_reward>=0.5"]["undecided"] is True
    assert "budget stopped" in suite["cut_short"]

    junit = read_suite_properties(pytester.path / "run1.xml")
    assert junit["gym.data.jsonl.skipped.budget"] == str(skipped)
    assert junit["gym.data.jsonl.run_budget"] == f"{ran * TOKENS:,} of 2,000 tokens on {ran} trials, {skipped} not run"
    assert junit["gym.data.jsonl.cut_short"].startswith("the budget stopped this suite")
    page = (pytester.path / "run1" / "report.html").read_text()
    assert "Spend and savings" in page
    assert "the budget stopped this suite" in page

    calls = gym.calls["/run"]
    second = run(pytester, gym, "run2", "--gym-dataset", "data.jsonl", "--gym-resume", "run1",
                 "--gym-gate", "mean_reward>=0.5", *xdist)  # fmt: skip
    second.assert_outcomes(passed=41)
    assert gym.calls["/run"] - calls == 40 - ran  # only the trials the budget left
    assert len(lines(pytester.path / "run2" / "rollouts.jsonl")) == 40


@pytest.mark.parametrize("xdist", XDIST)
def test_a_suite_file_budget_stops_its_suite_only(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    pytester.makeini("[pytest]\n")
    dataset(pytester.path / "a.jsonl", 12, "a")
    dataset(pytester.path / "b.jsonl", 12, "b")
    (pytester.path / "cheap.gym.yaml").write_text(
        "dataset: a.jsonl\nmax_cost: 0.001\ngates: ['mean_reward >= 0.5']\n"
    )  # 100 in at $1/M + 100 out at $4/M: $0.0005 a trial, spent after 2
    (pytester.path / "free.gym.yaml").write_text("dataset: b.jsonl\ngates: ['mean_reward >= 0.5']\n")
    result = run(
        pytester, gym, "run", "--gym-price-in", "1", "--gym-price-out", "4", "--gym-concurrency", "2", ".", *xdist
    )
    outcomes = result.parseoutcomes()
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    cheap, free = summary["suites"]["cheap.gym.yaml"], summary["suites"]["free.gym.yaml"]
    # Spent after its second trial; the other one in flight then (concurrency 2) may finish.
    assert 2 <= cheap["trials"] <= 3, result.stdout.str()
    assert cheap["skipped"] == {"budget": 12 - cheap["trials"]}
    assert cheap["budget"]["max_cost"] == 0.001
    assert cheap["budget"]["cost"] == pytest.approx(cheap["trials"] * 0.0005)
    assert cheap["gates"]["mean_reward>=0.5"]["passed"] is False
    assert free["trials"] == 12
    assert "skipped" not in free
    assert free["gates"]["mean_reward>=0.5"]["passed"] is True
    assert outcomes["failed"] == 1
    result.stdout.fnmatch_lines(
        ["SKIPPED *suite budget (suite file cheap.gym.yaml*) exhausted after * ($0.00* of $0.001)"]
    )


def test_a_cost_budget_needs_prices(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    dataset(pytester.path / "data.jsonl", 2)
    result = pytester.runpytest("--gym-url", "http://127.0.0.1:9", "--gym-dataset", "data.jsonl",
                                "--gym-max-cost", "1", "-p", "no:randomly")  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-max-cost needs the prices*--gym-price-in*"])


def test_budget_messages() -> None:
    spend = Spend()
    for _ in range(3):
        spend.add({"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500})
    money = Budget("budget", max_cost=0.01, price_in=2.0, price_out=10.0)
    assert money.exhausted(spend) == "budget exhausted after 3 trials ($0.021 of $0.01)"
    tokens = Budget("budget", max_tokens=4500)
    assert tokens.exhausted(spend) == "budget exhausted after 3 trials (4,500 of 4,500 tokens)"
    assert Budget("budget", max_tokens=4501).exhausted(spend) is None
    both = Budget("suite budget (x)", 0.02, 4500, 2.0, 10.0).exhausted(spend)
    assert both == "suite budget (x) exhausted after 3 trials ($0.021 of $0.02; 4,500 of 4,500 tokens)"
    assert re.fullmatch(r".*\(4,500 of 4,500 tokens\)", str(Budget("b", 0.05, 4500, 2.0, 10.0).exhausted(spend)))


def test_the_github_summary_shows_spend_and_what_did_not_run(tmp_path: Path) -> None:
    suite = SuiteSummary(
        tasks=3,
        trials=3,
        skipped={"budget": 7},
        cut_short="the budget stopped this suite after 3 of its 10 trials (7 not run): ...",
        budget=SpendSummary(max_cost=0.5, cost=0.61, trials=3, skipped=7),
    )
    summary = RunSummary(
        run_dir=str(tmp_path),
        suites={"data.jsonl": suite},
        budget=SpendSummary(max_tokens=1000, tokens=1200, trials=3, skipped=7),
    )
    text = markdown(ExportRun("r1", tmp_path, summary.to_json(), {}, [], 1))
    assert "- run budget: spent 1,200 of 1,000 tokens on 3 trials, 7 trials not run" in text
    assert "- `data.jsonl`: **undecided**: the budget stopped this suite after 3 of its 10 trials" in text
    assert "- `data.jsonl`: suite budget: spent $0.61 of $0.5" in text


@pytest.mark.parametrize("xdist", XDIST)
def test_one_rollout_at_a_time_stops_after_the_trial_that_spent_the_budget(
    pytester: pytest.Pytester, gym: StandinGym, xdist: tuple[str, ...]
) -> None:
    """At --gym-concurrency 1 the window is one trial: the first that finishes spends the budget and no other
    starts, even one that pytest's thread was allowed to start while it waited for the slot (the admission
    asks again once the slot is free)."""
    pytester.makeini("[pytest]\n")
    dataset(pytester.path / "data.jsonl", 6)
    for attempt in range(3):
        result = run(
            pytester, gym, f"run{attempt}", "--gym-dataset", "data.jsonl", "--gym-max-tokens", "1",
            "--gym-concurrency", "1", *xdist,
        )  # fmt: skip
        result.assert_outcomes(passed=1, skipped=5)
        assert len(lines(pytester.path / f"run{attempt}" / "rollouts.jsonl")) == 1
