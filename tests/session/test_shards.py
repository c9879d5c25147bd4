"""--gym-shard through pytest, without Gym: a shard's collection, CI variables, the ini, -k, an empty shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.shard import shard_of
from pytest_gym.runfolder.layout import RUN_INFO_FILE

NO_GYM = ("--gym-cli=/bin/false", "--gym-resources-server", "mcqa", "--gym-policy", "scripted")


def rows(count: int) -> list[dict[str, object]]:
    return [
        {"responses_create_params": {"input": [{"role": "user", "content": f"question {i}"}]}, "expected_answer": "B"}
        for i in range(count)
    ]


def write_dataset(path: Path, count: int) -> list[str]:
    """The dataset's task hashes, in file order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = rows(count)
    path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    return [task_hash(r) for r in data]


def test_bad_shard_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_dataset(pytester.path / "data.jsonl", 3)
    result = pytester.runpytest("--gym-dataset", "data.jsonl", "--gym-shard", "3/2", *NO_GYM)
    result.stderr.fnmatch_lines(["*--gym-shard 3/2*names no shard*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = pytester.runpytest("--gym-dataset", "data.jsonl", "--gym-shard", "half", *NO_GYM)
    result.stderr.fnmatch_lines(["*invalid value 'half' for shard from command line (--gym-shard)*"])


def collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest("--co", "-q", "-p", "no:randomly", *args, *NO_GYM)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    return [line for line in result.stdout.lines if "::" in line]


def test_shards_partition_the_trials_and_keep_repeats_together(pytester: pytest.Pytester) -> None:
    task_hashes = write_dataset(pytester.path / "data.jsonl", 30)
    everything = collected(pytester, "--gym-dataset", "data.jsonl", "--gym-repeats", "3")
    parts = [
        collected(pytester, "--gym-dataset", "data.jsonl", "--gym-repeats", "3", "--gym-shard", f"{i}/3")
        for i in (1, 2, 3)
    ]
    assert sorted(line for part in parts for line in part) == sorted(everything)
    assert len(everything) == 90
    for index, part in enumerate(parts, start=1):
        ids = {line.split("::")[1].split("[")[0] for line in part}
        assert ids == {h[:12] for h in task_hashes if shard_of(h, 3) == index}
        assert len(part) == 3 * len(ids)  # every repeat of a task is in its task's shard
        assert part  # 30 tasks: no shard is empty


def test_appending_rows_moves_no_task(pytester: pytest.Pytester) -> None:
    path = pytester.path / "data.jsonl"
    write_dataset(path, 40)

    def shards() -> dict[str, int]:
        return {
            line: i
            for i in (1, 2, 3)
            for line in collected(pytester, "--gym-dataset", "data.jsonl", "--gym-shard", f"{i}/3")
        }

    before = shards()
    extra = rows(44)[40:]
    path.write_text(path.read_text() + "".join(json.dumps(r) + "\n" for r in extra), encoding="utf-8")
    after = shards()
    assert len(after) == 44
    assert {line: after[line] for line in before} == before  # every earlier task stayed in its shard


def test_ci_variables_only_with_auto(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    write_dataset(pytester.path / "data.jsonl", 12)
    monkeypatch.setenv("CI_NODE_INDEX", "2")
    monkeypatch.setenv("CI_NODE_TOTAL", "3")
    assert len(collected(pytester, "--gym-dataset", "data.jsonl")) == 12  # no surprise: no option, no split
    auto = collected(pytester, "--gym-dataset", "data.jsonl", "--gym-shard", "auto")
    assert auto == collected(pytester, "--gym-dataset", "data.jsonl", "--gym-shard", "2/3")


def test_the_ini_names_the_shard_too(pytester: pytest.Pytester) -> None:
    write_dataset(pytester.path / "data.jsonl", 12)
    pytester.makeini("[pytest]\ngym_dataset = data.jsonl\ngym_shard = 1/2\n")
    assert collected(pytester) == collected(pytester, "--gym-shard", "1/2")
    assert len(collected(pytester)) < 12


def test_k_narrows_within_the_shard(pytester: pytest.Pytester) -> None:
    write_dataset(pytester.path / "data.jsonl", 20)
    part = collected(pytester, "--gym-dataset", "data.jsonl", "--gym-shard", "1/2")
    first = part[0].split("::")[1].split("[")[0]
    assert collected(pytester, "--gym-dataset", "data.jsonl", "--gym-shard", "1/2", "-k", first) == [part[0]]


def test_a_shard_without_tasks_passes_and_records_what_it_was(pytester: pytest.Pytester) -> None:
    (only,) = write_dataset(pytester.path / "data.jsonl", 1)
    empty = next(i for i in (1, 2, 3) if i != shard_of(only, 3))
    result = pytester.runpytest(
        "--gym-dataset", "data.jsonl", "--gym-shard", f"{empty}/3", "--gym-run-dir", "run", *NO_GYM
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"*shard {empty}/3 holds none of the selected tasks*"])
    info = json.loads((pytester.path / "run" / RUN_INFO_FILE).read_text())
    assert info["shard"] == f"{empty}/3"
    assert info["repeats"] == 1
    assert info["datasets"][0]["path"] == "data.jsonl"
    assert len(info["datasets"][0]["sha256"]) == 64


def test_merge_and_shard_do_not_mix(pytester: pytest.Pytester) -> None:
    write_dataset(pytester.path / "data.jsonl", 2)
    result = pytester.runpytest("--gym-dataset", "data.jsonl", "--gym-shard", "1/2", "--gym-merge", ".")
    result.stderr.fnmatch_lines(["*--gym-merge judges all shards together; drop --gym-shard*"])
    result = pytester.runpytest("--gym-merge-allow-missing", "--gym-dataset", "data.jsonl")
    result.stderr.fnmatch_lines(["*--gym-merge-allow-missing goes with --gym-merge RUN_DIR*"])
