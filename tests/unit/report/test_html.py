"""The HTML report: the data it is built from, the page it writes, its size for big runs, and the page in a real
browser (a synthetic run; a real-Gym run with failures, flaky tasks, errors and a baseline is in
tests/gym/test_html_report.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.judge.stats import suite_stats
from pytest_gym.report.html import build_report, embed_json, prompt_text, render, report_data
from pytest_gym.runfolder.layout import FAILURES_FILE, ROLLOUTS_FILE, SUMMARY_FILE
from pytest_gym.runfolder.rollouts import RunFolderWriter, write_aggregate_metrics
from pytest_gym.runfolder.summary import write_summary
from tests.helpers.browser import click, console_errors, page_data, rows_shown
from tests.helpers.paths import ROOT
from tests.helpers.report_runs import Spec, make_run

SUITE = "data/qa.jsonl"


def row(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"What is {i} + {i}?"}]},
        "expected_answer": str(2 * i),
        **extra,
    }


def outcome(
    r: dict[str, Any],
    index: int,
    repeat: int,
    reward: float | None,
    *,
    answer_text: str = "the answer",
    latency: float = 0.5,
    attempts: int = 1,
    error: str = "HTTP 500 from http://127.0.0.1:1/run: boom",
    **answer_extra: Any,
) -> TrialOutcome:
    digest = task_hash(r)
    request = {**r, "agent_ref": {"name": "agent"}, "_ng_task_index": index, "_ng_rollout_index": repeat}
    base: dict[str, Any] = {
        "nodeid": f"{SUITE}::{digest[:12]}[r{repeat}]",
        "task_hash": digest,
        "repeat": repeat,
        "line": index + 1,
        "dataset": SUITE,
        "request": request,
        "agent": "agent",
        "latency_s": latency,
        "attempts": attempts,
    }
    if reward is None:
        return TrialOutcome(**base, error=error, error_class="http_status", http_status=500)
    answer = {
        "responses_create_params": r["responses_create_params"],
        "response": {
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer_text}]}
            ],
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        },
        "reward": reward,
        "expected_answer": r["expected_answer"],
        "extracted_answer": answer_text[-1:],
        **answer_extra,
    }
    return TrialOutcome(**base, reward=reward, answer=answer)


def write_run(run_dir: Path, trials: list[TrialOutcome], suite_entry: dict[str, Any] | None = None) -> Path:
    with RunFolderWriter(run_dir) as writer:
        for trial in trials:
            writer.record(trial)
    if suite_entry is not None:
        write_summary(run_dir, {SUITE: suite_entry}, notes=["hello"])
    return run_dir


def by_hash(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["hash"]: t for t in data["tasks"]}


# -- the data ----------------------------------------------------------------------------------------------


def test_tasks_and_trials_are_read_from_the_rollouts(tmp_path: Path) -> None:
    r0, r1, r2 = row(0), row(1), row(2)
    trials = [
        outcome(r0, 0, 0, 1.0, answer_text="so 0", latency=0.25),
        outcome(r0, 0, 1, 1.0, answer_text="so 0", latency=0.75, attempts=3),
        outcome(r1, 1, 0, 1.0, answer_text="so 2"),
        outcome(r1, 1, 1, 0.0, answer_text="so 3"),
        outcome(r2, 2, 0, None),
        outcome(r2, 2, 1, 0.0, answer_text="so 5"),
    ]
    data = report_data(write_run(tmp_path, trials))
    tasks = by_hash(data)
    t0, t1, t2 = (tasks[task_hash(r)[:12]] for r in (r0, r1, r2))
    assert [t["id"] for t in data["tasks"]] == [f"{SUITE}::{task_hash(r)[:12]}" for r in (r0, r1, r2)]
    assert (t0["n"], t0["successes"], t0["errors"], t0["mean"], t0["passed"], t0["flaky"]) == (
        2,
        2,
        0,
        1.0,
        True,
        False,
    )
    assert (t1["n"], t1["successes"], t1["mean"], t1["passed"], t1["flaky"]) == (2, 1, 0.5, False, True)
    assert (t2["n"], t2["errors"], t2["mean"], t2["flaky"]) == (1, 1, 0.0, False)
    assert t0["prompt"] == "What is 0 + 0?"
    assert t0["fields"] == {"expected_answer": "0"}  # the dataset's own fields, from the row as sent
    assert t0["latency"] == 0.5
    assert t0["tokens"] == 30
    first, second = t0["trials"]
    assert first == {
        "r": 0,
        "latency": 0.25,
        "reward": 1.0,
        "tokens": [10, 5, 15],
        "answer": "so 0",
        "fields": {"extracted_answer": "0"},  # the answer's own fields; the row's are the task's
    }
    assert second["attempts"] == 3
    errored = t2["trials"][0]
    assert errored["error"] == "HTTP 500 from http://127.0.0.1:1/run: boom"
    assert errored["error_class"] == "http_status"
    assert errored["http_status"] == 500
    assert "reward" not in errored
    assert "nodeid" not in errored  # the page builds <suite>::<hash12>[rN] itself


def test_the_rollouts_the_run_holds_give_the_page_the_file_gives_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gym.report import html

    r0, r1 = row(0), row(1)
    trials = [
        outcome(r0, 0, 0, 1.0, answer_text="so 0"),
        outcome(r1, 1, 0, 0.0, answer_text="so 3"),
        outcome(r1, 1, 1, None),
    ]
    run_dir = write_run(tmp_path, trials)
    held = [json.loads(line) for line in (run_dir / ROLLOUTS_FILE).read_text().splitlines()]
    from_file = report_data(run_dir)
    read: list[str] = []
    real_read = html.read_records
    monkeypatch.setattr(html, "read_records", lambda path: read.append(path.name) or real_read(path))
    assert report_data(run_dir, rollouts=held) == from_file
    assert ROLLOUTS_FILE not in read
    assert FAILURES_FILE in read  # the errors are not among the rollouts


def two_suites_sharing_indices(run_dir: Path, prose: str = "") -> dict[tuple[str, int], str]:
    """Two datasets of two rows each, their trials recorded as the dispatcher sends them (``_ng_rollout_id`` per
    trial); the page's prompt of each (suite, task index)."""
    trials = []
    for suite, word in (("data/a.jsonl", "apples"), ("data/b.jsonl", "bananas")):
        for index in range(2):
            r = {"responses_create_params": {"input": [{"role": "user", "content": f"{word} {index}{prose}"}]}}
            digest = task_hash(r)
            for repeat in range(2):
                request = {**r, "agent_ref": {"name": "agent"}, "_ng_task_index": index, "_ng_rollout_index": repeat,
                           "_ng_rollout_id": f"{digest[:12]}-r{repeat}-{suite[-7]}"}  # fmt: skip
                answer = {"response": {"output": []}, "reward": 1.0}
                trials.append(TrialOutcome(
                    nodeid=f"{suite}::{digest[:12]}[r{repeat}]", task_hash=digest, repeat=repeat, line=index + 1,
                    dataset=suite, request=request, agent="agent", latency_s=0.1, reward=1.0, answer=answer,
                ))  # fmt: skip
    data = report_data(write_run(run_dir, trials))
    return {(t["suite"], t["index"]): t["prompt"] for t in data["tasks"]}


