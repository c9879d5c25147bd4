"""--gym-baseline-run: the answer-level comparison of two run folders (which tasks flipped or moved, each with
both final answers), the terminal's top flips, and the report's Changes section (both runs side by side,
differing words marked); for a run of its own, a merge of shards, and a run judged before the comparison."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.report.changes import marked
from pytest_gym.report.html import build_report
from pytest_gym.runfolder.diff import ANSWER_CHARS, changes_summary, diff_runs
from pytest_gym.runfolder.rollouts import RunFolderWriter
from tests.helpers.mcqa_standin import McqaGym, mcqa_gym, rows, run, write_dataset

HASHES = [task_hash(r) for r in rows()]  # q0..q4 expect B, C, I, E, E
SUITE = "data.jsonl"


def page_data(html: str) -> Any:
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1))


def trial(index: int, repeat: int, reward: float | None, text: str = "", **extra: Any) -> TrialOutcome:
    row = rows()[index]
    digest = HASHES[index]
    base: dict[str, Any] = {
        "nodeid": f"{SUITE}::{digest[:12]}[r{repeat}]", "task_hash": digest, "repeat": repeat, "line": index + 1,
        "dataset": SUITE, "request": {**row, "_ng_task_index": index, "_ng_rollout_index": repeat}, "agent": "a",
    }  # fmt: skip
    if reward is None:
        return TrialOutcome(**base, error="HTTP 500 from /run: boom", error_class="http_status", http_status=500)
    message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    answer = {"response": {"output": [message]}, "reward": reward, "expected_answer": row["expected_answer"], **extra}
    return TrialOutcome(**base, reward=reward, answer=answer)


def folder(path: Path, trials: list[TrialOutcome]) -> Path:
    with RunFolderWriter(path) as writer:
        for t in trials:
            writer.record(t)
    return path


def judged(suite: str) -> tuple[float, Any]:
    return 1.0, "all"


# -- which tasks changed --------------------------------------------------------------------------------------


def test_flips_and_moves_with_the_answers_that_show_them(tmp_path: Path) -> None:
    base = folder(tmp_path / "base", [
        trial(0, 0, 1.0, "B"), trial(0, 1, 1.0, "B"),      # passes, then fails: new failure
        trial(1, 0, 0.0, "E"), trial(1, 1, 0.0, "E"),      # fails, then passes: fixed
        trial(2, 0, 0.5, "half"), trial(2, 1, 0.5, "half"),  # fails both times, mean moves: moved
        trial(3, 0, 1.0, "E"), trial(3, 1, 1.0, "E"),      # unchanged
        trial(4, 0, 1.0, "E"),                              # only in the baseline run's folder... and here
    ])  # fmt: skip
    now = folder(tmp_path / "now", [
        trial(0, 0, 1.0, "B"), trial(0, 1, 0.0, "The answer is D, surely."),
        trial(1, 0, 1.0, "C"), trial(1, 1, 1.0, "C"),
        trial(2, 0, 0.5, "half"), trial(2, 1, 0.0, "none"),
        trial(3, 0, 1.0, "E"), trial(3, 1, 1.0, "E"),
        trial(4, 0, None),                                  # every trial errored now: no verdict, not compared
    ])  # fmt: skip
    diff = diff_runs(now, base, judged)
    (suite,) = diff.suites.values()
    assert [(t.task_hash, t.kind) for t in suite.tasks] == [
        (HASHES[0], "new_failure"), (HASHES[1], "fixed"), (HASHES[2], "moved"),
    ]  # fmt: skip
    assert suite.shared_tasks == 4
    new_failure, fixed, moved = suite.tasks
    assert (new_failure.before_repeat, new_failure.after_repeat) == (0, 1)  # a passing one, then the failing one
    assert (fixed.before_repeat, fixed.after_repeat) == (0, 0)
    assert (moved.before_repeat, moved.after_repeat) == (1, 1)  # the repeat that changed most
    summary = changes_summary(suite, str(base), {HASHES[0]: 7})
    first = summary.tasks[0]
    assert (first.hash, first.line, first.kind) == (HASHES[0][:12], 7, "new_failure")
    assert (first.before_answer, first.after_answer) == ("B", "The answer is D, surely.")
    assert (first.before_rewards, first.after_rewards) == ([1.0, 1.0], [1.0, 0.0])
    assert (summary.new_failures, summary.fixed, summary.moved, summary.shared_tasks) == (1, 1, 1, 4)
    assert summary.tasks[2].before_mean == 0.5
    assert summary.tasks[2].after_mean == 0.25


def test_an_errored_trial_shows_its_error_and_answers_are_one_bounded_masked_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_POLICY_API_KEY", "sk-pytestgym-DIFF-0123456789")
    base = folder(tmp_path / "base", [trial(0, 0, 1.0, "B\n\nfine"), trial(0, 1, None)])
    long = "key sk-pytestgym-DIFF-0123456789 then " + "word " * 400
    now = folder(tmp_path / "now", [trial(0, 0, 0.0, long), trial(0, 1, 0.0, "x")])
    (suite,) = diff_runs(now, base, judged).suites.values()
    change = changes_summary(suite, "base").tasks[0]
    assert change.before_rewards == [1.0, None]
    assert change.before_answer == "B fine"
    assert "sk-pytestgym-DIFF" not in change.after_answer
    assert "\n" not in change.after_answer
    assert len(change.after_answer) <= ANSWER_CHARS + 40  # clean_text marks how much was cut


def test_a_suite_named_otherwise_in_the_baseline_run_is_matched_by_task_hash(tmp_path: Path) -> None:
    base = folder(tmp_path / "base", [trial(0, 0, 1.0, "B")])
    moved = TrialOutcome(**{**trial(0, 0, 0.0, "E").__dict__, "nodeid": f"evals/{SUITE}::{HASHES[0][:12]}[r0]"})
    now = folder(tmp_path / "now", [moved])
    diff = diff_runs(now, base, judged)
    assert [t.kind for t in diff.suites[f"evals/{SUITE}"].tasks] == ["new_failure"]
    assert diff_runs(now, base, judged, {"other.jsonl"}).suites == {}


def test_words_that_differ_are_marked() -> None:
    before, after = marked("The answer is \\boxed{E}.", "The answer is \\boxed{B}.")
    assert before == [["same", "The answer is \\boxed{"], ["del", "E"], ["same", "}."]]
    assert after == [["same", "The answer is \\boxed{"], ["ins", "B"], ["same", "}."]]
    assert marked("same", "same") == ([["same", "same"]], [["same", "same"]])


# -- through pytest ---------------------------------------------------------------------------------------------


@pytest.fixture
def gym(pytester: pytest.Pytester) -> Iterator[McqaGym]:
    pytester.makeini("[pytest]\n")
    write_dataset(pytester.path)
    with mcqa_gym() as server:
        yield server


def baseline_and_changed(pytester: pytest.Pytester, gym: McqaGym, *args: str) -> pytest.RunResult:
    """A baseline run answering E (q3, q4 pass), then a run answering B (q0 passes; q3, q4 fail)."""
    run(pytester, gym, "--gym-repeats", "2", "--gym-run-dir", "base").assert_outcomes(passed=4, failed=6)
    gym.default = "B"
    return run(pytester, gym, "--gym-repeats", "2", "--gym-baseline-run", "base", *args)


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_the_terminal_lists_the_top_flips_with_both_answers(
    pytester: pytest.Pytester, gym: McqaGym, xdist: tuple[str, ...]
) -> None:
    result = baseline_and_changed(pytester, gym, "--gym-run-dir", "run", *xdist)
    result.assert_outcomes(passed=2, failed=8)
    result.stdout.fnmatch_lines(
        [
            "  changes against the baseline run */base: 2 new failures, 1 fixed, 0 moved "
            "(of 5 tasks both runs measured)",
            f"    new failure {HASHES[3][:12]} (line 4): mean reward 1.000 -> 0.000",
            "      baseline r0: The answer is \\boxed{E}.",
            "      this run r0: The answer is \\boxed{B}.",
            f"    new failure {HASHES[4][:12]} (line 5): mean reward 1.000 -> 0.000",
            "      baseline r0: The answer is \\boxed{E}.",
            "      this run r0: The answer is \\boxed{B}.",
            f"    fixed {HASHES[0][:12]} (line 1): mean reward 0.000 -> 1.000",
            "      baseline r0: The answer is \\boxed{E}.",
            "      this run r0: The answer is \\boxed{B}.",
        ]
    )
    summary = json.loads((pytester.path / "run" / "pytest_gym_summary.json").read_text())
    assert summary["baseline_run"].endswith("/base")
    changes = summary["suites"][SUITE]["changes"]
    assert [(t["hash"], t["kind"]) for t in changes["tasks"]] == [
        (HASHES[3][:12], "new_failure"), (HASHES[4][:12], "new_failure"), (HASHES[0][:12], "fixed"),
    ]  # fmt: skip

    page = (pytester.path / "run" / "report.html").read_text()
    data = page_data(page)
    section = data["suites"][0]["changes"]
    assert [t["hash"] for t in section["tasks"]] == [HASHES[3][:12], HASHES[4][:12], HASHES[0][:12]]
    first = section["tasks"][0]
    assert [p["before"]["answer"] for p in first["repeats"]] == ["The answer is \\boxed{E}."] * 2
    assert [p["after"]["answer"] for p in first["repeats"]] == ["The answer is \\boxed{B}."] * 2
    assert first["prompt"] == "Question 3: pick a letter."
    assert ["extracted_answer", "E", "B", True] in first["fields"]
    assert "<del>E</del>" in page
    assert "<ins>B</ins>" in page
    assert '<span class="badge v-fail"' in page


def test_a_merge_of_shards_is_compared_with_the_baseline_run(pytester: pytest.Pytester, gym: McqaGym) -> None:
    run(pytester, gym, "--gym-repeats", "2", "--gym-run-dir", "base").assert_outcomes(passed=4, failed=6)
    gym.default = "B"
    for shard in (1, 2):
        run(pytester, gym, "--gym-repeats", "2", "--gym-shard", f"{shard}/2", "--gym-run-dir", f"shard{shard}")
    result = pytester.runpytest(
        "--gym-merge", "shard1", "--gym-merge", "shard2", "--gym-run-dir", "merged", "--gym-baseline-run", "base",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=8)
    result.stdout.fnmatch_lines(["  changes against the baseline run */base: 2 new failures, 1 fixed, 0 moved*"])
    data = page_data((pytester.path / "merged" / "report.html").read_text())
    assert len(data["suites"][0]["changes"]["tasks"]) == 3


def test_the_report_command_compares_a_run_judged_without_a_baseline_run(
    pytester: pytest.Pytester, gym: McqaGym
) -> None:
    run(pytester, gym, "--gym-run-dir", "base")
    gym.default = "B"
    run(pytester, gym, "--gym-run-dir", "run")
    no_changes = page_data(build_report(pytester.path / "run").read_text())
    assert no_changes["suites"][0]["changes"] is None
    page = build_report(pytester.path / "run", pytester.path / "page.html", baseline_run=pytester.path / "base")
    section = page_data(page.read_text())["suites"][0]["changes"]
    assert (section["new_failures"], section["fixed"]) == (2, 1)
    assert section["folder_read"] is True


def test_a_missing_baseline_run_folder_is_a_usage_error(pytester: pytest.Pytester, gym: McqaGym) -> None:
    result = run(pytester, gym, "--gym-baseline-run", "nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gym-baseline-run */nowhere is not a folder*"])


def test_the_baseline_file_remembers_the_baseline_run(pytester: pytest.Pytester, gym: McqaGym) -> None:
    base = ("--gym-baseline", "b.json")
    run(pytester, gym, *base, "--gym-update-baseline", "--gym-run-dir", "main", "--gym-baseline-run", "main")
    stored = json.loads((pytester.path / "b.json").read_text())
    assert stored["suites"][SUITE]["run"] == "main"
    gym.default = "B"
    result = run(pytester, gym, *base, "--gym-run-dir", "pr")
    result.stdout.fnmatch_lines(["  changes against the baseline run */main: 2 new failures, 1 fixed, 0 moved*"])
    # Remembered but not here (the artifact was not downloaded): a note, no comparison.
    (pytester.path / "main").rename(pytester.path / "elsewhere")
    result = run(pytester, gym, *base, "--gym-run-dir", "pr2")
    result.stdout.fnmatch_lines(["note: data.jsonl: the baseline run main that */b.json remembers is not here*"])
