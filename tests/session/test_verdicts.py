"""Suite verdicts without Gym: flaky tasks, totals, undecided gates, per-suite baselines, -k/-m by row fields.

The pytester runs reuse (``--gym-resume``) trials of a run folder written here, so every trial has the
reward the test chose and no Gym starts; what runs is the plugin's own path from reports to verdicts,
on the only process and on the xdist controller alike.
"""

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
from pytest_gym.judge.stats import suite_stats
from pytest_gym.judge.suites import SuiteResults, parse_gates
from pytest_gym.judge.totals import TrialCost, percentile, suite_totals
from pytest_gym.report.junit import read_suite_properties
from pytest_gym.runfolder.runinfo import write_run_info

XDIST = [(), ("-n", "2")]
AGENT = "a"


def row(i: int, **fields: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": f"question {i}"}, **fields}


# --- totals -------------------------------------------------------------------------------------


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


# --- baselines per suite -------------------------------------------------------------------------


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


# --- the same through pytest, reusing trials of a written run folder -------------------------------


def earlier_run(pytester: pytest.Pytester, datasets: dict[str, list[tuple[dict[str, Any], list[float]]]]) -> str:
    """Write the datasets and a run folder holding a reward for every trial; returns the folder (for --gym-resume)."""
    run = pytester.path / "earlier"
    write_run_info(run, GymSettings(agent=AGENT))
    records = []
    for name, tasks in datasets.items():
        (pytester.path / name).write_text("".join(json.dumps(r) + "\n" for r, _ in tasks))
        for index, (r, rewards) in enumerate(tasks):
            for repeat, reward in enumerate(rewards):
                records.append(
                    {
                        "reward": reward,
                        "_ng_task_index": index,
                        "_ng_rollout_index": repeat,
                        "_pytest_gym_task_hash": task_hash(r),
                        "_pytest_gym_attempts": 1 + repeat % 2,
                    }
                )
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pytester.makeini("[pytest]\n")
    return str(run)


def reuse(run: str, *datasets: str, repeats: int = 2) -> list[str]:
    args = ["--gym-agent", AGENT, "--gym-resume", run, "--gym-repeats", str(repeats)]
    for dataset in datasets:
        args += ["--gym-dataset", dataset]
    return args


def summary_of(pytester: pytest.Pytester) -> dict[str, Any]:
    """The summary of the latest run (by modification time: two runs in one second sort by their random suffix)."""
    runs = sorted((pytester.path / ".pytest_gym" / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    data: dict[str, Any] = json.loads((runs[-1] / "pytest_gym_summary.json").read_text())
    return data


FLAKY_TASKS = [(row(0), [1.0, 1.0]), (row(1), [1.0, 0.0]), (row(2), [0.0, 0.0]), (row(3), [0.0, 1.0])]


@pytest.mark.parametrize("xdist", XDIST)
def test_flaky_tasks_totals_and_undecided_gates_in_terminal_summary_and_junit(
    pytester: pytest.Pytester, xdist: tuple[str, ...]
) -> None:
    run = earlier_run(pytester, {"d.jsonl": FLAKY_TASKS})
    gates = ["--gym-gate", "ci_low(mean_reward)>=0.3", "--gym-gate", "flaky_rate<=0.5"]
    result = pytester.runpytest(*reuse(run, "d.jsonl"), *gates, "--junitxml", "r.xml", *xdist)
    result.assert_outcomes(passed=5, failed=5)  # 4 low-reward trials and the undecided gate
    h1, h3 = (task_hash(row(i))[:12] for i in (1, 3))
    result.stdout.fnmatch_lines(
        [
            "d.jsonl: 4 tasks, 8 trials, 0 errors, mean reward 0.500 (95% CI 0.068..0.932), pass@1 0.500, pass@2 0.750",
            "  totals: retries 4",
            f"  flaky (2 of 4 tasks, passed/trials): {h1} (line 2) 1/2, {h3} (line 4) 1/2",
            "  gate ci_low(mean_reward)>=0.3: FAIL (ci_low(mean_reward) = 0.067586, required >= 0.3; "
            "undecided: needs about 23 more tasks (mean reward 0.5 is above 0.3, but 4 tasks are too few to show it))",
            "  gate flaky_rate<=0.5: PASS (flaky_rate = 0.5 <= 0.5)",
        ]
    )
    suite = summary_of(pytester)["suites"]["d.jsonl"]
    assert suite["flaky_tasks"] == [
        {"hash": h1, "line": 2, "successes": 1, "repeats": 2},
        {"hash": h3, "line": 4, "successes": 1, "repeats": 2},
    ]
    assert suite["flaky_rate"] == 0.5
    assert suite["totals"]["retries"] == 4
    assert suite["totals"]["trials"] == 8
    gate = suite["gates"]["ci_low(mean_reward)>=0.3"]
    assert (gate["passed"], gate["undecided"], gate["tasks_needed"]) == (False, True, 23)
    assert 0.0 <= suite["ci_low"] < suite["ci_high"] <= 1.0
    props = read_suite_properties(pytester.path / "r.xml")
    assert props["gym.d.jsonl.flaky"] == "2"
    assert props["gym.d.jsonl.flaky_tasks"] == f"{h1} (line 2) 1/2, {h3} (line 4) 1/2"
    assert props["gym.d.jsonl.totals.retries"] == "4"
    assert props["gym.d.jsonl.totals.total_tokens"] == "None"
    assert "undecided: needs about 23 more tasks" in props["gym.d.jsonl.gate[ci_low(mean_reward)>=0.3]"]


@pytest.mark.parametrize("xdist", XDIST)
def test_two_suites_one_baseline_file(pytester: pytest.Pytester, xdist: tuple[str, ...]) -> None:
    run = earlier_run(
        pytester,
        {
            "a.jsonl": [(row(i), [1.0, 1.0]) for i in range(3)],
            "b.jsonl": [(row(10 + i), [1.0, 1.0] if i else [0.0, 0.0]) for i in range(4)],
            "c.jsonl": [(row(20), [1.0, 1.0])],
        },
    )
    args = [*reuse(run, "a.jsonl", "b.jsonl"), "--gym-baseline", "base.json", "--gym-verdict", "gate", *xdist]
    missing = pytester.runpytest(*args)
    missing.stdout.fnmatch_lines(["  no baseline at */base.json: create it with --gym-update-baseline"] * 2)
    pytester.runpytest(*args, "--gym-update-baseline").stdout.fnmatch_lines(
        ["  baseline of a.jsonl written to */base.json", "  baseline of b.jsonl written to */base.json"]
    )
    assert sorted(json.loads((pytester.path / "base.json").read_text())["suites"]) == ["a.jsonl", "b.jsonl"]
    again = pytester.runpytest(*args, "--gym-gate", "new_failures<=0")
    again.assert_outcomes(passed=12 + 2 + 2, xfailed=2, failed=0)  # trials, gates, baseline checks
    again.stdout.fnmatch_lines(
        [
            "a.jsonl: 3 tasks*",
            "  baseline: delta 0.000 over 3 shared tasks*",
            "b.jsonl: 4 tasks*",
            "  baseline: delta 0.000 over 4 shared tasks*",
        ]
    )
    # A third suite is missing from the file, and says so.
    third = pytester.runpytest(*args, "--gym-dataset", "c.jsonl")
    third.stdout.fnmatch_lines(
        ["c.jsonl: 1 tasks*", "  no baseline for suite c.jsonl in */base.json: create it with --gym-update-baseline"]
    )


def test_new_failures_gate_names_the_tasks(pytester: pytest.Pytester) -> None:
    tasks = [(row(i), [1.0]) for i in range(3)]
    run = earlier_run(pytester, {"d.jsonl": tasks})
    args = [*reuse(run, "d.jsonl", repeats=1), "--gym-baseline", "base.json", "--gym-verdict", "gate"]
    pytester.runpytest(*args, "--gym-update-baseline")
    later = earlier_run(pytester, {"d.jsonl": [(row(0), [1.0]), (row(1), [0.0]), (row(2), [0.0])]})
    result = pytester.runpytest(*reuse(later, "d.jsonl", repeats=1), *args[8:], "--gym-gate", "new_failures<=0")
    h1, h2 = (task_hash(row(i))[:12] for i in (1, 2))
    result.stdout.fnmatch_lines(
        [
            f"  gate new_failures<=0: FAIL (new_failures = 2, required <= 0: {h1} (line 2), {h2} (line 3))",
            "  baseline: delta -0.667 over 3 shared tasks (95% CI *, p(drop) 0.25, McNemar exact*",
            f"  new failures (2): {h1} (line 2), {h2} (line 3)",
        ]
    )
    result.assert_outcomes(passed=2, xfailed=2, failed=1)  # two flips are not a significant drop
    baseline = summary_of(pytester)["suites"]["d.jsonl"]["baseline"]
    assert baseline["new_failure_tasks"] == [{"hash": h1, "line": 2}, {"hash": h2, "line": 3}]
    assert (baseline["p_drop"], baseline["regressed"]) == (0.25, False)
    assert baseline["method"].startswith("McNemar exact")


def test_task_pass_rule_and_prices_are_options(pytester: pytest.Pytester) -> None:
    run = earlier_run(pytester, {"d.jsonl": [(row(0), [1.0, 1.0, 1.0])]})
    args = ["--gym-baseline", "base.json", "--gym-verdict", "gate", "--gym-gate", "new_failures<=0"]
    pytester.runpytest(*reuse(run, "d.jsonl", repeats=3), *args, "--gym-update-baseline")
    later = reuse(earlier_run(pytester, {"d.jsonl": [(row(0), [1.0, 0.0, 1.0])]}), "d.jsonl", repeats=3)
    pytester.runpytest(*later, *args).stdout.fnmatch_lines(["  gate new_failures<=0: FAIL (new_failures = 1, *"])
    majority = pytester.runpytest(*later, *args, "--gym-task-pass", "majority", "--gym-price-out", "3")
    majority.stdout.fnmatch_lines(
        ["  gate new_failures<=0: PASS (new_failures = 0 <= 0)", "  settings differ from the baseline's: task_pass"]
    )
    bad = pytester.runpytest(*later, "--gym-task-pass", "most")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    negative = pytester.runpytest(*later, "--gym-price-in", "-1")
    assert negative.ret == pytest.ExitCode.USAGE_ERROR
    negative.stderr.fnmatch_lines(["*invalid value*price_in*command line (--gym-price-in)*"])


# --- row fields as keywords and markers --------------------------------------------------------------

LABELLED = [
    row(0, id="alpha-1", category="algebra", difficulty="hard", tags=["proof", "long"]),
    row(1, id="beta-2", category="geometry", difficulty="easy", tags=["figure"]),
    row(2, task_id=17, category="algebra", difficulty="multi step", notes="x" * 500),
    row(3, uuid="3f1c", category="geometry", difficulty=3),
]


@pytest.fixture
def labelled(pytester: pytest.Pytester) -> list[str]:
    """labelled.jsonl, every trial (one per row) reusable from a written run: the reuse arguments."""
    return reuse(earlier_run(pytester, {"labelled.jsonl": [(r, [1.0]) for r in LABELLED]}), "labelled.jsonl", repeats=1)


def ids(*indexes: int) -> list[str]:
    return sorted(f"labelled.jsonl::{task_hash(LABELLED[i])[:12]}[r0]" for i in indexes)


def selected(pytester: pytest.Pytester, args: list[str], *select: str) -> list[str]:
    """Node ids of the trials that ran (and passed: every reused reward is 1)."""
    result = pytester.runpytest(*args, "-rA", *select)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stdout.str()
    return sorted(line.split()[1] for line in result.outlines if line.startswith("PASSED labelled.jsonl::"))


@pytest.mark.parametrize("xdist", XDIST)
def test_k_selects_by_row_fields(pytester: pytest.Pytester, labelled: list[str], xdist: tuple[str, ...]) -> None:
    args = [*labelled, *xdist]
    assert selected(pytester, args, "-k", "algebra") == ids(0, 2)
    assert selected(pytester, args, "-k", "geometry and not easy") == ids(3)
    assert selected(pytester, args, "-k", "category:geometry") == ids(1, 3)
    assert selected(pytester, args, "-k", "proof or figure") == ids(0, 1)  # tags, a list of strings
    if xdist:
        return
    assert selected(pytester, args, "-k", "beta") == ids(1)
    assert selected(pytester, args, "-k", "task_id:17") == ids(2)
    assert selected(pytester, args, "-k", "3f1c") == ids(3)
    assert selected(pytester, args, "-k", "xxxxx") == []  # a long field is text, not a label
    # Named fields replace the defaults, from the command line or the ini file.
    assert selected(pytester, args, "-k", "algebra", "--gym-keyword-field", "id") == []
    assert selected(pytester, args, "-k", "beta", "--gym-keyword-field", "id") == ids(1)
    pytester.makeini("[pytest]\ngym_keyword_field =\n    difficulty\n")
    assert selected(pytester, args, "-k", "hard") == ids(0)
    assert selected(pytester, args, "-k", "algebra") == []


@pytest.mark.parametrize("xdist", XDIST)
def test_m_selects_by_the_marker_field(pytester: pytest.Pytester, labelled: list[str], xdist: tuple[str, ...]) -> None:
    # -W error::PytestUnknownMarkWarning, not -W error: an in-process run may warn that pytest_gym is
    # already imported (not rewritten), which says nothing about markers.
    args = [
        *labelled,
        "--gym-marker-field",
        "difficulty",
        "--strict-markers",
        "-W",
        "error::pytest.PytestUnknownMarkWarning",
        *xdist,
    ]
    assert selected(pytester, args, "-m", "hard or multi_step or difficulty_3") == ids(0, 2, 3)
    assert selected(pytester, args, "-m", "not easy") == ids(0, 2, 3)
    if xdist:
        return
    tags = [*labelled, "--gym-marker-field", "tags"]
    assert selected(pytester, tags, "-m", "long") == ids(0)


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