OWN_PROMPTS = {
    ("data/a.jsonl", 0): "apples 0",
    ("data/a.jsonl", 1): "apples 1",
    ("data/b.jsonl", 0): "bananas 0",
    ("data/b.jsonl", 1): "bananas 1",
}


def test_each_suite_shows_its_own_rows_when_suites_share_task_indices(tmp_path: Path) -> None:
    """A task's row is found by its content, not by its index, which the first row of every dataset shares."""
    assert two_suites_sharing_indices(tmp_path) == OWN_PROMPTS


def test_rows_masked_when_written_still_show_under_their_own_suite(tmp_path: Path) -> None:
    """A row whose prose looks like a credential is masked in the run folder, so it no longer hashes to its task;
    it is still found for its own task (by the trial's rollout id), not for another suite's task at its index."""
    prompts = two_suites_sharing_indices(tmp_path, " password: hunter2")
    assert not any("hunter2" in prompt for prompt in prompts.values())
    assert {key: prompt.split(" password")[0] for key, prompt in prompts.items()} == OWN_PROMPTS


def test_suite_numbers_come_from_the_summary_and_unknown_keys_are_shown_as_they_are(tmp_path: Path) -> None:
    entry = {
        "tasks": 3,
        "trials": 5,
        "errors": 1,
        "error_rate": 1 / 6,
        "mean_reward": 0.6,
        "ci_low": 0.1,
        "ci_high": 1.0,
        "min_reward": 1.0,
        "pass_at": {"1": 0.6},
        "pass_hat": {"1": 0.6},
        "gates": {"mean_reward>=0.7": {"value": 0.6, "passed": False, "reason": "mean_reward = 0.6, required >= 0.7"}},
        "totals": {"trials": 5, "latency_p50_s": 0.25, "latency_max_s": 3.5, "latency_sum_s": 5.0, "retries": 2},
        "custom": {"calls": {"input": 50}},
        "something_new": [1, 2],
    }
    r0, r1 = row(0), row(1)
    trials = [outcome(r0, 0, 0, 1.0), outcome(r0, 0, 1, 1.0), outcome(r1, 1, 0, 0.0), outcome(r1, 1, 1, 1.0)]
    data = report_data(write_run(tmp_path, trials, entry))
    (suite,) = data["suites"]
    assert suite["name"] == SUITE
    assert suite["numbers"]["source"] == "summary"
    assert suite["numbers"]["mean_reward"] == 0.6  # the run's verdict, not recomputed
    assert suite["failed"] is True
    assert dict(map(tuple, suite["other"])) == {"custom.calls.input": 50, "something_new": "[1,2]"}
    # the summary's totals, not recomputed and not listed again as "more"
    assert {k: suite["totals"][k] for k in entry["totals"]} == entry["totals"]
    assert data["run"]["notes"] == ["hello"]


