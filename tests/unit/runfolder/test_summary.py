"""The run folder's summary read back (history, exporters): what no run wrote is a ``SummaryError`` naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.judge.summary import SummaryError
from pytest_gym.runfolder.layout import SUMMARY_FILE
from pytest_gym.runfolder.summary import read_summary, write_summary


@pytest.mark.parametrize("k", ["\u00b2", "\u0663", "9" * 5000, "1.5", "-1", "10001", "0", "01", "00001", " 1"])
def test_a_pass_at_k_that_is_not_a_number_of_repeats_is_a_summary_error_naming_the_file(tmp_path: Path, k: str) -> None:
    """``str.isdigit`` takes "²" and "٣", which ``int`` refuses; ``int`` refuses more than 4300 digits. "01" would
    read as k 1 beside a "1" (two values for one k), and the report looks pass@1 up as "1"."""
    data = {"run_dir": str(tmp_path), "suites": {"qa": {"pass_at": {k: 1.0}}}}
    (tmp_path / SUMMARY_FILE).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SummaryError, match=f"{SUMMARY_FILE}: suite 'qa': pass_at has a k"):
        read_summary(tmp_path)


def test_a_pass_at_k_of_a_number_of_repeats_reads_back(tmp_path: Path) -> None:
    data = {"run_dir": str(tmp_path), "suites": {"qa": {"pass_at": {"1": 0.5, "10000": 1.0}}}}
    (tmp_path / SUMMARY_FILE).write_text(json.dumps(data), encoding="utf-8")
    summary = read_summary(tmp_path)
    assert summary is not None
    assert summary.suites["qa"].pass_at == {"1": 0.5, "10000": 1.0}


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("tasks", True, "suites.qa.tasks"),
        ("trials", "4", "suites.qa.trials"),
        ("mean_reward", True, "suites.qa.mean_reward"),
        ("error_rate", "0.1", "suites.qa.error_rate"),
    ],
)
def test_a_number_written_as_true_or_text_is_a_summary_error_naming_the_field(
    tmp_path: Path, field: str, value: object, where: str
) -> None:
    """A reviewer compares these (history, the PR comment against the baseline run): ``true`` is not 1."""
    data = {"run_dir": str(tmp_path), "suites": {"qa": {"tasks": 2, "trials": 4, "mean_reward": 0.5, field: value}}}
    (tmp_path / SUMMARY_FILE).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SummaryError, match=f"{SUMMARY_FILE}: {where}: "):
        read_summary(tmp_path)


def test_a_summary_a_run_wrote_reads_back_strictly_as_it_was(tmp_path: Path) -> None:
    data = {
        "run_dir": str(tmp_path),
        "suites": {"qa": {"tasks": 2, "trials": 4, "errors": 0, "mean_reward": 1, "ci_low": 0.4, "pass_at": {"1": 1}}},
    }
    written = write_summary(tmp_path, data["suites"])
    summary = read_summary(tmp_path)
    assert summary is not None
    assert summary.suites["qa"].tasks == 2
    assert summary.suites["qa"].mean_reward == 1.0
    assert summary.to_json()["suites"] == written["suites"]


def test_a_suite_named_after_a_file_name_that_is_not_utf8_reads_back(tmp_path: Path) -> None:
    """A lone surrogate (``os.fsdecode`` of a non-UTF-8 name) is JSON Python writes; the strict check takes it too."""
    name = "evals/caf\udce9.jsonl"
    write_summary(tmp_path, {name: {"tasks": 1, "trials": 2, "errors": 0, "mean_reward": 0.5}})
    summary = read_summary(tmp_path)
    assert summary is not None
    assert list(summary.suites) == [name]
    assert summary.suites[name].trials == 2
