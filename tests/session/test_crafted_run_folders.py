"""Run folders from elsewhere (another job's artifact, a fork): read bounded, refused with file and line, in seconds.

Each crafted folder once cost a RecursionError traceback per trial, all memory, or a process that never finished;
here each is a clear usage error (or, for the report, a page that says what it ignored) well within the timeouts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.outcome import TrialOutcome
from pytest_gym.core.settings import GymSettings
from pytest_gym.runfolder.layout import ROLLOUTS_FILE, RUN_INFO_FILE, SUMMARY_FILE
from pytest_gym.runfolder.rollouts import RunFolderWriter
from pytest_gym.runfolder.runinfo import dataset_entries, file_sha256, write_run_info
from tests.helpers.inner_runs import pytest_command
from tests.helpers.paths import ROOT

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "expected_answer": "B"}
DEEP = b"[" * 200_000 + b"\n"


def honest_folder(root: Path, name: str = "run", shard: str | None = None, repeats: int = 1) -> Path:
    """A folder as a (shard) run leaves it: one dataset row, ``repeats`` rewarded trials."""
    dataset = root / "data.jsonl"
    dataset.write_text(json.dumps(ROW) + "\n")
    run_dir = root / name
    digest = task_hash(ROW)
    with RunFolderWriter(run_dir) as writer:
        for repeat in range(repeats):
            request = {**ROW, "_ng_task_index": 0, "_ng_rollout_index": repeat}
            writer.record(
                TrialOutcome(
                    nodeid=f"data.jsonl::{digest[:12]}[r{repeat}]",
                    task_hash=digest,
                    repeat=repeat,
                    line=1,
                    dataset=str(dataset),
                    reward=1.0,
                    answer={"reward": 1.0, "response": {"output": []}},
                    request=request,
                )
            )
    extra = {}
    if shard is not None:
        extra = {"shard": shard, "repeats": repeats, "datasets": dataset_entries((str(dataset),), root)}
    write_run_info(run_dir, GymSettings(), **extra)
    return run_dir


def pytest_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    command = pytest_command(*args)
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def module(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest_gym", *args], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_deep_nesting_in_a_resumed_folder_is_a_usage_error_naming_file_and_line(tmp_path: Path) -> None:
    run_dir = honest_folder(tmp_path)
    with (run_dir / ROLLOUTS_FILE).open("ab") as fh:
        fh.write(DEEP)
        fh.write(b'{"after": 1}\n')
    result = pytest_in(
        tmp_path, "--gym-dataset", "data.jsonl", "--gym-resume", "run", "--gym-url", "http://127.0.0.1:9"
    )
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert f"{run_dir / ROLLOUTS_FILE}:2: JSON nested deeper than" in result.stderr
    assert "RecursionError" not in result.stdout + result.stderr


def test_a_torn_last_line_is_still_skipped(tmp_path: Path) -> None:
    run_dir = honest_folder(tmp_path)
    with (run_dir / ROLLOUTS_FILE).open("ab") as fh:
        fh.write(b'{"reward": 1.0, "_ng_rollout_ind')  # a run killed mid-write: no newline
    result = pytest_in(tmp_path, "--gym-dataset", "data.jsonl", "--gym-resume", "run", "--gym-run-dir", "again")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.parametrize("how", ["pytest", "module"])
def test_deep_nesting_in_a_shard_folder_refuses_the_merge(tmp_path: Path, how: str) -> None:
    shard = honest_folder(tmp_path, "shard", shard="1/1")
    with (shard / ROLLOUTS_FILE).open("ab") as fh:
        fh.write(DEEP)
        fh.write(b"{}\n")
    if how == "pytest":
        result = pytest_in(tmp_path, "--gym-merge", "shard")
        assert result.returncode == pytest.ExitCode.USAGE_ERROR
    else:
        result = module(tmp_path, "merge", "shard", "-o", "merged", "--rootdir", str(tmp_path))
        assert result.returncode == 2
    assert "shard/rollouts.jsonl:2: JSON nested deeper than" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_absurd_repeat_count_in_a_shards_run_info_is_refused(tmp_path: Path) -> None:
    shard = honest_folder(tmp_path, "shard", shard="1/1")
    info = json.loads((shard / RUN_INFO_FILE).read_text())
    info["repeats"] = 100_000_000
    (shard / RUN_INFO_FILE).write_text(json.dumps(info))
    result = pytest_in(tmp_path, "--gym-merge", "shard")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"{shard / RUN_INFO_FILE}: 'repeats' is 100000000, not a number of repeats from 1 to 100000" in result.stderr
    result = module(tmp_path, "merge", "shard", "-o", "merged", "--rootdir", str(tmp_path))
    assert result.returncode == 2
    assert "'repeats' is 100000000" in result.stderr


def test_a_summary_cannot_make_the_report_read_a_path_or_size_a_chart(tmp_path: Path) -> None:
    run_dir = honest_folder(tmp_path)
    (run_dir / SUMMARY_FILE).write_text(
        json.dumps(
            {
                "run_dir": str(run_dir),
                "suites": {
                    "data.jsonl": {
                        "tasks": 1,
                        "trials": 1,
                        "mean_reward": 1.0,
                        "pass_at": {"100000000000": 0.5},
                        "baseline": {"path": "/dev/zero", "file": "/dev/zero", "new_failures": []},
                    }
                },
            }
        )
    )
    result = module(tmp_path, "report", "run")
    assert result.returncode == 0, result.stderr
    assert "the summary is unusable" in result.stderr
    assert "pass_at has a k that is not a number from 1 to 10000" in result.stderr
    assert (run_dir / "report.html").stat().st_size < 2_000_000
    (run_dir / SUMMARY_FILE).write_text(
        json.dumps({"suites": {"data.jsonl": {"tasks": 1, "baseline": {"file": "/dev/zero", "path": "/dev/zero"}}}})
    )
    result = module(tmp_path, "report", "run")  # the summary's own paths are never followed
    assert result.returncode == 0, result.stderr


def test_an_index_far_beyond_the_run_is_ignored_in_seconds(tmp_path: Path) -> None:
    run_dir = honest_folder(tmp_path)
    record = json.loads((run_dir / ROLLOUTS_FILE).read_text().splitlines()[0])
    for index in (1_000_000_000, 1e9, -5, True):
        with (run_dir / ROLLOUTS_FILE).open("a") as fh:
            fh.write(json.dumps({**record, "_ng_rollout_index": index}) + "\n")
    result = module(tmp_path, "report", "run")
    assert result.returncode == 0, result.stderr
    result = pytest_in(tmp_path, "--gym-dataset", "data.jsonl", "--gym-resume", "run", "--gym-run-dir", "again")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert file_sha256(tmp_path / "data.jsonl")  # the dataset was read, not the crafted indices