def test_without_a_summary_the_numbers_are_computed_from_the_rollouts(tmp_path: Path) -> None:
    r0, r1 = row(0), row(1)
    trials = [outcome(r0, 0, 0, 1.0), outcome(r0, 0, 1, 0.0), outcome(r1, 1, 0, 1.0), outcome(r1, 1, 1, None)]
    data = report_data(write_run(tmp_path, trials))
    numbers = data["suites"][0]["numbers"]
    expected = suite_stats({task_hash(r0): [1.0, 0.0], task_hash(r1): [1.0]}, 1.0, {task_hash(r1): 1})
    assert numbers["source"] == "rollouts"
    assert numbers["mean_reward"] == expected.mean_reward
    assert (numbers["tasks"], numbers["trials"], numbers["errors"]) == (2, 3, 1)
    assert any(SUMMARY_FILE in note for note in data["run"]["report_notes"])


def test_without_a_summary_the_totals_are_the_judges_on_the_rollouts(tmp_path: Path) -> None:
    r0 = row(0)
    latencies = [0.1, 0.2, 0.3, 0.4, 2.0]
    trials = [outcome(r0, 0, i, 1.0, latency=v, attempts=2 if i == 4 else 1) for i, v in enumerate(latencies)]
    trials.append(outcome(r0, 0, 5, None, latency=1.0, attempts=3))
    totals = report_data(write_run(tmp_path, trials))["suites"][0]["totals"]
    latency = (totals["latency_sum_s"], totals["latency_p50_s"], totals["latency_p90_s"], totals["latency_max_s"])
    assert latency == (4.0, 0.3, 2.0, 2.0)  # nearest-rank, as judge.totals computes them for a run
    assert (totals["trials"], totals["trials_with_usage"]) == (6, 5)
    assert (totals["input_tokens"], totals["output_tokens"], totals["total_tokens"]) == (50, 25, 75)
    assert totals["retries"] == 3


