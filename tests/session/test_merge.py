"""Merging shard run folders without Gym: refusals, missing trials, the merged folder (Gym's aggregate recomputed:
tests/unit/runfolder/test_aggregate.py).

The shard folders here are written the way a shard run writes them (``pytest_gym_run.json`` with the shard,
repeats and datasets; one rollout record per trial); ``tests/gym/test_shards.py`` merges folders real shard
runs against a real Gym wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.jsonl import read_jsonl
from pytest_gym.core.shard import shard_of
from pytest_gym.runfolder.layout import AGGREGATE_FILE, FAILURES_FILE, MATERIALIZED_FILE, ROLLOUTS_FILE, RUN_INFO_FILE
from pytest_gym.runfolder.runinfo import dataset_entries, write_run_info
from tests.helpers.paths import ROOT

BASIS = {"agent": "a", "model": "m", "policy": "none", "reward_key": "reward"}
ROWS = [
    {"responses_create_params": {"input": [{"role": "user", "content": f"question {i}"}]}, "expected_answer": "B"}
    for i in range(12)
]
HASHES = [task_hash(r) for r in ROWS]


def reward(task: int, repeat: int) -> float:
    return float((task + repeat) % 3 != 0)


def make_shards(
    root: Path,
    count: int = 3,
    repeats: int = 2,
    basis: dict[str, Any] | None = None,
    fault: tuple[int, int] | None = None,
) -> list[Path]:
    """Shard folders ``shard-1`` .. ``shard-N`` under ``root`` for ``data.jsonl``, as shard runs leave them."""
    dataset = root / "data.jsonl"
    if not dataset.exists():
        dataset.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    folders = [root / f"shard-{i}" for i in range(1, count + 1)]
    for index, folder in enumerate(folders, start=1):
        write_run_info(
            folder,
            None,
            basis=basis or BASIS,
            shard=f"{index}/{count}",
            repeats=repeats,
            datasets=dataset_entries((str(dataset),), root),
            rootdir=str(root),
        )
        for name in (ROLLOUTS_FILE, FAILURES_FILE, MATERIALIZED_FILE):
            (folder / name).touch()
    for task, (row, h) in enumerate(zip(ROWS, HASHES, strict=True)):
        folder = folders[shard_of(h, count) - 1]
        for repeat in range(repeats):
            stamps = {"_ng_task_index": task, "_ng_rollout_index": repeat, "agent_ref": {"name": "a"}}
            ours = {
                "_pytest_gym_nodeid": f"data.jsonl::{h[:12]}[r{repeat}]",
                "_pytest_gym_task_hash": h,
                "_pytest_gym_attempts": 1,
            }
            with (folder / MATERIALIZED_FILE).open("a") as fh:
                fh.write(json.dumps({**row, **stamps}) + "\n")
            if (task, repeat) == fault:
                failure = {"_ng_failure_class": "agent_run_error", "_ng_failure_type": "http_500"}
                failure["_ng_failure_message"] = "HTTP 500 from /run: boom"
                with (folder / FAILURES_FILE).open("a") as fh:
                    fh.write(json.dumps({**failure, **stamps, **ours}) + "\n")
                continue
            record = {"reward": reward(task, repeat), "response": {"usage": {"input_tokens": 10 + task}}}
            with (folder / ROLLOUTS_FILE).open("a") as fh:
                fh.write(json.dumps({**record, **stamps, **ours}) + "\n")
    return folders


def merge_args(folders: list[Path]) -> list[str]:
    return [arg for folder in folders for arg in ("--gym-merge", folder.name)]


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest_gym", "merge", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def root(pytester: pytest.Pytester) -> Path:
    pytester.makeini("[pytest]\n")
    return pytester.path


# -- the merge as a pytest run --------------------------------------------------------------------------


def test_merge_judges_every_trial_of_the_shards_and_starts_nothing(pytester: pytest.Pytester, root: Path) -> None:
    folders = make_shards(root, fault=(4, 1))
    result = pytester.runpytest(
        *merge_args(folders), "--gym-gate", "mean_reward >= 0.9", "--gym-run-dir", "merged", "--junitxml", "m.xml"
    )
    low = sum(reward(t, r) < 1 for t in range(12) for r in range(2) if (t, r) != (4, 1))
    result.assert_outcomes(passed=23 - low, failed=low + 1, errors=1)  # + the failing gate; the fault is an error
    result.stdout.fnmatch_lines(
        [
            "*HTTP 500 from /run: boom*",
            "*gate mean_reward>=0.9: FAIL*",
            "*merge: 24 trials from 3 shard run folders (shards 1/3, 2/3, 3/3)*",
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    merged = root / "merged"
    assert len(read_jsonl(merged / ROLLOUTS_FILE)) == 23
    assert [r["_ng_rollout_index"] for r in read_jsonl(merged / FAILURES_FILE)] == [1]
    assert len(read_jsonl(merged / MATERIALIZED_FILE)) == 24
    (entry,) = json.loads((merged / AGGREGATE_FILE).read_text())
    assert entry["agent_ref"] == {"name": "a"}
    assert entry["agent_metrics"]["mean/reward"] == pytest.approx(1 - low / 23)
    info = json.loads((merged / RUN_INFO_FILE).read_text())
    assert [m["shard"] for m in info["merged_from"]] == ["1/3", "2/3", "3/3"]
    assert info["basis"] == BASIS
    assert "shard" not in info
    assert not (merged / "deployment.json").exists()


def test_merge_takes_datasets_and_repeats_from_the_shards_and_refuses_others(
    pytester: pytest.Pytester, root: Path
) -> None:
    folders = make_shards(root)
    result = pytester.runpytest(*merge_args(folders), "--gym-min-reward", "0", "--co", "-q")
    result.stdout.fnmatch_lines(["24 tests collected*"])
    result = pytester.runpytest(*merge_args(folders), "--gym-repeats", "3")
    result.stderr.fnmatch_lines(["*the shards ran with repeats 2, this run says 3*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (root / "other.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    result = pytester.runpytest(*merge_args(folders), "--gym-dataset", "other.jsonl")
    result.stderr.fnmatch_lines(["*the shards ran */data.jsonl, this run names */other.jsonl*"])


def test_a_shared_ini_shard_setting_does_not_make_the_merge_a_shard(pytester: pytest.Pytester, root: Path) -> None:
    folders = make_shards(root)
    pytester.makeini("[pytest]\ngym_shard = auto\n")
    result = pytester.runpytest(*merge_args(folders), "--gym-min-reward", "0")
    result.assert_outcomes(passed=24)


def test_k_narrows_the_merge(pytester: pytest.Pytester, root: Path) -> None:
    folders = make_shards(root)
    result = pytester.runpytest(*merge_args(folders), "--gym-min-reward", "0", "-k", "r1", "--gym-run-dir", "m")
    result.assert_outcomes(passed=12, deselected=12)
    result.stdout.fnmatch_lines(["*only the selected trials count*"])
    assert len(read_jsonl(root / "m" / ROLLOUTS_FILE)) == 12


def test_merge_under_xdist(pytester: pytest.Pytester, root: Path) -> None:
    folders = make_shards(root)
    result = pytester.runpytest(*merge_args(folders), "--gym-min-reward", "0", "-n", "2", "--gym-run-dir", "m")
    result.assert_outcomes(passed=24)
    assert len(read_jsonl(root / "m" / ROLLOUTS_FILE)) == 24
    assert (root / "m" / AGGREGATE_FILE).exists()
    # Workers cannot refuse the run: each missing trial is an error with the same message.
    result = pytester.runpytest(*merge_args(_drop_shard(folders)), "-n", "2", "--gym-min-reward", "0")
    absent = sum(shard_of(h, 3) == 2 for h in HASHES) * 2
    result.assert_outcomes(passed=24 - absent, errors=absent)
    result.stdout.fnmatch_lines(["*1 trials (1 tasks) were run by no shard given*shard 2/3, whose run folder*"])


# -- refusals --------------------------------------------------------------------------------------------


def _drop_shard(folders: list[Path]) -> list[Path]:
    return [folders[0], folders[2]]


def _twice(folders: list[Path]) -> list[Path]:
    return [*folders, folders[0]]


def _copied(folders: list[Path]) -> list[Path]:
    copy = folders[0].with_name("shard-1-copy")
    shutil.copytree(folders[0], copy)
    return [*folders, copy]


def _other_settings(folders: list[Path]) -> list[Path]:
    info = json.loads((folders[1] / RUN_INFO_FILE).read_text())
    (folders[1] / RUN_INFO_FILE).unlink()
    write_run_info(folders[1], None, basis={**BASIS, "model": "other-model"}, **{
        k: v for k, v in info.items() if k not in ("digest", "basis")
    })  # fmt: skip
    return folders


def _other_dataset(folders: list[Path]) -> list[Path]:
    info = json.loads((folders[2] / RUN_INFO_FILE).read_text())
    info["datasets"] = [{"path": "data.jsonl", "sha256": "0" * 64}]
    (folders[2] / RUN_INFO_FILE).write_text(json.dumps(info))
    return folders


def _other_split(folders: list[Path]) -> list[Path]:
    info = json.loads((folders[2] / RUN_INFO_FILE).read_text())
    info["shard"] = "3/4"
    (folders[2] / RUN_INFO_FILE).write_text(json.dumps(info))
    return folders


def _overlapping(folders: list[Path]) -> list[Path]:
    stolen = read_jsonl(folders[0] / ROLLOUTS_FILE)[0]
    with (folders[1] / ROLLOUTS_FILE).open("a") as fh:
        fh.write(json.dumps(stolen) + "\n")
    return folders


def _not_a_run(folders: list[Path]) -> list[Path]:
    (folders[1] / RUN_INFO_FILE).unlink()
    return folders


def _not_a_shard(folders: list[Path]) -> list[Path]:
    info = json.loads((folders[1] / RUN_INFO_FILE).read_text())
    del info["shard"]
    (folders[1] / RUN_INFO_FILE).write_text(json.dumps(info))
    return folders


def _dataset_changed(folders: list[Path]) -> list[Path]:
    dataset = folders[0].parent / "data.jsonl"
    dataset.write_text(dataset.read_text() + json.dumps({"responses_create_params": {"input": "new"}}) + "\n")
    return folders


def _interrupted(folders: list[Path]) -> list[Path]:
    """Shard 2 was killed: its last record is torn and later trials are not there."""
    path = folders[1] / ROLLOUTS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-3]) + lines[-3][:20])
    return folders


REFUSALS: list[tuple[Callable[[list[Path]], list[Path]], str]] = [
    (_drop_shard, "*trials (* tasks) were run by no shard given*belong to shard 2/3, whose run folder was not given*"),
    (_twice, "*shard-1 is given twice; give each shard's run folder once*"),
    (_copied, "*shard 1/3 is given twice: *shard-1 and *shard-1-copy (a copied or re-run folder?)*"),
    (_other_settings, "*shard-1 (shard 1/3) and *shard-2 (shard 2/3) were run with different settings (model differ)*"),
    (_other_dataset, "*the shards ran different datasets: *shard-1 (shard 1/3): data.jsonl (sha256 *shard-3*0000000*"),
    (_other_split, "*come from different splits (3 and 4 shards)*"),
    (_overlapping, "*1 tasks are in more than one shard folder, e.g. task * in *shard-1 (shard 1/3) and *shard-2*"),
    (_not_a_run, "*shard-2 has no readable pytest_gym_run.json: not a pytest-gym run folder*"),
    (_not_a_shard, "*shard-2 was not run as a shard (no --gym-shard *)*"),
    (_dataset_changed, "*dataset */data.jsonl changed since the shards ran*"),
    (
        _interrupted,
        "*were run by no shard given*without all of their trials (an interrupted or cancelled job?)*shard-2*",
    ),
]


@pytest.mark.parametrize(("spoil", "message"), REFUSALS, ids=[f.__name__.strip("_") for f, _ in REFUSALS])
def test_merges_that_cannot_be_one_run_are_refused(
    pytester: pytest.Pytester, root: Path, spoil: Callable[[list[Path]], list[Path]], message: str
) -> None:
    folders = spoil(make_shards(root))
    result = pytester.runpytest(*merge_args(folders), "--gym-run-dir", "merged")
    result.stderr.fnmatch_lines([f"ERROR: pytest-gym merge: {message}"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert not (root / "merged" / ROLLOUTS_FILE).exists()
    by_cli = cli(root, *(f.name for f in folders), "-o", "cli-merged")
    assert by_cli.returncode in (1, 2)
    assert "pytest-gym merge:" in by_cli.stderr
    assert not (root / "cli-merged" / ROLLOUTS_FILE).exists()


def test_allow_missing_judges_the_rest_and_says_what_is_missing(pytester: pytest.Pytester, root: Path) -> None:
    folders = make_shards(root)
    given = [folders[0], folders[2]]
    absent = sum(shard_of(h, 3) == 2 for h in HASHES) * 2
    result = pytester.runpytest(
        *merge_args(given), "--gym-merge-allow-missing", "--gym-min-reward", "0", "--gym-run-dir", "m"
    )
    result.assert_outcomes(passed=24 - absent, deselected=absent)
    result.stdout.fnmatch_lines(
        [f"note: {absent} trials (* tasks) were run by no shard given*shard 2/3*Deselected*allow-missing*"]
    )
    by_cli = cli(root, *(f.name for f in given), "-o", "cli-merged", "--allow-missing")
    assert by_cli.returncode == 0, by_cli.stderr
    assert "Merged without them (--allow-missing)" in by_cli.stderr
    assert len(read_jsonl(root / "cli-merged" / ROLLOUTS_FILE)) == 24 - absent


# -- python -m pytest_gym merge -----------------------------------------------------------------------


def test_cli_merges_into_one_gym_format_folder(root: Path) -> None:
    folders = make_shards(root, fault=(0, 0))
    result = cli(root, *(f.name for f in reversed(folders)), "-o", "out")
    assert result.returncode == 0, result.stderr
    assert "out: 23 rollouts, 1 failures, 24 materialized inputs from 3 shards (1/3, 2/3, 3/3)" in result.stdout
    out = root / "out"
    merged = read_jsonl(out / ROLLOUTS_FILE)
    shard_records = [r for f in folders for r in read_jsonl(f / ROLLOUTS_FILE)]
    assert merged == shard_records  # byte-for-byte copies, in shard order whatever the command line's order
    assert json.loads((out / AGGREGATE_FILE).read_text())[0]["agent_metrics"]["num_repeats"] == 2
    again = cli(root, *(f.name for f in folders), "-o", "out")
    assert again.returncode == 2
    assert "out exists and is not empty" in again.stderr
