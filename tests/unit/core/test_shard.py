"""--gym-shard without Gym: which shard a task goes to, balance, stability, collection and deferral wiring."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from pytest_gym.core.dataset import task_hash
from pytest_gym.core.shard import (
    ShardError,
    imbalance,
    imbalance_bound,
    jump_hash,
    parse_shard,
    shard_of,
    shard_sizes,
)
from pytest_gym.runfolder.runinfo import RUN_INFO_FILE

NO_GYM = ("--gym-cli", "/nonexistent/gym", "--gym-resources-server", "mcqa", "--gym-policy", "scripted")


def hashes(count: int, start: int = 0) -> list[str]:
    return [hashlib.sha256(f"row {i}".encode()).hexdigest() for i in range(start, start + count)]


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


# -- the assignment -----------------------------------------------------------------------------------


def test_jump_hash_matches_the_published_algorithm() -> None:
    # Values of the reference implementation (Lamping and Veach; the same in Go, Rust, ClickHouse).
    assert [jump_hash(256, 1024), jump_hash(0, 60), jump_hash(1, 60), jump_hash(2, 60)] == [520, 0, 55, 46]
    assert jump_hash(0xDEAD10CC, 666) == 361
    assert jump_hash(42, 57) == 43


def test_assignment_is_deterministic_and_in_range() -> None:
    sample = hashes(2000)
    for count in (1, 2, 3, 8, 17):
        first = [shard_of(h, count) for h in sample]
        assert first == [shard_of(h, count) for h in sample]
        assert set(first) == set(range(1, count + 1))
    # Pinned: a shard job of one pytest-gym version must agree with the merge of another.
    assert [shard_of(h, 3) for h in hashes(6)] == [shard_of(h, 3) for h in hashes(6)]
    assert shard_of("5feceb66ffc86f38" + "0" * 48, 3) == 3
    assert shard_of("d4735e3a265e16ee" + "0" * 48, 8) == 1


def test_one_more_shard_moves_only_the_tasks_it_takes() -> None:
    sample = hashes(10_000)
    moved = [h for h in sample if shard_of(h, 8) != shard_of(h, 9)]
    assert all(shard_of(h, 9) == 9 for h in moved)  # every moved task went to the new shard
    assert 0.08 < len(moved) / len(sample) < 0.14  # about 1/9


@pytest.mark.parametrize("tasks", [1_000, 10_000, 100_000])
@pytest.mark.parametrize("count", [2, 3, 8])
def test_shards_are_balanced_within_a_binomial_bound(tasks: int, count: int) -> None:
    sizes = shard_sizes(hashes(tasks), count)
    assert sum(sizes) == tasks
    assert imbalance(sizes) <= imbalance_bound(tasks, count)
    assert imbalance_bound(100_000, 8) < 0.05  # at 100k tasks, 8 shards: within 5% of an even split


# -- the option ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "3"}, "1/3"),  # GitLab counts from 1
        ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "1/3"),  # Buildkite from 0
        ({"CIRCLE_NODE_INDEX": "2", "CIRCLE_NODE_TOTAL": "3"}, "3/3"),
    ],
)
def test_auto_reads_the_ci_variables(environ: dict[str, str], expected: str) -> None:
    assert str(parse_shard("auto", environ)) == expected


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ("0/3", {}, "names no shard"),
        ("4/3", {}, "names no shard"),
        ("2of3", {}, "write I/N"),
        ("auto", {}, "found no CI shard variables"),
        ("auto", {"CI_NODE_INDEX": "x", "CI_NODE_TOTAL": "3"}, "are not numbers"),
        ("auto", {"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "3"}, "CI_NODE_INDEX=4"),
    ],
)
def test_bad_shards_explain_themselves(text: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(ShardError, match=re.escape(message)):
        parse_shard(text, environ)


def test_bad_shard_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_dataset(pytester.path / "data.jsonl", 3)
    result = pytester.runpytest("--gym-dataset", "data.jsonl", "--gym-shard", "3/2", *NO_GYM)
    result.stderr.fnmatch_lines(["*--gym-shard 3/2*names no shard*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = pytester.runpytest("--gym-dataset", "data.jsonl", "--gym-shard", "half", *NO_GYM)
    result.stderr.fnmatch_lines(["*invalid value 'half' for shard from command line (--gym-shard)*"])


# -- collection ------------------------------------------------------------------------------------------


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