def test_a_gate_links_to_the_tasks_whose_own_value_fails_it_worst_first(tmp_path: Path) -> None:
    rows = [row(i) for i in range(4)]
    rewards = [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    trials = [
        outcome(r, i, j, w) for i, (r, ws) in enumerate(zip(rows, rewards, strict=True)) for j, w in enumerate(ws)
    ]
    trials.append(outcome(rows[0], 0, 3, None))
    entry = {
        "gates": {
            "pass@2>=0.9": {"value": 0.5, "passed": False, "reason": ""},
            "mean_reward>=0.5": {"value": 0.5, "passed": True, "reason": ""},
            "error_rate<=0": {"value": 0.07, "passed": False, "reason": ""},
            "pass^3>=1": {"value": 0.25, "passed": False, "reason": ""},
        }
    }
    data = report_data(write_run(tmp_path, trials, entry))
    ids = [t["hash"] for t in data["tasks"]]
    gates = {g["label"]: [ids[i] for i in g["tasks"]] for g in data["suites"][0]["gates"]}
    h = [task_hash(r)[:12] for r in rows]
    # pass@2 per task: 1, 2/3 (1 - C(2,2)/C(3,2)), 0, 1
    assert gates["pass@2>=0.9"] == [h[2], h[1]]
    assert gates["mean_reward>=0.5"] == [h[2], h[1]]
    assert gates["error_rate<=0"] == [h[0]]
    assert gates["pass^3>=1"] == [h[1], h[2], h[3]]  # all at 0: dataset order
    assert data["suites"][0]["gates"][0]["tasks_are"] == "tasks whose own pass@2 is not >= 0.9"


def test_baseline_view_puts_new_failures_and_fixes_first_with_every_tasks_value_before(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    spec = Spec(tasks=8, repeats=2, seed=3, difficulty=[1.0, 1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.0])
    run = make_run(tmp_path / "run", [spec], baseline=base, baseline_shift=0.0, min_reward=1.0)
    summary = json.loads((run / SUMMARY_FILE).read_text())["suites"][spec.suite]["baseline"]

    data = report_data(run, base)
    suite = data["suites"][0]
    baseline = suite["baseline"]
    assert baseline["source"] == str(base)
    assert baseline["mean_delta"] == summary["mean_delta"]
    assert baseline["new_failures_count"] == len(summary["new_failures"])
    changes = [data["tasks"][i]["baseline"].get("change") for i in baseline["changed"]]
    assert changes == sorted(changes, key=lambda c: {"new_failure": 0, "fixed": 1, None: 2}[c])
    for task in data["tasks"]:
        assert "before" in task["baseline"]
        if task["baseline"]["before"] is not None and task["mean"] is not None:
            assert task["baseline"]["delta"] == pytest.approx(task["mean"] - task["baseline"]["before"])
        assert task.get("regressed", False) == (
            task["baseline"].get("change") == "new_failure" or (task["baseline"]["delta"] or 0) < 0
        )
    new_failures = {
        data["tasks"][i]["hash"]
        for i in baseline["changed"]
        if data["tasks"][i]["baseline"].get("change") == "new_failure"
    }
    assert new_failures == {h[:12] for h in summary["new_failures"]}

    without_file = report_data(run)["suites"][0]["baseline"]
    assert without_file["source"] is None
    assert {data["tasks"][i]["hash"] for i in without_file["changed"]} == {
        h[:12] for h in summary["new_failures"] + summary["fixed"]
    }


def test_flaky_tasks_named_by_the_summary_count_too(tmp_path: Path) -> None:
    r0, r1 = row(0), row(1)
    trials = [outcome(r0, 0, 0, 1.0), outcome(r0, 0, 1, 1.0), outcome(r1, 1, 0, 0.0), outcome(r1, 1, 1, 0.0)]
    listed = f"{SUITE}::{task_hash(r1)[:12]}"
    data = report_data(write_run(tmp_path, trials, {"flaky_tasks": [{"nodeid": listed, "rate": 0.5}]}))
    assert [data["tasks"][i]["id"] for i in data["suites"][0]["flaky"]] == [listed]
    assert by_hash(data)[task_hash(r1)[:12]]["flaky"] is True


def test_trajectory_steps_and_prompt_roles(tmp_path: Path) -> None:
    r0 = row(0)
    trial = outcome(r0, 0, 0, 1.0)
    assert trial.answer is not None
    trial.answer["response"]["output"] = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "name": "add", "arguments": '{"a": 0}'},
        {"type": "function_call_output", "output": "0"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "so 0"}]},
    ]
    (trial_data,) = report_data(write_run(tmp_path, [trial]))["tasks"][0]["trials"]
    assert trial_data["answer"] == "so 0"
    assert trial_data["steps"] == [["reasoning", "think"], ["call", 'add({"a": 0})'], ["result", "0"]]
    params = {
        "instructions": "be brief",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    }
    assert prompt_text(params) == "[instructions] be brief\n\n[user] hi"
    assert prompt_text({"input": "plain"}) == "plain"


def test_texts_are_clipped_and_say_how_much_is_left_out(tmp_path: Path) -> None:
    r0 = row(0)
    data = report_data(write_run(tmp_path, [outcome(r0, 0, 0, 1.0, answer_text="y" * 50_000)]))
    answer = data["tasks"][0]["trials"][0]["answer"]
    assert answer.startswith("y" * 20_000)
    assert answer.endswith("[+30000 chars]")


def test_a_gym_run_folder_without_pytest_gyms_keys_still_reads(tmp_path: Path) -> None:
    records = [
        {"reward": 1.0, "_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "agent"}},
        {"reward": 0.0, "_ng_task_index": 0, "_ng_rollout_index": 1, "agent_ref": {"name": "agent"}},
        {"reward": 0.0, "_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": {"name": "agent"}},
    ]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + "{torn")
    data = report_data(tmp_path)
    assert [s["name"] for s in data["suites"]] == ["agent"]
    assert [(t["hash"], t["n"], t["mean"]) for t in data["tasks"]] == [("index-0", 2, 0.5), ("index-1", 1, 0.0)]
    assert "report.html" in str(build_report(tmp_path))


def test_gyms_own_metrics_and_the_run_settings_are_shown(tmp_path: Path) -> None:
    run = write_run(tmp_path, [outcome(row(0), 0, 0, 1.0)], {})
    write_aggregate_metrics(
        run, [{"agent_ref": {"name": "agent"}, "agent_metrics": {}, "key_metrics": {"mean/reward": 1.0}}]
    )
    (run / "pytest_gym_run.json").write_text(
        json.dumps({"basis": {"agent": "agent", "reward_key": "reward", "model": None}})
    )
    data = report_data(run)
    assert data["run"]["gym_metrics"] == [{"agent": "agent", "metrics": {"mean/reward": 1.0}}]
    assert data["run"]["settings"] == {"agent": "agent", "reward_key": "reward"}


# -- the page ----------------------------------------------------------------------------------------------


def test_secrets_never_reach_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-very-secret-value-123"
    r0 = row(0, note=f"key {secret}", api_key="plain-text-key", auth={"headers": {"x-token": "nested-token"}})
    run = tmp_path / "run"
    trials = [
        outcome(r0, 0, 0, 1.0, answer_text=f"here: {secret} and Bearer abcdef123456", password="hunter22"),
        outcome(r0, 0, 1, None, error=f"HTTP 401: Authorization: Bearer {secret}"),
    ]
    write_run(run, trials, {"gates": {}, "comment": f"leaked {secret}", "service": {"password": "summary-pw"}})
    monkeypatch.setenv("GYM_POLICY_API_KEY", secret)
    html = build_report(run).read_text()
    for leaked in (secret, "plain-text-key", "hunter22", "abcdef123456", "nested-token", "summary-pw"):
        assert leaked not in html
    data = page_data(html)
    task = data["tasks"][0]
    assert task["fields"]["api_key"] == "***"
    assert task["trials"][0]["fields"]["password"] == "***"
    assert task["trials"][0]["answer"] == "here: *** and Bearer ***"


def test_embedded_json_cannot_close_its_script_and_reads_back_the_same(tmp_path: Path) -> None:
    hostile = "</script><script>alert(1)</script><!-- & \u2028 \u2029 \ud800"
    hostile_row = row(0, note=hostile.replace("\ud800", ""))
    run = write_run(tmp_path, [outcome(hostile_row, 0, 0, 1.0, answer_text=hostile)], {})
    html = build_report(run).read_text()
    assert "<script>alert(1)" not in html
    assert html.count("</script>") == 2  # the data's and the page script's own
    data = page_data(html)
    assert data["tasks"][0]["trials"][0]["answer"].startswith("</script><script>alert(1)</script><!-- & \u2028")
    assert data["tasks"][0]["fields"]["note"].startswith("</script>")
    assert "<" not in embed_json({"a": "<b>"})


def test_the_page_reads_without_javascript(tmp_path: Path) -> None:
    """Suite numbers, gates and every chart are in the HTML itself; only the task table needs the script."""
    run = make_run(tmp_path / "run", [Spec(tasks=10, repeats=3, error_every=7)], baseline=tmp_path / "b.json")
    html = build_report(run, baseline=tmp_path / "b.json").read_text()
    static = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    summary = json.loads((run / SUMMARY_FILE).read_text())["suites"]["evals/mcqa.jsonl"]
    assert f"<b>{summary['mean_reward']:.3f}</b>" in static
    assert f"<b>{summary['tasks']}</b>" in static
    for label in summary["gates"]:
        assert f"<code>{label.replace('>', '&gt;')}</code>" in static
    for chart in ("rewards", "passk", "latency", "grid", "baseline"):
        assert f'data-chart="{chart}"' in static
    assert "<noscript>" in static
    assert "http://" not in static
    assert "https://" not in static
    grid = re.search(r'data-chart="grid" data-order="([0-9,]+)"', html)
    assert grid is not None
    assert sorted(map(int, grid.group(1).split(","))) == list(range(10))


def test_cli_writes_the_report(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [Spec(tasks=3, repeats=2)])
    target = tmp_path / "out" / "page.html"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gym", "report", str(run), "-o", str(target)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(target)
    assert "<!doctype html>" in target.read_text()
    missing = subprocess.run(
        [sys.executable, "-m", "pytest_gym", "report", str(tmp_path / "nope")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert missing.returncode == 2
    assert "is not a folder" in missing.stderr
    assert build_report(run) == run / "report.html"


@pytest.mark.runtime
def test_ten_thousand_trials_make_a_page_of_a_few_mb_in_seconds(tmp_path: Path) -> None:
    spec = Spec(tasks=2500, repeats=4, error_every=97, tool_calls=True, prompt_chars=600, answer_chars=300)
    run = make_run(tmp_path / "run", [spec], baseline=tmp_path / "base.json")
    started = time.perf_counter()
    page = build_report(run, baseline=tmp_path / "base.json")
    took = time.perf_counter() - started
    size = page.stat().st_size
    print(f"10,000 trials: {size / 1e6:.2f} MB in {took:.1f} s")
    assert size < 5_000_000
    assert took < 60  # a few seconds here; generous for a loaded CI machine
    data = page_data(page.read_text())
    assert sum(len(t["trials"]) for t in data["tasks"]) == 10_000


# -- in a real browser -------------------------------------------------------------------------------------


@pytest.mark.browser
def test_synthetic_report_in_a_browser(browser: Any, tmp_path: Path) -> None:
    specs = [Spec(tasks=150, repeats=3, error_every=11, tool_calls=True), Spec(suite="evals/b.jsonl", tasks=5, seed=9)]
    run = make_run(tmp_path / "run", specs, baseline=tmp_path / "b.json")
    page = build_report(run, baseline=tmp_path / "b.json")
    data = page_data(page.read_text())
    browser.get(page.as_uri())
    assert rows_shown(browser) == 100  # the first page of 155 tasks
    assert browser.find_element("css selector", ".count").text == "showing 100 of 155 matching tasks (155 in all)"

    click(browser, 'button[data-filter="errored"]')
    errored = sum(1 for t in data["tasks"] if t["errors"])
    assert rows_shown(browser) == min(100, errored)

    click(browser, 'button[data-filter="all"]')
    click(browser, 'th[data-key="mean"]')
    lowest = min(t["mean"] for t in data["tasks"] if t["mean"] is not None)
    assert browser.find_element("css selector", "table.tasks tr.row td.num").text.endswith(f"{lowest:.3f}")
    assert browser.find_element("css selector", 'th[data-key="mean"]').get_attribute("aria-sort") == "ascending"
    search = browser.find_element("css selector", 'input[type="search"]')
    search.send_keys(data["tasks"][42]["hash"])
    time.sleep(0.5)  # the search waits for typing to pause
    assert rows_shown(browser) == 1

    click(browser, ".gate-link")
    gate = data["suites"][0]["gates"][0]
    assert rows_shown(browser) == min(100, len(gate["tasks"]))
    assert gate["label"] in browser.find_element("css selector", ".active-chip").text

    # A click on the grid opens the task of that cell.
    browser.execute_script(
        "var g = document.querySelector('svg[data-chart=grid]'); var b = g.getBoundingClientRect();"
        "var s = b.width / g.viewBox.baseVal.width;"
        "g.dispatchEvent(new MouseEvent('click', {bubbles: true, clientX: b.left + (Number(g.dataset.left) + 2) * s,"
        " clientY: b.top + (Number(g.dataset.top) + 2) * s}));"
    )
    opened = browser.find_elements("css selector", "tr.detail")
    assert len(opened) == 1
    worst = browser.execute_script("return document.querySelector('svg[data-chart=grid]').dataset.order.split(',')[0]")
    assert opened[0].get_attribute("data-i") == worst
    assert f"pytest '{data['tasks'][int(worst)]['suite']}::" in opened[0].text
    assert console_errors(browser) == []


def test_an_empty_run_folder_gives_a_page_that_says_so(tmp_path: Path) -> None:
    data = report_data(tmp_path)
    assert (data["suites"], data["tasks"]) == ([], [])
    html = build_report(tmp_path).read_text()
    assert "no trials and no summary" in html


def test_every_figure_on_the_page_is_the_summarys(tmp_path: Path) -> None:
    """The page computes no statistic of its own: the numbers, totals and gates equal the summary's, and the page
    text shows the summary's latency percentiles (a 40-task x 4 run, a tenth of the trials errored)."""
    run_dir = make_run(
        tmp_path / "run",
        [Spec(tasks=40, repeats=4, error_every=10, difficulty=[0.2 + 0.015 * i for i in range(40)])],
        gates=["mean_reward>=0.9", "pass@4>=0.5"],
    )
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    data = report_data(run_dir)
    for suite in data["suites"]:
        entry = summary["suites"][suite["name"]]
        numbers = suite["numbers"]
        for key in ("tasks", "trials", "errors", "error_rate", "mean_reward", "ci_low", "ci_high", "pass_at"):
            assert numbers[key] == entry[key], key
        assert suite["totals"] == entry["totals"]
        assert {g["label"]: g["value"] for g in suite["gates"]} == {k: g["value"] for k, g in entry["gates"].items()}
        assert suite["other"] == []  # nothing of the summary listed twice
    page = build_report(run_dir).read_text()
    totals = summary["suites"][data["suites"][0]["name"]]["totals"]
    for q in ("p50", "p90", "p99"):
        shown = f"{q} {totals[f'latency_{q}_s']:.3g}"
        assert shown in page, shown
    assert "p95" not in page


# -- hostile Gym text (issue 20) -----------------------------------------------------------------------------


def test_bidi_controls_from_gym_never_reach_the_page(tmp_path: Path) -> None:
    """U+202E and U+2066 make a page show text in another order than it says: dropped like other controls."""
    tricky = "pay \u202egnp.exe\u202c and \u2066admin\u2069"
    r0 = row(0, note=tricky)
    run = write_run(tmp_path, [outcome(r0, 0, 0, 0.0, answer_text=tricky, verdict=tricky)], {"gates": {}})
    write_aggregate_metrics(
        run, [{"agent_ref": {"name": "agent"}, "agent_metrics": {}, "key_metrics": {f"mean/{tricky}": 1.0}}]
    )
    html = build_report(run).read_text(encoding="utf-8")
    for control in ("\u202e", "\u202c", "\u2066", "\u2069"):
        assert control not in html
        assert control.encode("unicode_escape").decode() not in html.lower()
    task = page_data(html)["tasks"][0]
    assert task["trials"][0]["answer"] == "pay gnp.exe and admin"
    assert task["fields"]["note"] == "pay gnp.exe and admin"


def test_a_lone_surrogate_metric_name_and_huge_rewards_still_give_a_page(tmp_path: Path) -> None:
    trials = [outcome(row(i), i, 0, reward) for i, reward in enumerate((1.7e308, -1.7e308, 1.0))]
    trials += [outcome(row(0), 0, 1, 1.7e308), outcome(row(1), 1, 1, 1.7e308)]  # a mean beyond any float
    run = write_run(tmp_path, trials, None)
    write_aggregate_metrics(
        run, [{"agent_ref": {"name": "agent"}, "agent_metrics": {}, "key_metrics": {"mean/\ud800x": 1.0}}]
    )
    page = build_report(run)
    html = page.read_text(encoding="utf-8")
    data = page_data(html)
    assert len(data["tasks"]) == 3
    assert data["run"]["gym_metrics"] == [{"agent": "agent", "metrics": {"mean/x": 1.0}}]


def test_the_page_is_the_same_with_the_compiled_template_cached_fresh_or_without_a_usable_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template is compiled once per machine (Jinja's bytecode cache); a cache folder that cannot be used,
    or a cached file that is not Jinja's, changes nothing on the page."""
    import jinja2

    from pytest_gym.report import html

    records = [{"reward": r, "_ng_task_index": i, "_ng_rollout_index": 0} for i, r in enumerate((1.0, 0.0))]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    data = report_data(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(jinja2.FileSystemBytecodeCache, "__init__", _cache_in(cache))
    fresh = html.render(data)
    assert list(cache.iterdir()), "the compiled template was not cached"
    assert html.render(data) == fresh  # from the cache
    for stored in cache.iterdir():
        stored.write_bytes(b"not a compiled template")
    assert html.render(data) == fresh

    def unusable(self: object, *args: object) -> None:
        raise RuntimeError("The cache directory is not safe to use")  # what Jinja says of a foreign folder

    monkeypatch.setattr(jinja2.FileSystemBytecodeCache, "__init__", unusable)
    assert html.render(data) == fresh


def _cache_in(folder: Path) -> Any:
    import jinja2

    original = jinja2.FileSystemBytecodeCache.__init__

    def init(self: Any, *args: object) -> None:
        original(self, str(folder))

    return init


def test_gyms_percentages_are_labelled_apart_from_our_fractions(tmp_path: Path) -> None:
    run = write_run(tmp_path, [outcome(row(0), 0, 0, 1.0)], {})
    metrics = {"mean/reward": 1.0, "pass@1/accuracy": 100.0, "majority@2/accuracy": 50.0}
    write_aggregate_metrics(run, [{"agent_ref": {"name": "agent"}, "agent_metrics": {}, "key_metrics": metrics}])
    page = render(report_data(run))
    section = page[page.index("Gym's own metrics") :]
    assert "percentages (0-100)" in section
    assert "fractions (0-1)" in section
    shown = re.findall(r"<dt>([^<]+)</dt><dd>([^<]*)(?:<span class=\"muted\">([^<]*)</span>)?</dd>", section)
    assert [(key, unit) for key, _, unit in shown][:3] == [
        ("mean/reward", ""),
        ("pass@1/accuracy", "% (0-100)"),
        ("majority@2/accuracy", "% (0-100)"),
    ]
